"""Pictures in the conversation, the window's side (issue 44): ``ImageTurns``.

Hands every reply the open conversation's pictures by message index (``Bridge.reply_images``, from
``app.window.turn_notes.engine_images``: the worker then runs a vision turn when a vision-language model is loaded),
puts an edited message's pictures back in the composer, says there, before Send, when pictures are attached and the loaded model cannot see them (the picture stays
attached; a Send anyway keeps it with the message, and the reply says the model has no vision), and shows a vision
turn's ``ImagesEncoded`` in the panel's "Why this TTFT" (``TtftView.show_images``). Does not own keeping the pictures
(``app.window.attachments``), the turn (``engine.core.vision``) nor how the rows look.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QT_TRANSLATE_NOOP, QObject, Slot

from app.runtime.bridge import Bridge
from app.state.model_vision import sees_images
from app.widgets.prompt_box import Composer
from app.widgets.ttft_view import TtftView
from app.window import turn_notes
from app.window.attachments import Attachments
from app.window.controller import ChatController
from engine.core.vision import TurnImages

NO_VISION = QT_TRANSLATE_NOOP("ImageTurns", "{model} cannot see pictures: load a vision-language model (LLaVA, "
                                            "SmolVLM, Qwen2.5-VL, Gemma 3…) to ask about them. They stay attached.")
NO_MODEL = QT_TRANSLATE_NOOP("ImageTurns", "Load a vision-language model (LLaVA, SmolVLM, Qwen2.5-VL, Gemma 3…) to "
                                           "ask about the attached pictures.")


class ImageTurns(QObject):
    """Follows the attached pictures and the loaded model; no signals."""

    def __init__(self, controller: ChatController, bridge: Bridge, composer: Composer, attachments: Attachments,
                 ttft_view: TtftView, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._composer = composer
        self._attachments = attachments
        self._ttft_view = ttft_view
        bridge.reply_images = self.reply_images
        bridge.images_encoded.connect(self.on_bridge_images_encoded)
        attachments.changed.connect(self.update_note)
        controller.model_ready.connect(self.update_note)
        controller.state_changed.connect(self.update_note)
        controller.editing_changed.connect(self.on_controller_editing_changed)
        self._from_edit: tuple[str, ...] = ()  # the pictures an edit put back in the composer

    def reply_images(self, _conversation_id: int) -> TurnImages:
        """The open conversation's pictures, placed as the reply's messages are (the reply is the open one's)."""
        return turn_notes.engine_images(self._controller.chat_settings().system_prompt, self._controller.messages())

    @Slot()
    def update_note(self, *_: object) -> None:
        facts = self._controller.facts
        if not self._attachments.images() or (facts is not None and sees_images(facts)):
            self._composer.show_images_note("")
        elif facts is None:
            self._composer.show_images_note(self.tr(NO_MODEL))
        else:
            self._composer.show_images_note(self.tr(NO_VISION).format(model=getattr(facts, "name", "")))

    @Slot(object)
    def on_controller_editing_changed(self, index: int | None) -> None:
        """An edited message keeps its pictures: they go back in the composer with its text (× leaves one out);
        a cancelled edit takes them back."""
        if index is None:
            self._attachments.detach(self._from_edit)
            self._from_edit = ()
            return
        messages = self._controller.messages()
        self._from_edit = messages[index].images if 0 <= index < len(messages) else ()
        self._attachments.attach_kept(self._from_edit)

    @Slot(object)
    def on_bridge_images_encoded(self, event: Any) -> None:
        self._ttft_view.show_images(event.image_tokens, event.encoder_s, event.reused_images)
