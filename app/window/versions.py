"""Reply versions in the window: Regenerate keeps the reply it replaces, and a ‹ 2/3 › pager pages through them.

``Versions`` owns the window's side of ``app.history.versions``: on Regenerate it keeps the last reply as a version of
its turn before the controller cuts it and streams the new one (and drops that copy again when the Regenerate did not
start, or brings the reply back when the new one failed before any text); it puts a pager
(``app.widgets.version_pager``) on every built bubble whose turn has several versions, enabled while no reply
streams; and when one is chosen it has the store swap it in (the choice is stored), then shows that version's text,
thought, footer, sources (a grounded reply's, kept with each version) and, in the panel, its stored figures. The
controller reads the conversation of record again from the store (``ChatController.open``, its signals held so the
chat is not rebuilt and keeps its scroll and focus), so the next reply answers the version shown (from its sources);
paging ends an edit in progress. A message an edit gave versions (``app.history.branches``) gets a pager too: choosing
one shows its branch, the conversation read again and shown whole, so what the next reply answers is that branch.
The pagers are kept in a registry of this object's own (bubble -> pager), not searched for among the bubbles'
children. Owns no SQL (the store's modules) and no widget's look (the pager's).
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject, Signal, Slot

from app.history import branches, versions
from app.history.store import StoreError
from app.state.chat_messages import FinishedReply, ShownMessage
from app.widgets import sources_view
from app.widgets.chat_view import ChatView
from app.widgets.message_area import MessageArea
from app.widgets.message_bubble import MessageWidget
from app.widgets.perf_panel import PerfPanel
from app.widgets.version_pager import VersionPager, place_in
from app.window.controller import ChatController


class Versions(QObject):
    """Keeps regenerated replies as versions and pages through them in the open conversation.

    Signals:
        version_shown(int, int): the reply with this message id now shows this version (1-based).
        branch_shown(int): an edited message's version was chosen: the message with this id and its branch are shown.
    """

    version_shown = Signal(int, int)
    branch_shown = Signal(int)

    def __init__(self, controller: ChatController, chat: ChatView, messages: MessageArea, panel: PerfPanel,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller, self._chat, self._messages, self._panel = controller, chat, messages, panel
        # The pager put on each bubble; a rebuilt chat's bubbles are gone, so placing keeps only the shown ones'.
        self._pagers: dict[MessageWidget, VersionPager] = {}
        self._pending: tuple[int, int, int] | None = None  # while regenerating: (conversation, old reply, its place)
        self._turns: dict[int, versions.TurnVersions] = {}
        self._edits: dict[int, branches.Branches] = {}  # the shown messages an edit gave versions, by message id
        c = controller
        c.conversation_shown.connect(self.on_controller_conversation_shown)
        c.reply_finished.connect(self.on_controller_reply_finished)
        c.state_changed.connect(self.on_controller_state_changed)
        # "Show earlier messages" builds older bubbles: the scroll range grows, and the new ones get their pagers.
        chat.verticalScrollBar().rangeChanged.connect(self.on_chat_range_changed)

    def _pager_of(self, bubble: MessageWidget) -> VersionPager | None:
        """The pager put on ``bubble`` (None: none yet)."""
        return self._pagers.get(bubble)

    def _try(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except StoreError as exc:
            self._messages.show_message(self.tr("Reply versions not saved: {why}").format(why=exc), "warning")
            return None

    # -- Regenerate -----------------------------------------------------------------------------------
    def regenerate(self) -> bool:
        """Generate the last reply again, keeping the one it replaces as a version of its turn."""
        c = self._controller
        messages, cid = c.messages(), c.conversation_id
        last = messages[-1] if messages else None
        place = None
        if (not c.is_generating() and cid is not None and last is not None and last.role == "assistant"
                and last.message_id is not None and c.facts is not None and not c.store.read_only):
            place = self._try(versions.keep, c.store, last.message_id)
        started = c.regenerate()
        if place is not None:
            if started:
                self._pending = (cid, last.message_id, place)
            else:  # not started: the copy goes again (or, were the reply already cut, the reply comes back)
                self._undo(cid, last.message_id, place)
        return started

    def _undo(self, cid: int, mid: int, place: int) -> None:
        c = self._controller
        try:
            versions.drop(c.store, mid, place)
        except StoreError:  # the reply itself is gone: bring it back from its copy
            if self._try(versions.restore, c.store, cid, place) is not None and c.conversation_id == cid:
                c.open(cid)

    # -- pagers ---------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read which replies of the open conversation have versions, and put or update their pagers."""
        c = self._controller
        cid = c.conversation_id
        self._turns = {} if cid is None else (self._try(versions.turns, c.store, cid) or {})
        self._edits = {} if cid is None else (self._try(branches.branch_points, c.store, cid) or {})
        self._place_pagers()

    def _place_pagers(self) -> None:
        chat, generating = self._chat, self._controller.is_generating()
        shown = set(chat.widgets())
        self._pagers = {b: p for b, p in self._pagers.items() if b in shown}
        for bubble in chat.widgets():
            user = bubble.message.role == "user"
            turn = (self._edits if user else self._turns).get(bubble.message.message_id)
            pager = self._pager_of(bubble)
            if turn is None:
                if pager is not None:
                    pager.hide()
                continue
            if pager is None:
                pager = self._pagers[bubble] = place_in(bubble, of_message=user)
                pager.version_chosen.connect(self.on_pager_version_chosen)
            pager.set_position(turn.shown, turn.count)
            pager.set_paging_enabled(not generating)
            pager.show()

    def pagers(self) -> list[VersionPager]:
        """The visible pagers, oldest bubble first (tests and the screenshot read them)."""
        return [p for w in self._chat.widgets() if (p := self._pager_of(w)) is not None and not p.isHidden()]

    def show_version(self, mid: int, place: int) -> bool:
        """Show version ``place`` of the reply ``mid`` of the open conversation; False (said why) if it cannot be."""
        c, chat = self._controller, self._chat
        if c.is_generating():
            return False
        shown = chat.messages()
        index = next((i for i, m in enumerate(shown) if m.message_id == mid), None)
        row = self._try(versions.show, c.store, mid, place) if index is not None else None
        if row is None:
            return False
        c.blockSignals(True)  # the conversation of record read again (it holds this version now), the chat not rebuilt
        try:
            reread = c.open(c.conversation_id)
        finally:
            c.blockSignals(False)
        c.set_editing(None)  # reading it again ended an edit: the composer says so
        message = c.messages()[index] if reread and index < len(c.messages()) else None
        if message is None or message.message_id != mid:  # another window changed it meanwhile: show it as stored
            c.open(c.conversation_id)
            return False
        bubble = next((w for w in chat.widgets() if w.message.message_id == mid), None)
        if bubble is not None:
            bubble.show_message(ShownMessage.of(message))  # with this version's own sources, if it was given any
            if message.documents is None:
                sources_view.drop_sources(bubble)  # (a render keeps a section it is not given a new one for)
        self.refresh()
        self._panel.reset()  # the figures of the version shown, "—" where it has none
        self._panel.show_metrics(row.perf, final=True)
        self.version_shown.emit(mid, place)
        return True

    def show_branch(self, mid: int, place: int) -> bool:
        """Show version ``place`` of the edited message ``mid`` and the branch that follows it; False (said why) if it
        cannot be. The conversation is read again and shown whole: everything below that message changes."""
        c = self._controller
        if c.is_generating() or c.conversation_id is None:
            return False
        shown = self._try(branches.show, c.store, mid, place)
        if shown is None:
            return False
        c.open(c.conversation_id)  # conversation_shown rebuilds the chat and refreshes the pagers
        self.branch_shown.emit(shown)
        return True

    # -- slots ----------------------------------------------------------------------------------------
    @Slot(int)
    def on_pager_version_chosen(self, place: int) -> None:
        pager = self.sender()
        bubble = next((b for b, p in self._pagers.items() if p is pager and b in self._chat.widgets()), None)
        if bubble is not None and bubble.message.message_id is not None and bubble.message.role == "user":
            if self.show_branch(bubble.message.message_id, place):
                moved = next((p for p in self.pagers() if p.of_message and p.shown == place), None)
                if moved is not None:  # the chat was rebuilt: the keyboard goes to the new bubble's pager
                    (moved.previous_button if moved.previous_button.isEnabled() else moved.next_button).setFocus()
        elif bubble is not None and bubble.message.message_id is not None:
            self.show_version(bubble.message.message_id, place)
            if self._pager_of(bubble) is pager:  # the keyboard stays on the pager
                (pager.previous_button if pager.previous_button.isEnabled() else pager.next_button).setFocus()

    @Slot(object)
    def on_controller_conversation_shown(self, _messages: object) -> None:
        self.refresh()

    @Slot(object)
    def on_controller_reply_finished(self, finished: FinishedReply) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and not finished.kept:  # the new reply failed before any text: the old one returns
            cid, _mid, place = pending
            c = self._controller
            if self._try(versions.restore, c.store, cid, place) is not None and c.conversation_id == cid:
                c.open(cid)
                return
        self.refresh()

    @Slot()
    def on_controller_state_changed(self) -> None:
        generating = self._controller.is_generating()
        for pager in self.pagers():
            pager.set_paging_enabled(not generating)

    @Slot(int, int)
    def on_chat_range_changed(self, _minimum: int, _maximum: int) -> None:
        if (self._turns or self._edits) and not self._controller.is_generating() and any(
                w.message.message_id in (self._edits if w.message.role == "user" else self._turns)
                and self._pager_of(w) is None
                for w in self._chat.widgets()):
            self._place_pagers()
