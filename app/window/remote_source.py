"""The model source "OpenAI-compatible server", wired into the window: ``RemoteSource``.

The main window constructs one and connects the model bar's ``connect_requested`` ("Connect to server…") to its
``open_dialog``, which opens
``app.widgets.remote_dialog.RemoteDialog``; its ``RemoteSpec`` is asked for (``load_requested``) and the window
loads it like a local model (``ChatController.load``
-> the worker's ``LoadJob``, which lists the server's models and checks the name; replies then stream from
``engine.remote.RemoteSession`` on the same worker, into the same conversation, history and footers). While a
server's model is loaded, this reads the server's ``/metrics`` after each reply (``app.runtime.background``) and shows
its KV-cache usage and its own TTFT in the performance panel, or "not reported by this server".

The API key lives in this object's memory for the session (per base URL, so reopening the dialog does not ask
again) and in the worker's ``RemoteSpec``; ``Settings.remember_load`` keeps the URL and model name. Once a connection
with a key worked, the dialog's "Remember the key" decides whether ``app.state.api_keys`` keeps it between runs (the
system keyring, or the settings file when there is none and the user asked) or forgets a kept one.
Owns no widget but the dialog it opens; runs no inference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QCoreApplication, QObject, Signal, Slot
from PySide6.QtWidgets import QLabel, QProgressBar, QWidget

from app.runtime.background import TaskRunner
from app.runtime.bridge import Bridge
from app.state.api_keys import ApiKeys
from app.state.settings import Settings
from app.widgets.message_area import MessageArea
from app.widgets.perf_panel import PerfPanel
from engine.fmt import outside_text
from engine.paths import DEFAULT_MODEL_NAME
from engine.remote import RemoteError, RemoteSpec, ServerFigures, read_server_metrics

if TYPE_CHECKING:
    from app.widgets.remote_dialog import RemoteDialog  # imported when first opened: only a user who connects needs it

__all__ = ["RemoteSource", "RemoteSpec", "loaded_note"]


def loaded_note(facts: Any) -> str:
    """The notice when a model is ready: a local model's size and place, or the server and model connected to."""
    translate = QCoreApplication.translate  # this name: lupdate reads a bare tr(a, b) as tr(text, comment)
    if getattr(facts, "remote", False):
        return translate("ChatController", "Connected to {name} at {url}.").format(name=outside_text(facts.name),
                                                                                   url=facts.source)
    note = translate("ChatController", "Loaded {name}: {m} M parameters, {precision} on {device}.").format(
        name=facts.name, m=f"{facts.params / 1e6:.1f}", precision=facts.precision, device=facts.device)
    if facts.name == DEFAULT_MODEL_NAME:  # a new user's first model cannot really answer: say where real ones are
        note += " " + translate("ChatController", "It is here to watch the engine work, not for answers: "
                                "Models… → Recommended lists real chat models ranked for this machine.")
    return note


