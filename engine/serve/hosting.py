"""``engine serve``'s model on the engine core: ``CoreHost``.

The one class that hosts a model is the engine core (``engine.core.core.EngineCore``), for the window, the window's
API server and ``engine serve`` alike. Here the core gets a thread of its own (``engine.core.engine_thread``), loads
the model as a ``LoadJob`` on it, and the server's queue (``engine.serve.worker.Worker``, built on that thread too)
hands its model work to it through ``engine.core.handoff.Handoff``, as the window's server does: a whole request per
hand-over with ``--parallel 1``, one batched step per hand-over otherwise (``engine.serve.batching``). The
``/v1/embeddings`` model is the core's too: found on the engine thread and kept on the core's ``ModelShelf`` beside the
chat model, which the budget never unloads (``keep_chat``: unloading it would stop the server); an embedder that does
not fit beside it within ``--memory-budget`` is a 503 saying so. ``/metrics``' ``miaohui:model_memory_bytes`` is the
shelf's records.

``close()`` stops the queue (its requests answered as cancelled), writes ``--kv-store``'s caches on the engine thread
(the sessions are its), stops the engine thread and releases the model. Owns the wiring; not the queue
(``engine.serve.worker``), the HTTP routes (``engine.serve.app``) or the socket (``engine.serve.server``).
"""

from __future__ import annotations

from typing import Any

from engine.core.core import EngineCore
from engine.core.engine_thread import EngineThread
from engine.core.handoff import Handoff
from engine.core.jobs import LoadFailure, LoadJob
from engine.core.models import ModelRecord
from engine.docs.embed import Embedder
from engine.errors import EngineError, ErrorKind
from engine.inputs import LoadSpec
from engine.serve.embeddings import Embeddings
from engine.serve.worker import Worker


class LoadFailedError(EngineError):
    """The model could not be loaded; ``failure_kind`` says why (as the core reported it), the message for the user."""

    def __init__(self, failure: LoadFailure) -> None:
        super().__init__(failure.message)
        self.failure_kind: ErrorKind = failure.kind


class _Reports:
    """The core's ``Reports`` for a server: the load's outcome and what is in memory (read by ``/metrics`` from the
    HTTP threads: a tuple replaced whole). A server posts no replies or tasks, so their reports are not kept."""

    def __init__(self) -> None:
        self.failure: LoadFailure | None = None
        self.records: tuple[ModelRecord, ...] = ()

    def report_event(self, event: object) -> None:
        pass

    def report_load_progress(self, stage: str, fraction: float) -> None:
        pass

    def report_loaded(self, facts: object) -> None:
        self.failure = None

    def report_load_failure(self, failure: LoadFailure) -> None:
        self.failure = failure

    def report_task_result(self, job_id: int, result: object) -> None:
        pass

    def report_task_failure(self, job_id: int, message: str) -> None:
        pass

    def report_models(self, records: tuple[ModelRecord, ...]) -> None:
        self.records = records


def _embedder_installed() -> Embedder | None:
    from engine.docs.embed import default_embedder  # transformers' model classes: only on the first request

    return default_embedder()


class CoreHost:
    """``spec``'s model loaded by an ``EngineCore`` on its own thread, served by a started ``Worker``
    (``worker_options`` are the Worker's: ``max_queue``, ``sessions``, ``parallel``, ``speculation``...).
    ``budget_bytes``: the models' memory budget (None: the machine's). ``LoadFailedError`` when it cannot load."""

    def __init__(self, spec: LoadSpec, *, budget_bytes: int | None = None, **worker_options: Any) -> None:
        self.reports = _Reports()
        self.core = EngineCore(self.reports, budget_bytes=budget_bytes, load_embedder=_embedder_installed,
                               keep_chat=True)
        self.thread = EngineThread(self.core, name="miaohui-serve-engine").start()
        self.handoff = Handoff(self.thread.post_serve)
        self.worker: Worker | None = None
        try:
            self.thread.run_job(LoadJob(spec))
            if self.reports.failure is not None or self.core.loaded is None:
                raise LoadFailedError(self.reports.failure or LoadFailure(ErrorKind.OTHER, "no model loaded", spec))
            loaded = self.core.loaded
            self.handoff.model = loaded  # work made for this model runs on no other
            # Built on the engine thread: a drafter's model and the batched step's buffers are the core's too.
            self.worker = self.thread.call(lambda: Worker(loaded, executor=self.handoff, models=self.models,
                                                          **worker_options)).start()
        except BaseException:
            self.close()
            raise
        self.embeddings = Embeddings(lambda: self.handoff(self.core.embedder))  # type: ignore[arg-type, return-value]

    def models(self) -> tuple[ModelRecord, ...]:
        """What the core holds in memory (any thread)."""
        return self.reports.records

    def close(self) -> None:
        """Stop serving and release the model (bounded waits: a stuck request does not hold the exit)."""
        worker = self.worker
        if worker is not None:
            worker.close()
        self.handoff.close()
        if worker is not None and worker.prefix.store is not None:
            self.thread.call(worker.prefix.save_all)  # the sessions are the engine thread's
        self.thread.close()
        self.core.release()
