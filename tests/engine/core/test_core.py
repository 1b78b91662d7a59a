"""``engine.core.core.EngineCore`` without Qt: the tiny random-weight model loaded, a reply generated, an embedder held
beside it, what is loaded reported; each job run on the calling thread, as the window's adapter and a server do."""

from __future__ import annotations

from typing import Any

from engine.core.core import EngineCore
from engine.core.jobs import GenerateJob, LoadFailure, LoadJob, QueuedJob, ReplyStarted, TaskJob
from engine.core.models import ModelRecord
from engine.events import Finished, Message
from engine.inputs import LoadSpec, SamplingConfig


class Recorder:
    """The core's ``Reports``, kept in order (what the window's adapter would emit as signals)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, Any]] = []

    def report_event(self, event: object) -> None:
        self.got.append(("event", event))

    def report_load_progress(self, stage: str, fraction: float) -> None:
        self.got.append(("progress", fraction))

    def report_loaded(self, facts: object) -> None:
        self.got.append(("loaded", facts))

    def report_load_failure(self, failure: LoadFailure) -> None:
        self.got.append(("load_failed", failure))

    def report_task_result(self, job_id: int, result: object) -> None:
        self.got.append(("task", result))

    def report_task_failure(self, job_id: int, message: str) -> None:
        self.got.append(("task_failed", message))

    def report_models(self, records: tuple[ModelRecord, ...]) -> None:
        self.got.append(("models", records))

    def of(self, kind: str) -> list[Any]:
        return [value for what, value in self.got if what == kind]


def _run(core: EngineCore, job: Any, job_id: int = 1) -> None:
    core.run(QueuedJob(job_id, job))


def test_a_load_is_reported_as_one_chat_model_and_a_reply_streams_from_it(tiny_model_dir, home):
    reports = Recorder()
    core = EngineCore(reports)
    _run(core, LoadJob(LoadSpec(str(tiny_model_dir), precision="fp32", device="cpu")))
    (facts,) = reports.of("loaded")
    assert core.models() == (ModelRecord(facts.name, "chat", facts.weights_bytes),) and facts.weights_bytes > 0
    assert reports.of("models")[-1] == core.models()
    _run(core, GenerateJob(7, (Message("user", "hi"),), SamplingConfig(temperature=0.0, max_new_tokens=4)), 2)
    events = reports.of("event")
    assert isinstance(events[0], ReplyStarted) and isinstance(events[-1], Finished)
    assert events[-1].reason == "length" and core.sessions.kept() == [7]
    core.release()
    assert core.models() == () and core.loaded is None


def test_an_embedder_is_held_beside_the_chat_model_within_the_budget(tiny_model_dir, home):
    reports = Recorder()
    core = EngineCore(reports)
    _run(core, LoadJob(LoadSpec(str(tiny_model_dir), precision="fp32", device="cpu")))
    chat = core.loaded
    embedder = object()  # what a task would build (engine.docs.embed): the shelf only keeps it
    _run(core, TaskJob(lambda _loaded, _cancel: core.hold("embedding", "bge-small", embedder, 1234)), 2)
    assert reports.of("task") == [embedder] and core.held("embedding") is embedder and core.held("chat") is chat
    assert [(r.kind, r.name) for r in core.models()] == [("chat", chat.facts.name), ("embedding", "bge-small")]
    core.shelf.budget_bytes = chat.facts.weights_bytes  # room for the chat model alone: the embedder goes
    core.hold("chat", chat.facts.name, chat, chat.facts.weights_bytes)
    assert [r.kind for r in core.models()] == ["chat"] and core.held("embedding") is None


def test_a_failed_load_keeps_nothing_and_a_bug_in_a_job_does_not_escape(tmp_path, home):
    reports = Recorder()
    core = EngineCore(reports)
    _run(core, LoadJob(LoadSpec(str(tmp_path / "missing"), device="cpu")))
    assert len(reports.of("load_failed")) == 1 and core.models() == ()
    _run(core, TaskJob(lambda _loaded, _cancel: 1 / 0, needs_model=False), 2)
    assert "division by zero" in reports.of("task_failed")[0]  # one line for the client; the core goes on


def test_the_embedding_model_is_loaded_once_onto_the_shelf_beside_the_chat_model(tiny_model_dir, home, tmp_path):
    from engine.docs.embed import TransformersEmbedder
    from tests.helpers.documents import make_tiny_encoder

    loads: list[TransformersEmbedder] = []

    def load() -> TransformersEmbedder:  # a real encoder, as engine.docs.embed loads the one in use
        loads.append(TransformersEmbedder(make_tiny_encoder(tmp_path / "encoder", ["alpha", "beta"]), name="tiny-bert"))
        return loads[-1]

    reports = Recorder()
    core = EngineCore(reports, load_embedder=load)
    _run(core, LoadJob(LoadSpec(str(tiny_model_dir), precision="fp32", device="cpu")))
    first = core.embedder()
    assert core.embedder() is first and len(loads) == 1  # kept: the next search or index reuses it
    assert core.attached_index.embedder() is first  # the forecast and the send retrieve with the shelf's
    chat = core.loaded.facts
    assert core.models() == (ModelRecord(chat.name, "chat", chat.weights_bytes),
                             ModelRecord("tiny-bert", "embedding", first.weights_bytes))
    assert first.weights_bytes > 0 and reports.of("models")[-1] == core.models()
