"""The context bar follows the open conversation: ``ContextMeter``.

The performance panel's context bar showed the last reply's figure whichever conversation was open, so a fork (its
replies carry no performance record of their own) showed its source's token count. When a conversation is shown, or a
model loaded, its own prompt is measured on the worker (``Bridge.measure_prompt``: the template, the tokenizer and
the trimming the next reply would use) and the bar shows that count; a reply's live figures take over as it streams.
A server's model has no tokenizer here: its bar says "—" until a reply reports. On a vision-language model the
conversation's pictures count too, as a part of their own on the bar ("images: N tokens": their image tokens, counted
by the model's processor on the engine thread, ``app.window.image_costs``). Owns when to measure; no SQL, no
inference, no widget.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Slot

from app.runtime.bridge import Bridge
from app.widgets.perf_panel import PerfPanel
from app.window import turn_notes
from app.window.controller import ChatController
from app.window.image_costs import ImageCosts
from engine.errors import BadInputError
from engine.generate.measure import PromptMeasure

NO_SESSION = -1  # an unsaved conversation: the worker keeps no session for it


class ContextMeter(QObject):
    """Measures the open conversation's prompt when it is shown and puts the count on the context bar (no signals)."""

    def __init__(self, controller: ChatController, bridge: Bridge, panel: PerfPanel, images: ImageCosts,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller, self._bridge, self._panel, self._images = controller, bridge, panel, images
        self._pending = 0  # the measurement on the worker (task id), 0 when none
        self._measured: PromptMeasure | None = None  # the open conversation's text, measured
        self._pictures: tuple[str, ...] = ()  # its pictures
        images.counted.connect(self.on_images_counted)
        self._controller.conversation_shown.connect(self.measure)
        self._controller.model_ready.connect(self.measure)
        self._bridge.task_finished.connect(self.on_bridge_task_finished)

    @Slot()
    def measure(self, *_args: Any) -> int:
        """Measure the open conversation now; the task id, or 0 when the bar was set without measuring."""
        c = self._controller
        facts, self._pending, self._measured = c.facts, 0, None  # an answer on its way is for the one shown before
        if facts is None:
            return 0
        limit = getattr(facts, "context_length", None) or 0
        if getattr(facts, "remote", False) or not limit:
            self._panel.show_context(None, limit)  # no tokenizer here, or no limit to measure against: "—"
            return 0
        messages = c.conversation_for_engine()
        if not any(m.role != "system" for m in messages):
            self._panel.show_context(0, limit)  # no message yet (a system prompt alone is not sent by itself)
            return 0
        try:
            config = c.chat_settings().sampling_config()
        except BadInputError:
            return 0  # Send will say what is wrong with the settings
        cid = c.conversation_id
        pictures = turn_notes.engine_images(c.chat_settings().system_prompt, c.messages())  # those the turn sends
        self._pictures = tuple(path for _index, paths in pictures for path in paths)
        self._pending = self._bridge.measure_prompt(cid if cid is not None else NO_SESSION, messages, config)
        return self._pending

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, result: object) -> None:
        if task_id != self._pending or not task_id:
            return
        self._pending = 0
        if isinstance(result, PromptMeasure) and result.context_max:
            self._measured = result
            self._show()

    @Slot()
    def on_images_counted(self) -> None:
        if self._measured is not None:
            self._show()

    def _show(self) -> None:
        measured = self._measured
        if measured is None or self._controller.is_generating():  # a reply's live figures have the bar
            return
        counts = self._images.tokens(self._pictures) if self._pictures else ()
        pictures = sum(counts or ())  # still being counted: the text alone until they are
        self._panel.show_context(measured.prompt_tokens + pictures, measured.context_max, pictures)
