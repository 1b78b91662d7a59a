"""The bridge on the real engine and the tiny model: load, coalesced streaming, stop, tasks, errors, shutdown."""

from __future__ import annotations

import threading

import pytest

from dataclasses import replace

from app.runtime.bridge import Bridge
from engine.errors import BadInputError, ErrorKind
from engine.events import Message
from engine.inputs import LoadSpec, SamplingConfig
from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, plan  # noqa: F401

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]

GREEDY = SamplingConfig(temperature=0.0, top_k=0, top_p=1.0, repetition_penalty=1.0, top_logprobs=3)
HELLO = [Message("user", "Hello")]


def greedy(max_new_tokens: int) -> SamplingConfig:
    return replace(GREEDY, max_new_tokens=max_new_tokens)


@pytest.fixture
def bridge(qtbot, home):
    b = Bridge()
    yield b
    assert b.shutdown(5000) is True
    assert b.shutdown(5000) is True  # idempotent


@pytest.fixture
def loaded_bridge(qtbot, bridge, tiny_model_dir):
    with qtbot.waitSignal(bridge.model_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        bridge.load(LoadSpec(str(tiny_model_dir), "fp32", "cpu"))
    assert blocker.args[0].name == tiny_model_dir.name
    assert bridge.facts is blocker.args[0]
    qtbot.waitUntil(lambda: not bridge.is_busy(), timeout=5000)  # the load job's end follows model_loaded
    return bridge


class Recorder:
    """Every bridge signal, in arrival order."""

    def __init__(self, bridge: Bridge) -> None:
        self.log: list[tuple[str, tuple]] = []
        for name in ("generation_started", "prefill_progressed", "tokens_received", "stats_updated", "generation_finished",
                     "busy_changed"):
            getattr(bridge, name).connect(lambda *args, _n=name: self.log.append((_n, args)))

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    def of(self, name: str) -> list[tuple]:
        return [args for n, args in self.log if n == name]


def test_stream_is_coalesced_ordered_and_complete(qtbot, loaded_bridge):
    rec = Recorder(loaded_bridge)
    with qtbot.waitSignal(loaded_bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        assert loaded_bridge.generate(1, HELLO, greedy(40))
        assert loaded_bridge.is_busy() and loaded_bridge.is_generating()
    finished = blocker.args[0]
    qtbot.waitUntil(lambda: not loaded_bridge.is_busy(), timeout=5000)
    names = rec.names()
    assert names[0] == "busy_changed" and rec.of("busy_changed") == [(True,), (False,)]
    assert (names.index("generation_started") < names.index("prefill_progressed") < names.index("tokens_received")
            < names.index("generation_finished"))
    done, total = rec.of("prefill_progressed")[-1]
    assert done == total > 0
    assert "tokens_received" not in names[names.index("generation_finished"):]
    batches = rec.of("tokens_received")
    tokens = [t for _, batch in batches for t in batch]
    assert finished.reason == "length" and finished.metrics.generated_tokens == 40 == len(tokens)
    assert [t.index for t in tokens] == list(range(40))
    assert "".join(text for text, _ in batches) == finished.text
    assert len(batches) <= len(tokens)  # never more than one GUI update per token, usually far fewer
    assert all(len(t.top) == 3 for t in tokens)  # the inspector's candidates travelled with the tokens
    assert rec.of("stats_updated")  # live metrics came before the end
    print(f"\n40 tokens arrived in {len(batches)} GUI updates")


def test_second_generate_is_refused_while_one_runs_and_stop_cancels(qtbot, loaded_bridge, plan):
    plan.hold_decode_after = 8  # still running when the first tokens show, however fast this CPU
    rec = Recorder(loaded_bridge)
    with qtbot.waitSignal(loaded_bridge.tokens_received, timeout=REPLY_TIMEOUT_MS):
        assert loaded_bridge.generate(1, HELLO, greedy(200))
    assert not loaded_bridge.generate(1, [Message("user", "again")], GREEDY)
    with qtbot.waitSignal(loaded_bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        loaded_bridge.stop()
        loaded_bridge.stop()  # a second Stop is harmless
    finished = blocker.args[0]
    assert finished.reason == "cancelled"
    assert finished.metrics.generated_tokens < 200
    qtbot.wait(150)  # any straggler would arrive within a few flush periods
    names = rec.names()
    assert names.count("generation_finished") == 1
    assert "tokens_received" not in names[names.index("generation_finished"):]
    streamed = "".join(text for text, _ in rec.of("tokens_received"))
    assert streamed == finished.text  # the partial reply is whole: nothing lost, nothing after the end


def test_sessions_are_kept_per_conversation(qtbot, loaded_bridge):
    starts = []
    loaded_bridge.generation_started.connect(starts.append)
    history = list(HELLO)
    for _ in range(2):
        with qtbot.waitSignal(loaded_bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
            assert loaded_bridge.generate(7, history, greedy(8))
        history = history + [Message("assistant", blocker.args[0].text), Message("user", "More")]
    assert starts[0].reused_tokens == 0
    assert starts[1].reused_tokens > 0  # conversation 7's KV cache survived between turns


def test_a_bad_sampling_value_is_refused_before_it_reaches_the_bridge():
    with pytest.raises(BadInputError) as refused:
        replace(GREEDY, temperature=-1.0)  # no misspelt or out-of-range setting can be dropped on the way
    assert "temperature" in str(refused.value) and "\n" not in str(refused.value)


def test_error_inside_generation_is_a_finish_and_the_next_request_works(qtbot, loaded_bridge):
    with qtbot.waitSignal(loaded_bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        assert loaded_bridge.generate(1, [Message("user", "   ")], GREEDY)  # the engine refuses an empty message
    finished = blocker.args[0]
    assert finished.reason == "error" and "empty" in finished.error and "\n" not in finished.error
    with qtbot.waitSignal(loaded_bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        assert loaded_bridge.generate(1, HELLO, greedy(4))
    assert blocker.args[0].reason == "length"


def test_generate_without_model_finishes_with_error(qtbot, bridge):
    with qtbot.waitSignal(bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        assert bridge.generate(1, HELLO, GREEDY)
    assert blocker.args[0].reason == "error" and "no model loaded" in blocker.args[0].error


def test_tasks_run_on_the_worker_thread_with_the_model(qtbot, loaded_bridge):
    seen = {}

    def task(loaded, cancel):
        seen["thread"] = threading.current_thread()
        seen["cancel"] = cancel
        return loaded.facts.layers

    def failing(loaded, cancel):
        raise ValueError("boom\nsecond line")

    with qtbot.waitSignal(loaded_bridge.task_finished, timeout=REPLY_TIMEOUT_MS) as ok:
        task_id = loaded_bridge.submit_task(task)
    assert ok.args == [task_id, 2]
    assert seen["thread"] is not threading.main_thread() and isinstance(seen["cancel"], threading.Event)
    with qtbot.waitSignal(loaded_bridge.task_failed, timeout=REPLY_TIMEOUT_MS) as failed:
        bad_id = loaded_bridge.submit_task(failing)
    assert failed.args == [bad_id, "ValueError: boom"]


def test_stop_before_a_load_runs_cancels_it(qtbot, bridge, tiny_model_dir):
    with qtbot.waitSignal(bridge.load_failed, timeout=LOAD_TIMEOUT_MS) as blocker:
        bridge.load(LoadSpec(str(tiny_model_dir)))
        bridge.stop()
    failure = blocker.args[0]
    assert failure.kind is ErrorKind.CANCELLED and "cancelled" in failure.message
    assert failure.spec == LoadSpec(str(tiny_model_dir))
    qtbot.waitUntil(lambda: not bridge.is_busy(), timeout=5000)
    assert bridge.facts is None


def test_failed_load_keeps_previous_model(qtbot, loaded_bridge, tmp_path):
    before = loaded_bridge.facts
    with qtbot.waitSignal(loaded_bridge.load_failed, timeout=LOAD_TIMEOUT_MS) as blocker:
        loaded_bridge.load(LoadSpec(str(tmp_path / "missing")))
    failure = blocker.args[0]
    assert failure.kind is ErrorKind.NOT_FOUND and "missing" in failure.message and "\n" not in failure.message
    assert loaded_bridge.facts is before
    with qtbot.waitSignal(loaded_bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as done:
        assert loaded_bridge.generate(1, [Message("user", "Hi")], greedy(3))
    assert done.args[0].reason == "length"


def test_a_slot_that_shuts_the_bridge_down_mid_drain_still_gets_the_finish(qtbot, loaded_bridge):
    # A window closed from a tokens_received slot drains again inside the drain that called it. When
    # the whole reply was already taken from the buffer (a fast CPU, a busy GUI thread), the nested
    # drain must deliver that reply's Finished, once, after its tokens, and nothing stale after it.
    import time

    rec = Recorder(loaded_bridge)
    assert loaded_bridge.generate(1, HELLO, greedy(8))
    deadline = time.monotonic() + REPLY_TIMEOUT_MS / 1000
    while loaded_bridge.is_busy() and not any(type(e).__name__ == "Finished" for e in list(loaded_bridge._buffer._events)):
        assert time.monotonic() < deadline
        time.sleep(0.01)  # no event loop runs here: the whole reply piles up in the buffer

    finished_by_shutdown: list[bool] = []

    def close_now(*_args: object) -> None:  # what MainWindow.shutdown does, then it looks for the Finished
        loaded_bridge.tokens_received.disconnect(close_now)
        loaded_bridge.shutdown(5000)
        loaded_bridge.flush_pending()
        finished_by_shutdown.append("generation_finished" in rec.names())

    loaded_bridge.tokens_received.connect(close_now)
    loaded_bridge.flush_pending()
    names = rec.names()
    assert finished_by_shutdown == [True]
    assert names.count("generation_finished") == 1
    assert names.index("tokens_received") < names.index("generation_finished")
    assert not {"tokens_received", "stats_updated"} & set(names[names.index("generation_finished") + 1:])
    (finished,), = rec.of("generation_finished")
    assert finished.reason == "length" and finished.metrics.generated_tokens == 8


# ---------------------------------------------------------------- bounded sessions: the KV caches kept between replies


def _reply(qtbot, bridge, conversation_id: int, text: str = "Hello"):
    """One reply in ``conversation_id``; returns its ReplyStarted and Finished."""
    starts = []
    bridge.generation_started.connect(starts.append)
    try:
        with qtbot.waitSignal(bridge.generation_finished, timeout=REPLY_TIMEOUT_MS) as done:
            assert bridge.generate(conversation_id, [Message("user", text)], greedy(4))
    finally:
        bridge.generation_started.disconnect(starts.append)
    qtbot.waitUntil(lambda: not bridge.is_busy(), timeout=5000)  # the session's bytes are counted as the job ends
    return starts[0], done.args[0]


def test_the_least_recently_used_session_is_evicted_past_the_count_and_its_next_reply_says_so(qtbot, loaded_bridge,
                                                                                            monkeypatch):
    import engine.core.sessions

    loaded_bridge._worker.sessions.persistence = None  # memory alone (the disk: test_kv_persist.py)

    monkeypatch.setattr(engine.core.sessions, "MAX_SESSIONS", 2)
    for conversation in (1, 2):
        started, _ = _reply(qtbot, loaded_bridge, conversation)
        assert not started.kv_evicted
    started, _ = _reply(qtbot, loaded_bridge, 1)
    assert started.reused_tokens > 0 and not started.kv_evicted  # kept: 1 is now the most recent, 2 the oldest
    started, _ = _reply(qtbot, loaded_bridge, 3)  # a third conversation: 2 goes
    assert started.reused_tokens == 0 and not started.kv_evicted  # never had a session: nothing was evicted
    assert loaded_bridge._worker.sessions.kept() == [1, 3]
    started, _ = _reply(qtbot, loaded_bridge, 2)
    assert started.kv_evicted and started.reused_tokens == 0  # its whole prompt computed again, and said so
    started, _ = _reply(qtbot, loaded_bridge, 2)
    assert not started.kv_evicted and started.reused_tokens > 0  # kept again from now on


def test_sessions_are_evicted_past_the_kv_bytes_bound_but_never_the_one_in_use(qtbot, loaded_bridge, monkeypatch):
    import engine.core.sessions

    loaded_bridge._worker.sessions.persistence = None  # memory alone (the disk: test_kv_persist.py)

    _, finished = _reply(qtbot, loaded_bridge, 1)
    one_chat = finished.metrics.kv_cache_bytes_allocated
    assert one_chat > 0
    monkeypatch.setattr(engine.core.sessions, "MAX_SESSION_KV_BYTES", one_chat + one_chat // 2)  # room for one chat, not two
    _reply(qtbot, loaded_bridge, 2)
    assert loaded_bridge._worker.sessions.kept() == [2]
    started, _ = _reply(qtbot, loaded_bridge, 1)
    assert started.kv_evicted and started.reused_tokens == 0
    monkeypatch.setattr(engine.core.sessions, "MAX_SESSION_KV_BYTES", 1)  # even alone over the bound, the last one is kept
    started, _ = _reply(qtbot, loaded_bridge, 1, "Hello again")
    assert not started.kv_evicted and started.reused_tokens > 0
    assert loaded_bridge._worker.sessions.kept() == [1]


def test_a_new_model_starts_every_conversation_over_without_calling_it_an_eviction(qtbot, loaded_bridge, monkeypatch,
                                                                                   tiny_model_dir):
    import engine.core.sessions

    loaded_bridge._worker.sessions.persistence = None  # memory alone (the disk: test_kv_persist.py)

    monkeypatch.setattr(engine.core.sessions, "MAX_SESSIONS", 1)
    _reply(qtbot, loaded_bridge, 1)
    _reply(qtbot, loaded_bridge, 2)  # 1 evicted
    with qtbot.waitSignal(loaded_bridge.model_loaded, timeout=LOAD_TIMEOUT_MS):
        loaded_bridge.load(LoadSpec(str(tiny_model_dir), "fp32", "cpu"))
    qtbot.waitUntil(lambda: not loaded_bridge.is_busy(), timeout=5000)
    started, _ = _reply(qtbot, loaded_bridge, 1)
    assert not started.kv_evicted and started.reused_tokens == 0
