"""A conversation's KV cache goes to disk when the user switches away from it (issue 29): ``KVKeeping``.

The worker keeps the last few conversations' caches in memory (``engine.core.sessions.SessionCache``); what only
memory holds is lost to a crash or a kill. So when the open conversation changes - another one opened, a new one
started - the one left is handed to ``Bridge.keep_on_disk``, which writes it on the engine thread once that is idle
(never while a reply runs; a reply asked for during the write waits for that write only). A deleted conversation's
session and file go (``Bridge.forget_kv``). Owns only when to ask; not the writing (``engine.core.kv_persist``).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Slot

from app.runtime.bridge import Bridge
from app.window.controller import ChatController


class KVKeeping(QObject):
    """Follows ``controller``'s open conversation; the window connects the list's deletions to
    ``on_conversation_deleted``. No signals."""

    def __init__(self, controller: ChatController, bridge: Bridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller, self._bridge = controller, bridge
        self._open: int | None = self._controller.conversation_id
        self._controller.conversation_shown.connect(self.on_controller_conversation_shown)
        # A first message creates its conversation without showing another one: listed, it is the open one.
        self._controller.conversation_listed.connect(self.on_controller_conversation_listed)

    @Slot(object)
    def on_controller_conversation_shown(self, _messages: object) -> None:
        left, self._open = self._open, self._controller.conversation_id
        if left is not None and left != self._open:
            self._bridge.keep_on_disk(left)

    @Slot(object)
    def on_controller_conversation_listed(self, _cid: object) -> None:
        if self._open is None:
            self._open = self._controller.conversation_id

    @Slot(int)
    def on_conversation_deleted(self, cid: int) -> None:
        self._bridge.forget_kv(cid)
