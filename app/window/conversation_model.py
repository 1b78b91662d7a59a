"""Each conversation's model, recorded with it and restored when it is opened again: ``ModelRestorer``.

The model a conversation replies with is recorded in its history row (``HistoryStore.set_conversation_model``): what
was asked for (a local model's argument, precision and device, or a server's URL and model name, never its API key)
and the name it loaded as. It is recorded with the conversation's first message, and again when another model is
loaded while the conversation is open or before its next message (the latest one wins). Opening a conversation
whose model differs from the one loaded loads it, as choosing it in the model bar would, with its precision; never
while a reply streams or a load runs (it waits for them to end), and not before a first model is loaded (the app
loads one at start). A local model no longer on this machine leaves the loaded one in place, with a one-line notice.

Owns those decisions and the record's shape (``ModelRecord``); loading is the window's (``load_requested``, which it
connects to ``MainWindow.load_model``; ``app.window.remote_source`` for a server), the row is the store's; no widget,
no SQL.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from app.history.store import MODEL_KEY, StoreError
from app.widgets.message_area import MessageArea
from app.window.controller import ChatController
from app.window.remote_source import RemoteSource
from engine.errors import EngineError
from engine.inputs import DEVICES, PRECISIONS, LoadSpec
from engine.models.catalog import list_local_models
from engine.remote.spec import RemoteSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelRecord:
    """The model a conversation replies with, as its history row keeps it (``stored``/``from_stored``)."""

    model: str  # a local model's argument ("default", a folder, a .gguf, a repo id), or a server's model name
    name: str  # the name it loaded as (ModelFacts.name): what a notice calls it
    precision: str = "auto"  # as asked for: "auto" stays "auto", so a restore resolves it the same way again
    device: str = "auto"
    base_url: str = ""  # a server's ("" for a local model)

    @classmethod
    def of(cls, spec: LoadSpec | RemoteSpec, facts: Any) -> ModelRecord:
        if isinstance(spec, RemoteSpec):
            return cls(model=spec.model or facts.name, name=facts.name, base_url=spec.base_url)
        return cls(model=spec.model, name=facts.name, precision=spec.precision, device=spec.device)

    @classmethod
    def from_stored(cls, data: Any) -> ModelRecord | None:
        """The record a history row holds; None for none, or for one a damaged file or a hand edit left unusable."""
        if not isinstance(data, dict) or not all(isinstance(data.get(key, ""), str) for key in
                                                 ("model", "name", "precision", "device", "base_url")):
            return None
        record = cls(**{key: data[key] for key in ("model", "name", "precision", "device", "base_url") if key in data})
        usable = record.model.strip() and "\0" not in record.model + record.base_url
        return record if usable and record.precision in PRECISIONS and record.device in DEVICES else None

    def stored(self) -> dict[str, str]:
        return asdict(self)

    def same_model(self, other: ModelRecord | None) -> bool:
        """The same model asked for the same way (the name it loaded as aside)."""
        return other is not None and (self.model, self.precision, self.device, self.base_url) == (
            other.model, other.precision, other.device, other.base_url)


def is_local(model: str) -> bool:
    """Whether a local model's argument names something on this machine: a file or folder that exists, or a model
    the catalog finds ("default" once fetched, a repo id in the Hugging Face cache)."""
    if model != "default" and Path(model).expanduser().exists():
        return True
    try:
        return any(choice.spec_model == model for choice in list_local_models())
    except Exception as exc:  # noqa: BLE001 (a broken cache folder must not break opening a chat)
        log.warning("could not list local models: %s", exc)
        return False


class ModelRestorer(QObject):
    """Records the loaded model with the open conversation and restores a conversation's model when it is opened.

    Signals:
        load_requested(str, str, str): load this local model (model, precision, device), as the model bar would.
    """

    load_requested = Signal(str, str, str)

    def __init__(self, controller: ChatController, messages: MessageArea, remote: RemoteSource,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller, self._messages = controller, messages
        self._remote = remote  # a conversation with a server's model connects through it
        self._wanted: tuple[int, ModelRecord] | None = None  # a restore waiting for a reply or a load to end
        controller.conversation_shown.connect(self.on_controller_conversation_shown)
        controller.message_added.connect(self.on_controller_message_added)
        controller.state_changed.connect(self.on_controller_state_changed)
        controller.model_ready.connect(self.on_controller_model_ready)

    def recorded(self, cid: int) -> ModelRecord | None:
        """The model recorded with conversation ``cid``, if any."""
        try:
            return ModelRecord.from_stored(self._controller.store.get_conversation(cid).settings.get(MODEL_KEY))
        except StoreError:
            return None

    def loaded(self) -> ModelRecord | None:
        """The loaded model as a record (None: none loaded, or loaded before the controller knew how)."""
        facts, spec = self._controller.facts, self._controller.loaded_spec
        return ModelRecord.of(spec, facts) if facts is not None and spec is not None else None

    # -- slots ----------------------------------------------------------------------------------------------------
    @Slot(object)
    def on_controller_conversation_shown(self, _messages: list) -> None:
        cid = self._controller.conversation_id
        record = self.recorded(cid) if cid is not None else None
        self._wanted = (cid, record) if cid is not None and record is not None else None
        self._settle()

    @Slot(object)
    def on_controller_message_added(self, _message: Any) -> None:
        self._record()  # the first message of a new conversation, or the first after another model was loaded

    @Slot()
    def on_controller_state_changed(self) -> None:
        self._settle()

    @Slot(object)
    def on_controller_model_ready(self, _facts: Any) -> None:
        # A model loaded while a conversation is open is the one it goes on with, unless it was loaded while this
        # conversation's own model waited to be restored (that one follows), or another load is queued behind it.
        if self._wanted is None and not self._controller.is_loading() and self._controller.messages():
            self._record()

    # -- internals ------------------------------------------------------------------------------------------------
    def _record(self) -> None:
        cid, loaded = self._controller.conversation_id, self.loaded()
        if cid is None or loaded is None or self.recorded(cid) == loaded:
            return
        try:
            self._controller.store.set_conversation_model(cid, loaded.stored())
        except StoreError as exc:  # the chat goes on; the controller already says when history cannot be saved
            log.warning("could not record the model of conversation %s: %s", cid, exc)

    def _settle(self) -> None:
        """Restore the waiting conversation's model once nothing runs and a model is loaded."""
        if self._wanted is None:
            return
        cid, record = self._wanted
        controller = self._controller
        if cid != controller.conversation_id:
            self._wanted = None  # another conversation was opened meanwhile
            return
        if controller.is_generating() or controller.is_loading() or controller.facts is None:
            return
        self._wanted = None
        if record.same_model(self.loaded()):
            return
        if record.base_url:
            self._connect(record)
        elif is_local(record.model):
            self.load_requested.emit(record.model, record.precision, record.device)
        else:
            self._messages.show_message(self.tr(
                "This conversation used {name}, which is not on this machine; continuing with {current}.").format(
                name=record.name, current=controller.facts.name), "warning")

    def _connect(self, record: ModelRecord) -> None:
        """A server's model: connected to again, with the key of the server connected to now if it is the same, else
        the one remembered for it (none: a server that wants one refuses, said as any failed load is)."""
        source = self._remote
        key = (source.spec.api_key if source.spec is not None and source.spec.base_url == record.base_url
               else source.api_keys.load(record.base_url))
        try:
            source.connect_to(RemoteSpec(record.base_url, record.model, api_key=key))
        except EngineError as exc:  # a stored URL that no longer parses
            self._messages.show_message(str(exc), "error")
