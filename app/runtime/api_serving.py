"""The window serves its loaded model over the OpenAI API: ``ApiServing`` (Chat → "Serve this model (OpenAI API)").

The server is ``engine.serve`` (the FastAPI app of ``python -m engine serve``, uvicorn on a thread of its own), with
one difference: its forward passes are made on the window's engine thread (``engine.core.handoff``), the one
that owns the model and runs the chat's replies, loads and lab tasks, so an API request and a chat turn never race
for the model. Up to N requests decode together (Chat → "Parallel API requests…", 4 by default as ``engine serve
--parallel``; 1: one at a time): each step of the batch is one hand-over, so a Send pressed while requests run
starts after the step in progress, and the requests go on after the reply. The server keeps its own queue (429 past
32 waiting), its own KV-cache sessions per conversation and its own ``/metrics`` (``vllm:num_requests_running``).

The model follows the window's: a new model loaded in the window is served from then on (each model gets its own
queue and app, swapped in behind the one listening socket); while there is none, or the window's model runs on
another server, every request is answered 503 with an OpenAI-shaped error saying so. Requests caught by a switch
end (503 if still queued or cancelled in time, else an error saying the model changed) and may be retried.

Safe by default, as ``engine serve``: it listens on 127.0.0.1 only, so no API key is asked for, and its server
(``engine.serve.server.BackgroundServer``) refuses what only a web page would send, for every route and the 503s
alike: another site's ``Host`` (DNS rebinding) and bodies not declared JSON. Off at every start, whatever the last
run did (``Settings.start_with_switches_off``): a server never turns on by itself.
The port is a setting (Chat → "API port…", default 8000); a port in use is one line in the window and the toggle
goes back off. Changing the port or the parallel requests while serving starts over with them. Turning it off, or
closing the window (``Bridge.closing``), cancels what runs and stops the server.

Owns the toggle, the port and parallel actions and the status-bar label; not the hand-over
(``engine.core.handoff``), no HTTP behaviour (``engine.serve.app``), no model.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QInputDialog, QLabel, QMainWindow, QMenu, QStatusBar

from app.runtime.bridge import Bridge
from app.runtime.worker import ServeJob
from app.state.settings import MAX_SERVE_PARALLEL, Settings
from engine.fmt import one_line
from engine.serve.errors import error_body

if TYPE_CHECKING:  # the server's parts: imported when serving starts (uvicorn, FastAPI), named here for their types
    from engine.core.handoff import Handoff
    from engine.serve.server import BackgroundServer
    from engine.serve.worker import Worker

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # loopback only: the window never serves other machines, so it needs no API key
STOP_WAIT_S = 10.0  # a running request sees its cancel within one decode step; this only bounds a stuck one
# What an API client reads in the 503 while no model can be served (the API's language is English, as vLLM's).
NO_MODEL = "no model is loaded in the Miaohui window: load one there to serve it"
REMOTE_MODEL = "the Miaohui window's model runs on another server: only a model loaded on this computer is served"
SWITCHING = "the Miaohui window is preparing its model for serving: retry in a moment"


class _Switch:
    """The ASGI app on the socket: the current model's app (``engine.serve.app.create_app``), or a 503 saying why."""

    def __init__(self) -> None:
        self.current: tuple[Any, str] = (None, SWITCHING)  # (app, why there is none); replaced whole, read once

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        app, reason = self.current
        if app is not None:
            await app(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        body = json.dumps(error_body(503, reason, code="model_not_available")).encode()
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class ApiServing(QObject):
    """The window's "Serve this model" toggle, its port action and its status-bar label. ``window`` parents the
    actions and dialogs; ``settings`` keeps the port and the parallel requests; ``bridge`` is the engine's (its model,
    its engine thread); ``status_bar`` gets the label; ``show_message(text, level)`` says a line in the window;
    ``menu`` gets the actions.

    Signals:
        serving_changed(str): the API's base URL (``http://127.0.0.1:8000/v1``) when serving began, "" when it ended.
        model_served(str): the name the API now serves the window's model under; "" while none is served (503).
        request_served(int): a request was answered in full; the number so far since serving began.
    """

    serving_changed = Signal(str)
    model_served = Signal(str)
    request_served = Signal(int)
    _prepared = Signal(int, object)  # internal, from the engine thread: (generation, (handoff, worker, app) | reason)
    _finished = Signal(str)  # internal, from a queue's thread: a request's finish reason

    def __init__(self, window: QMainWindow, settings: Settings, bridge: Bridge, status_bar: QStatusBar,
                 show_message: Callable[[str, str], None], menu: QMenu) -> None:
        super().__init__(window)
        self._window, self._settings, self._bridge, self._say = window, settings, bridge, show_message
        self._server: BackgroundServer | None = None  # while serving
        self._switch = _Switch()
        self._current: tuple[Handoff, Worker] | None = None  # the serving model's hand-over and queue
        self._generation = 0  # bumped by each model change: a model prepared for an older one is dropped
        self._served = 0
        self.url = ""
        self.action = QAction(self.tr("Serve this model (OpenAI API)"), window)
        self.action.setCheckable(True)
        self.action.triggered.connect(self.on_action_triggered)
        self.port_action = QAction(self.tr("API port…"), window)
        self.port_action.triggered.connect(self.on_port_action_triggered)
        self.parallel_action = QAction(self.tr("Parallel API requests…"), window)
        self.parallel_action.triggered.connect(self.on_parallel_action_triggered)
        menu.addAction(self.action)
        menu.addAction(self.port_action)
        menu.addAction(self.parallel_action)
        self.label = QLabel("")
        self.label.setToolTip(self.tr("The loaded model as an OpenAI-compatible API, reachable from this computer "
                                      "only (no API key needed)"))
        self.label.hide()
        status_bar.addPermanentWidget(self.label)
        self._prepared.connect(self.on_prepared)
        self._finished.connect(self.on_request_finished)
        self._bridge.model_loaded.connect(self.on_bridge_model_loaded)
        self._bridge.closing.connect(self.stop)

    @property
    def serving(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        """The port listened on (the one the system chose when the setting is 0); 0 when not serving."""
        return self._server.port if self._server is not None else 0

    # -- the user's actions -------------------------------------------------------------------------------------
    @Slot(bool)
    def on_action_triggered(self, checked: bool) -> None:
        if checked:
            self._settings.set_serve_enabled(self.start())  # a port in use leaves it off, said in one line
        else:
            self.stop()
            self._settings.set_serve_enabled(False)

    @Slot()
    def on_port_action_triggered(self) -> None:
        port, accepted = QInputDialog.getInt(self._window, self.tr("API port"),
                                             self.tr("Serve the OpenAI API on 127.0.0.1, port:"),
                                             self._settings.serve_port() or 8000, 1, 65535)
        if accepted and port != self._settings.serve_port():
            self._settings.set_serve_port(port)
            if self.serving:
                self.stop()
                self.start()

    @Slot()
    def on_parallel_action_triggered(self) -> None:
        n, accepted = QInputDialog.getInt(
            self._window, self.tr("Parallel API requests"),
            self.tr("API requests decoded together (1: one at a time; more use more memory for their caches):"),
            self._settings.serve_parallel(), 1, MAX_SERVE_PARALLEL)
        if accepted and n != self._settings.serve_parallel():
            self._settings.set_serve_parallel(n)
            if self.serving:  # the queue is made for a number: a new one (what runs now is cancelled)
                self._retire()
                self._follow_model()

    # -- starting and stopping ----------------------------------------------------------------------------------
    def start(self) -> bool:
        """Listen on 127.0.0.1 at the port setting and serve the window's model; False (one line shown) if not."""
        if self.serving:
            return True
        from engine.serve.server import BackgroundServer  # here: uvicorn is for those who serve

        port = self._settings.serve_port()
        try:
            self._server = BackgroundServer(self._switch, HOST, port).start()
        except (OSError, RuntimeError) as exc:
            self._server = None
            reason = one_line(getattr(exc, "strerror", None) or exc)
            self._say(
                self.tr("Could not serve the model on {host}:{port}: {reason}. Choose another port in Chat → API "
                        "port…").format(host=HOST, port=port, reason=reason), "error")
            self.action.setChecked(False)
            return False
        self.action.setChecked(True)
        self.url = f"{self._server.url}/v1"
        self._served = 0
        self._show()
        self.label.show()
        self.serving_changed.emit(self.url)
        self._follow_model()
        return True

    @Slot()
    def stop(self) -> None:
        """Cancel what runs, answer what waits, stop listening. Safe to call any number of times."""
        self._generation += 1
        self._retire()
        if self._server is not None:
            server, self._server = self._server, None
            server.stop(STOP_WAIT_S)
            self.label.hide()
            self.url = ""
            self.serving_changed.emit("")
        self.action.setChecked(False)

    def _retire(self) -> None:
        """Stop serving the current model (its queue's waiting requests are answered 503); none is served after."""
        self._switch.current = (None, SWITCHING)
        if self._current is not None:
            (handoff, worker), self._current = self._current, None
            worker.cancel_all()  # each request ends at its next step, as cancelled
            if self._bridge.is_busy():  # a chat reply or a load holds the engine thread: give up what waits for it
                handoff.close()
            worker.close(STOP_WAIT_S)  # else its steps are quick: the requests end as cancelled first
            handoff.close()
            self._show()
            self.model_served.emit("")

    # -- following the window's model ---------------------------------------------------------------------------
    @Slot(object)
    def on_bridge_model_loaded(self, _facts: object) -> None:
        if self.serving:
            self._retire()
            self._follow_model()

    def _follow_model(self) -> None:
        """Make a queue and an app for the window's model, on the engine thread (where the model may be touched)."""
        from engine.core.handoff import Handoff  # the engine's queue: imported by those who serve
        from engine.serve.worker import Worker

        self._generation += 1
        generation, prepared, handoff = self._generation, self._prepared, Handoff(self._bridge.post_serve_job)
        self._switch.current = (None, SWITCHING if self._bridge.facts is not None else NO_MODEL)
        parallel, finished, models = self._settings.serve_parallel(), self._finished.emit, self._bridge.loaded_models

        def prepare(loaded: object) -> None:  # on the engine thread; reports to the GUI thread by a queued signal
            from engine.remote import RemoteModel

            if loaded is None or isinstance(loaded, RemoteModel):
                prepared.emit(generation, NO_MODEL if loaded is None else REMOTE_MODEL)
                return
            try:
                from engine.serve.app import create_app

                handoff.model = loaded
                worker = Worker(loaded, executor=handoff, parallel=parallel, on_reply=finished, models=models)
                prepared.emit(generation, (handoff, worker, create_app(worker)))
            except Exception as exc:  # noqa: BLE001  (the window stays; clients read why)
                log.exception("could not prepare the model for serving")
                prepared.emit(generation, f"the model cannot be served: {one_line(exc, name_type=True)}")

        self._bridge.post_serve_job(ServeJob(prepare))

    @Slot(int, object)
    def on_prepared(self, generation: int, prepared: tuple[Handoff, Worker, Any] | str) -> None:
        """A model prepared on the engine thread: its hand-over, queue and ASGI app, or why none is served."""
        if generation != self._generation or not self.serving:
            return  # stopped, or another model came meanwhile (its worker was never started: nothing to close)
        if isinstance(prepared, str):
            self._switch.current = (None, prepared)
            if prepared == REMOTE_MODEL:
                self._say(self.tr("A model on another server is not served again: load a "
                                                           "model on this computer to serve it."), "warning")
            return
        handoff, worker, app = prepared
        self._current = (handoff, worker.start())
        self._switch.current = (app, "")
        self._show()
        if worker.batching_refused and self._settings.serve_parallel() > 1:  # said once, where the user looks
            self._say(self.tr("The API serves one request at a time with this model: "
                                                       "{reason}").format(reason=worker.batching_refused), "info")
        self.model_served.emit(worker.model_id)

    @Slot(str)
    def on_request_finished(self, reason: str) -> None:
        if reason in ("stop", "length") and self.serving:
            self._served += 1
            self._show()
            self.request_served.emit(self._served)

    def _show(self) -> None:
        n = self._served  # one source text per English form (Chinese has one form for both)
        if self._current is None:  # listening, but every request gets 503 model_not_available: no advertising it
            text = self.tr("API {url} · waiting for a model loaded on this computer")
        else:
            text = self.tr("API {url} · {n} request served") if n == 1 else self.tr("API {url} · {n} requests served")
        self.label.setText(text.format(url=self.url, n=n))
