"""Saving a turn's documents and images with its messages (issues 43, 44): ``DocumentsKeeping``.

A user message's attached files and pictures are saved once the message is (``message_added``; the pictures through
``app.history.images.save_images``), a grounded reply's sources once
the reply ends and is saved (``reply_finished``), through ``app.history.documents.save_documents``. Reopening the
conversation reads them back with the messages (``app.history.rows``): the bubbles show them again, a Regenerate
grounds the question in the same files, and a later question is answered from the same sources
(``app.window.turn_notes.engine_conversation``). Owns only when to save; a failed save is the controller's one
"History not saved" warning.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Slot

from app.history.documents import save_documents
from app.history.images import save_images
from app.state.chat_messages import ChatMessage, FinishedReply
from app.window.controller import ChatController


class DocumentsKeeping(QObject):
    """Follows ``controller``'s sent messages and finished replies; no signals."""

    def __init__(self, controller: ChatController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._controller.message_added.connect(self.on_controller_message_added)
        self._controller.reply_finished.connect(self.on_controller_reply_finished)

    @Slot(object)
    def on_controller_message_added(self, message: ChatMessage) -> None:
        # The controller's writer: a failing store warns once for the whole chat, as its own saves do.
        if message.attachments and message.message_id is not None:
            self._controller._write(save_documents, self._controller.store, message.message_id,
                                    attachments=message.attachments)
        if message.images and message.message_id is not None:  # its pictures (schema v11)
            self._controller._write(save_images, self._controller.store, message.message_id, message.images)

    @Slot(object)
    def on_controller_reply_finished(self, finished: FinishedReply) -> None:
        message = finished.message
        if finished.kept and message.documents is not None and message.message_id is not None:
            self._controller._write(save_documents, self._controller.store, message.message_id,
                                    used=message.documents)
