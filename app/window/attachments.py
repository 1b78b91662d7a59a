"""The files attached to the message being written: which they are, reading each on the engine thread, and what a
Send takes; and its pictures (issue 44): an image file offered, or image data pasted, checked
(``engine.vision.image_input``: one line when it cannot be used) and kept content-addressed in the images folder
(``engine.vision.image_store``) at once, so the message and its history refer to that copy.

Owns the list of attached paths and their state (being read, read: pages and tokens, or failed: one line), shown on
the composer's chips (``app.widgets.attachment_chips``; an image's with its thumbnail). Does not own reading or counting (the worker's
``read_attachment`` with the model's tokenizer, asked through ``app.runtime.bridge``), nor grounding the message
(done on the worker when the reply is asked for), nor the composer's drop and paste handling.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QImageReader

from app.history.images_cell import is_image_file
from app.runtime.bridge import Bridge
from app.ui.engine_texts import engine_text
from app.widgets.attachment_chips import AttachmentChips
from engine.docs.attach import AttachedFile
from engine.errors import ImageError
from engine.vision import image_store
from engine.vision.image_input import ImageLimits, read_image

PASTED_NAME = "pasted image"  # the one-line errors' name for image data with no file name (engine text: English)


class Attachments(QObject):
    """Reads each offered file once and keeps its chip up to date; ``take()`` hands the usable ones to a Send.

    Signals:
        changed(): a file was attached, removed, read or found unreadable (the composer's forecast measures again).
    """

    changed = Signal()

    def __init__(self, bridge: Bridge, chips: AttachmentChips, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._chips = chips
        self._reading: dict[int, str] = {}  # task id -> path being read
        self._paths: list[str] = []  # attached documents, in order
        self._images: list[str] = []  # attached pictures: their copies in the images folder, in order
        self._pasted = 0  # pictures pasted so far: names their chips
        bridge.task_finished.connect(self.on_bridge_task_finished)
        bridge.task_failed.connect(self.on_bridge_task_failed)
        chips.remove_requested.connect(self.on_chips_remove_requested)

    def paths(self) -> list[str]:
        return list(self._paths)

    def images(self) -> list[str]:
        """The attached pictures (their copies in the images folder), in order."""
        return list(self._images)

    def for_send(self) -> list[str]:
        """What a Send takes: the usable documents, then the pictures (``ChatMessage.sent`` tells them apart)."""
        return self.usable() + self.images()

    def usable(self) -> list[str]:
        """The attached documents a Send grounds the message in: all but those that failed to read (a file still being
        read goes too: the worker reads it before it grounds the message)."""
        return [path for path in self._paths if not (chip := self._chips.chip(path)) or not chip.error]

    def take(self) -> list[str]:
        """The usable files, and the chips cleared: the message took them."""
        usable = self.usable()
        self.clear()
        return usable

    def clear(self) -> None:
        had = bool(self._paths or self._images or self._chips.chips())
        self._paths.clear()
        self._images.clear()
        self._reading.clear()
        self._chips.clear()
        if had:
            self.changed.emit()

    @Slot(list)
    def on_composer_files_offered(self, paths: list) -> None:
        for path in paths:
            if is_image_file(path):
                self._keep_image(path, Path(path).name, _read_bounded)
                continue
            if path in self._paths:
                continue  # attached once is enough
            self._paths.append(path)
            self._chips.add(path)
            self._reading[self._bridge.read_attachment(path)] = path
            self.changed.emit()

    @Slot(bytes)
    def on_composer_image_pasted(self, data: bytes) -> None:
        """Image data from the clipboard (a screenshot), as PNG bytes."""
        self._pasted += 1
        shown = self.tr("pasted image") if self._pasted == 1 else self.tr("pasted image {n}").format(n=self._pasted)
        self._keep_image(data, PASTED_NAME, bytes, shown)

    def _keep_image(self, source: object, name: str, read: object, shown: str = "") -> None:
        """Check the picture and keep it in the images folder; a chip either way (one line when it cannot be used),
        named ``shown`` (default: ``name``, the file's)."""
        shown = shown or name
        try:
            data = read(source)  # type: ignore[operator]
            image = read_image(data, name)
            kept = str(image_store.put(data, image.format))
        except ImageError as exc:
            self._chips.add(f"{name}#{len(self._chips.chips())}", shown).show_error(engine_text(str(exc)))
            self.changed.emit()
            return
        if kept not in self._images:  # the same picture twice is one
            self._images.append(kept)
            self._chips.add(kept, shown).show_thumbnail(kept, image.width, image.height)
        self.changed.emit()

    def attach_kept(self, images: list[str] | tuple[str, ...]) -> None:
        """Attach pictures already in the images folder (an edited message's, to go with its new version)."""
        for kept in images:
            if kept not in self._images:
                self._images.append(kept)
                picture = QImageReader(kept).size()  # the header only: the thumbnail decodes the rest
                self._chips.add(kept, Path(kept).name[:12] + "…").show_thumbnail(kept, picture.width(),
                                                                               picture.height())
        if images:
            self.changed.emit()

    def detach(self, images: list[str] | tuple[str, ...]) -> None:
        """Remove these pictures' chips (an edit cancelled takes back the pictures it attached)."""
        for kept in images:
            if kept in self._images:
                self.on_chips_remove_requested(kept)

    @Slot(str)
    def on_chips_remove_requested(self, path: str) -> None:
        if path in self._images:
            self._images.remove(path)  # the stored copy stays: another message may show the same picture
        if path in self._paths:
            self._paths.remove(path)
        self._chips.remove(path)
        self.changed.emit()

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, result: object) -> None:
        path = self._reading.pop(task_id, None)
        chip = self._chips.chip(path) if path is not None else None
        if chip is not None and isinstance(result, AttachedFile):
            chip.show_read(result.pages, result.tokens)
            self.changed.emit()

    @Slot(int, str)
    def on_bridge_task_failed(self, task_id: int, error: str) -> None:
        path = self._reading.pop(task_id, None)
        chip = self._chips.chip(path) if path is not None else None
        if chip is not None:
            chip.show_error(engine_text(error))
            self.changed.emit()


def _read_bounded(path: str) -> bytes:
    """An offered image file's bytes, read no further than the images' limit (a bigger one is refused by its size)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(ImageLimits().max_bytes + 1)
    except OSError as exc:
        raise ImageError(f"{Path(path).name} cannot be read: {exc.strerror or exc}") from None
