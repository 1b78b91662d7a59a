"""What pictures will cost before a Send (issue 44): ``ImageCosts``, the image tokens of each picture file for the
loaded vision-language model, and the KV bytes they add.

How many tokens a picture becomes is the model's processor's choice (a fixed square for LLaVA-1.5, tiles for SmolVLM,
a grid that grows with the pixels for Qwen-VL), so it is asked of the processor on the engine thread
(``engine.core.vision.count_image_tokens``, a vision task of ``Bridge.submit_task``), never here: ``app/`` imports no
torch. Counts are kept per file until another model is loaded (a file in the images folder is content-addressed: its
count cannot change). The composer's forecast (``app.window.prompt_meter``) and the context bar
(``app.window.context_meter``) ask ``tokens`` and are told by ``counted`` when more are known. Owns the counts and when
to ask; not the wording, nor what a text model says about pictures (``app.window.image_turns``). Each file is counted
alone: one that cannot be read counts 0 and is not asked again; the others in its task keep their counts.
"""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QObject, Signal, Slot

from app.runtime.bridge import Bridge
from app.state.model_vision import sees_images
from app.window.controller import ChatController
from engine.core.vision import ImageTokens, count_image_tokens


class ImageCosts(QObject):
    """The image tokens of picture files on the loaded vision-language model, counted on the engine thread.

    Signals:
        counted(): more files' counts are known (whoever shows them asks ``tokens`` again).
    """

    counted = Signal()

    def __init__(self, controller: ChatController, bridge: Bridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller, self._bridge = controller, bridge
        self._tokens: dict[str, int] = {}  # file -> image tokens on the model loaded now
        self._pending = 0  # the count on the engine thread (task id), 0 when none
        self._asking: tuple[str, ...] = ()  # its files
        self._wanted: list[str] = []  # files asked for while it ran: counted next, in one task
        self._failed: set[str] = set()  # files the engine could not read: 0 tokens, never asked again
        controller.model_ready.connect(self.on_controller_model_ready)
        bridge.task_finished.connect(self.on_bridge_task_finished)
        bridge.task_failed.connect(self.on_bridge_task_failed)

    def sees_images(self) -> bool:
        """Whether the loaded model is a vision-language one (else pictures are not counted: it refuses them)."""
        return sees_images(self._controller.facts)

    def kv_bytes_per_token(self) -> int | None:
        per_token = getattr(self._controller.facts, "kv_bytes_per_token", None)
        return per_token if isinstance(per_token, int) and per_token > 0 else None

    def tokens(self, files: Sequence[str]) -> tuple[int, ...] | None:
        """Each file's image tokens, in order; None while one is not counted yet (it is asked for now) or the model
        cannot see pictures."""
        if not self.sees_images():
            return None
        missing = [f for f in files if f not in self._tokens and f not in self._failed]
        if missing:
            self._ask(missing)
            return None
        return tuple(self._tokens.get(f, 0) for f in files)

    def _ask(self, files: list[str]) -> None:
        if self._pending:  # one task at a time: a reply streaming on the worker never gathers a queue of counts
            self._wanted += [f for f in files if f not in self._wanted and f not in self._asking]
            return
        self._asking = tuple(dict.fromkeys(files))
        asking = self._asking
        self._pending = self._bridge.submit_task(lambda vision, _cancel: count_image_tokens(vision, asking),
                                                 vision=True)

    def _next(self) -> None:
        self._pending, self._asking = 0, ()
        wanted, self._wanted = [f for f in self._wanted if f not in self._tokens], []
        if wanted and self.sees_images():
            self._ask(wanted)

    # -- slots --------------------------------------------------------------------------------------
    @Slot(object)
    def on_controller_model_ready(self, _facts: Any) -> None:
        self._tokens.clear()  # another processor: other counts
        self._failed.clear()
        self._pending, self._asking, self._wanted = 0, (), []  # a count on its way is the other model's

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, result: object) -> None:
        if task_id != self._pending or not task_id:
            return
        if isinstance(result, ImageTokens):  # counted file by file: a damaged one never zeroes its neighbours
            for index, (file, tokens) in enumerate(zip(result.files, result.tokens)):
                if result.error_of(index) is None:
                    self._tokens[file] = tokens
                else:
                    self._failed.add(file)  # its chip says why
        self._next()
        self.counted.emit()

    @Slot(int, str)
    def on_bridge_task_failed(self, task_id: int, _message: str) -> None:
        if task_id != self._pending or not task_id:
            return
        # The task itself failed (a text model says so under the prompt; a damaged picture is an ``ImageTokens``
        # error of its own, above): nothing here.
        self._failed.update(self._asking)
        self._next()
        self.counted.emit()
