"""Fork a conversation at any message: ``Forker``.

"Fork from here" on a message bubble makes a new conversation in the history holding the messages up to and
including that one, with the original's system prompt and sampling settings, titled "<title> (fork)", and
opens it; the original is left as it was. The fork's first reply reuses the KV cache of their shared history
where the worker still keeps the original's session: the bridge is told (``Bridge.note_fork``) and the worker
hands that session over to the fork, whose prompt then extends what the cache holds; the original's next
reply computes its prompt again (the performance panel says its cache was evicted). Owns the decision and
its messages to the user; the copy is the store's (``HistoryStore.fork_conversation``), one transaction.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QStatusBar

from app.history.store import StoreError
from app.widgets.chat_view import ChatView
from app.widgets.message_area import MessageArea
from app.widgets.prompt_box import PromptBox
from app.window.controller import ChatController


FORK_NOTE_MS = 6000


class Forker(QObject):
    """Forks the window's open conversation when a bubble asks to.

    Signals:
        listed(object): the fork was made and opened: the list shows it (this id) selected, without opening it again.
        forked(int, int): the new conversation's id and the original's, once the fork is open.
    """

    listed = Signal(object)
    forked = Signal(int, int)

    def __init__(self, controller: ChatController, chat: ChatView, messages: MessageArea, status_bar: QStatusBar,
                 prompt: PromptBox, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller, self._messages, self._status_bar, self._prompt = controller, messages, status_bar, prompt
        chat.fork_requested.connect(self.fork)

    @Slot(int)
    def fork(self, index: int) -> int | None:
        """Fork the open conversation at message ``index``; the new conversation's id (now open), or None (said
        why when it is the user's to know)."""
        controller = self._controller
        messages, cid = controller.messages(), controller.conversation_id
        if controller.is_generating() or not 0 <= index < len(messages):
            return None  # the buttons are disabled while a reply streams
        mid = messages[index].message_id
        if cid is None or mid is None:
            self._messages.show_message(self.tr("This chat is not saved in the history, so it cannot be forked."),
                                         "warning")
            return None
        try:
            title = self.tr("%1 (fork)").replace("%1", controller.store.get_conversation(cid).title)
            new = controller.store.fork_conversation(cid, mid, title)
        except StoreError as exc:
            self._messages.show_message(self.tr("Could not fork this chat: %1").replace("%1", str(exc)), "error")
            return None
        controller.bridge.note_fork(new, cid)
        controller.select(new)
        self.listed.emit(new)  # listed and selected without opening it twice
        self._status_bar.showMessage(self.tr("Forked into a new chat; the original is unchanged."), FORK_NOTE_MS)
        self._prompt.setFocus()
        self.forked.emit(new, cid)
        return new