class RemoteSource(QObject):
    """Connects the window to servers. Given what it reads and shows in (the settings, the bridge, the message strip,
    the performance panel, the status bar's progress and state); ``parent`` (the main window) is the dialog's parent.
    It does not import the controller (which imports this module): a connection is asked for by a signal.

    Signals:
        load_requested(object): load this ``RemoteSpec`` as the chat's model (the window hands it to the controller).
        server_read(object): a reading of the server's ``/metrics`` was shown (its ``ServerFigures``, reduced to
            the requests since the previous reading; None: the server has no ``/metrics``).
    """

    load_requested = Signal(object)
    server_read = Signal(object)

    def __init__(self, settings: Settings, bridge: Bridge, messages: MessageArea, panel: PerfPanel,
                 load_progress: QProgressBar, status_state: QLabel, parent: QWidget) -> None:
        super().__init__(parent)
        self._settings, self._messages, self._panel, self._parent = settings, messages, panel, parent
        self._load_progress, self._status_state = load_progress, status_state
        self._keys: dict[str, str] = {}  # base URL -> API key, this session only
        self.api_keys = ApiKeys(settings)  # the ones kept between runs (the keyring is looked up on first use)
        self._remember: dict[str, bool] = {}  # base URL -> the dialog's "Remember the key" when it was accepted
        self._pending: RemoteSpec | None = None  # asked for, not connected yet
        self._spec: RemoteSpec | None = None  # the server whose model is loaded now
        self._model = ""
        self._previous: ServerFigures | None = None
        self._reading = 0
        self._reader = TaskRunner(self, daemon=True, name="miaohui-server-metrics")  # each read has its own timeout
        self.dialog: RemoteDialog | None = None
        bridge.model_loaded.connect(self.on_bridge_model_loaded)
        bridge.generation_finished.connect(self.on_bridge_generation_finished)

    @property
    def spec(self) -> RemoteSpec | None:
        """The server whose model is loaded (None: a local model, or none)."""
        return self._spec

    # -- connecting -------------------------------------------------------------------------------------------
    @Slot()
    def open_dialog(self) -> None:
        """Ask for a server and a model (non-modal: the chat stays usable); connect when accepted."""
        from app.widgets.remote_dialog import RemoteDialog  # here: only a user who connects needs it

        if self.dialog is not None:
            self.dialog.close()
        url, model = self._settings.remote_choice()
        kept = self.api_keys.load(url) if url else None
        self.dialog = RemoteDialog(url, model, self._keys.get(url) or kept, self._parent,
                                   keyring=self.api_keys.info(), remembered=kept is not None)
        self.dialog.accepted.connect(self.on_dialog_accepted)
        self.dialog.open()

    @Slot()
    def on_dialog_accepted(self) -> None:
        if self.dialog is None:
            return
        try:
            spec = self.dialog.spec()
        except RemoteError as exc:
            self._messages.show_message(str(exc), "error")
            return
        self._remember[spec.base_url] = self.dialog.remember_key()
        self.connect_to(spec)

    def connect_to(self, spec: RemoteSpec) -> None:
        """Load ``spec``'s model as the chat's model (the worker lists the server's models and checks the name)."""
        if spec.api_key:
            self._keys[spec.base_url] = spec.api_key
        self._pending = spec
        self._load_progress.setValue(0)
        self._status_state.setText(self.tr("connecting"))
        self.load_requested.emit(spec)

    # -- what the window shows --------------------------------------------------------------------------------
    @Slot(object)
    def on_bridge_model_loaded(self, facts: Any) -> None:
        panel = self._panel
        if not getattr(facts, "remote", False):
            self._spec = None
            panel.show_server(None, remote=False)
            return
        pending = self._pending if self._pending is not None and self._pending.base_url == facts.source else None
        self._spec, self._model, self._previous = pending, facts.name, None
        if pending is not None:
            self._keep_key(pending)
        self._read()

    def _keep_key(self, spec: RemoteSpec) -> None:
        """After a connection worked: keep its key between runs, or forget a kept one, as the dialog was answered
        (a connection made without the dialog changes nothing)."""
        remember = self._remember.pop(spec.base_url, None)
        if remember is None:
            return
        if remember and spec.api_key:
            failure = self.api_keys.store(spec.base_url, spec.api_key, in_settings=True)
            if failure:
                self._messages.show_message(failure, "warning")
        elif not remember:
            self.api_keys.forget(spec.base_url)

    @Slot(object)
    def on_bridge_generation_finished(self, _finished: Any) -> None:
        if self._spec is not None:
            self._read()

    def _read(self) -> None:
        """Read the server's ``/metrics`` off the GUI thread; the result comes back to the GUI thread to be shown."""
        spec, model = self._spec, self._model
        if spec is None:
            return
        self._reading += 1
        reading = self._reading
        self._reader.submit(lambda: (reading, read_server_metrics(spec, model)), self.on_reading_done,
                            self.on_reading_failed)

    @Slot(object)
    def on_reading_failed(self, _exc: BaseException) -> None:
        # read_server_metrics answers None for whatever a server does wrong: this is a bug (the runner logged it).
        self.on_reading_done((self._reading, None))  # shown as "not reported by this server"

    @Slot(object)
    def on_reading_done(self, done: tuple[int, ServerFigures | None]) -> None:
        reading, figures = done
        if reading != self._reading or self._spec is None:
            return  # a later reading was asked for, or the server's model is gone
        shown = figures.since(self._previous) if figures is not None else None
        if figures is not None:
            self._previous = figures
        self._panel.show_server(shown)
        self.server_read.emit(shown)
