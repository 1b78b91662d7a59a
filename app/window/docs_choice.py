"""Per conversation: the collections it answers from and its documents mode (issue 43), and the window's way in to
the Collections window.

``DocsChoiceKeeper`` keeps the open conversation's ``DocsChoice`` in step with the composer's 📚 button
(``app.widgets.docs_choice``): read from the history when a conversation is shown (``app.history.conversation_docs``,
schema v10), saved when the user changes it (a chat not saved yet keeps it until its first message saves it), and
handed to every reply through ``Bridge.docs_choice``: the worker then searches those collections for the question
(``engine.docs.attach.ground_conversation``) and grounds it with the conversation's mode. A collection removed from
the store leaves every choice as it is shown (the stored cell keeps the name, harmless: it is filtered out again).

``CollectionsUi.attach`` builds the parts and puts "Collections…" in the Chat menu. Owns no SQL, no widget layout
beyond placing the button beside Attach, and no indexing (``app.runtime.collections_index``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QCoreApplication, QObject, Qt, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QWidget

from app.history.conversation_docs import DocsChoice, load_choice, save_choice
from app.history.store import HistoryStore, StoreError
from app.runtime.bridge import Bridge
from app.widgets.docs_choice import DocsChoiceButton
from app.window.attachments import Attachments
from app.window.docs_forecast import DocsRequest
from app.window.prompt_meter import PromptMeter
from app.runtime.collections_index import CollectionsIndexer
from app.window.controller import ChatController
from app.widgets.prompt_box import Composer

if TYPE_CHECKING:
    from app.widgets.collections_window import CollectionsWindow  # imported when first opened (open_window)


class DocsChoiceKeeper(QObject):
    """The open conversation's collections and documents mode, between the 📚 button, the history and the bridge.
    No signals."""

    def __init__(self, controller: ChatController, bridge: Bridge, store: HistoryStore, indexer: CollectionsIndexer,
                 button: DocsChoiceButton, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller, self._store, self._indexer, self._button = controller, store, indexer, button
        self._cid: int | None = None  # the conversation the shown choice belongs to (None: a chat not saved yet)
        self._choice = DocsChoice()
        self._names: list[str] = indexer.names()
        button.set_collections(self._names)
        controller.conversation_shown.connect(self.on_controller_conversation_shown)
        controller.conversation_listed.connect(self.on_controller_conversation_listed)
        button.choice_changed.connect(self.on_button_choice_changed)
        indexer.collections_changed.connect(self.on_indexer_collections_changed)
        bridge.docs_choice = self.for_reply
        self.on_controller_conversation_shown()

    def choice(self) -> DocsChoice:
        """The open conversation's choice, less collections no longer in the store."""
        return DocsChoice(tuple(n for n in self._choice.collections if n in self._names), self._choice.mode)

    def for_reply(self, _conversation_id: int) -> tuple[tuple[str, ...], str] | None:
        """``Bridge.docs_choice``: a reply is always the open conversation's (Send, Regenerate, Continue)."""
        choice = self.choice()
        return None if choice.empty else (choice.collections, choice.mode)

    def _show(self, choice: DocsChoice) -> None:
        self._choice = choice
        self._button.set_choice(self.choice())

    @Slot()
    def on_controller_conversation_shown(self, _messages: object = None) -> None:
        self._cid = self._controller.conversation_id
        try:
            choice = load_choice(self._store, self._cid) if self._cid is not None else DocsChoice()
        except StoreError:
            choice = DocsChoice()  # the store's own notice says it cannot be read; the chat goes on without
        self._show(choice)

    @Slot(object)
    def on_controller_conversation_listed(self, cid: int | None) -> None:
        # A chat not saved yet got its id from its first message: what was picked before is now saved with it.
        if cid is not None and self._cid is None and cid == self._controller.conversation_id:
            self._cid = cid
            if not self._choice.empty:
                self._controller._write(save_choice, self._store, cid, self._choice)

    @Slot(object)
    def on_button_choice_changed(self, choice: DocsChoice) -> None:
        self._choice = choice
        if self._cid is not None:  # the controller's writer: a failing store warns once, as its own saves do
            self._controller._write(save_choice, self._store, self._cid, choice)

    @Slot()
    def on_indexer_collections_changed(self) -> None:
        self._names = self._indexer.names()
        self._button.set_collections(self._names)
        self._button.set_choice(self.choice())


class CollectionsUi(QObject):
    """The indexer, the 📚 button's keeper, the Chat menu's "Collections…" and the window it opens (built when first
    opened). No signals."""

    def __init__(self, controller: ChatController, bridge: Bridge, store: HistoryStore, composer: Composer,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.indexer = CollectionsIndexer(bridge, parent=self)
        self.button = DocsChoiceButton()
        composer.add_beside_attach(self.button)
        self.keeper = DocsChoiceKeeper(controller, bridge, store, self.indexer, self.button, self)
        self.window: CollectionsWindow | None = None  # once opened
        self._parent_widget = parent
        self.button.manage_requested.connect(self.open_window)

    @classmethod
    def attach(cls, controller: ChatController, bridge: Bridge, store: HistoryStore, composer: Composer, menu: QMenu,
               window: QMainWindow) -> CollectionsUi:
        """Build the parts and put "Collections…" in ``menu``, its shortcut on ``window`` (the Collections window's
        parent)."""
        ui = cls(controller, bridge, store, composer, window)
        translate = QCoreApplication.translate
        action = QAction(translate("CollectionsUi", "Collections…"), window)
        action.setShortcut(QKeySequence("Ctrl+Shift+D"))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.setToolTip(translate("CollectionsUi", "Folders and files indexed for answers with sources"))
        action.triggered.connect(ui.open_window)
        menu.addAction(action)
        window.addAction(action)
        return ui

    def feed(self, meter: PromptMeter, attachments: Attachments) -> None:
        """The composer's forecast of both documents choices counts the conversation's collections and mode too, and
        measures again when they change."""
        keeper = self.keeper
        meter.documents = lambda: DocsRequest(tuple(attachments.usable()), keeper.choice().collections,
                                              keeper.choice().mode)
        self.button.choice_changed.connect(meter.schedule)

    @Slot()
    def open_window(self) -> None:
        if self.window is None:
            from app.widgets.collections_window import CollectionsWindow

            self.window = CollectionsWindow(self.indexer, self._parent_widget)
        self.window.refresh()
        self.window.show()
        self.window.raise_()
        self.window.activateWindow()
