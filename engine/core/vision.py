"""The engine core's vision-language model (issue 44): a model folder of one of ``engine.vision.vlm.VISION_FAMILIES``
loaded through ``load_vision_model``, and its turns through ``engine.vision.turn.VisionChat``.

Owns which loads go to the vision loader (a Hugging Face folder whose config.json names a vision family), the one
``VisionModel`` kept beside the core's ``loaded`` (its ``LoadedModel``), one ``VisionChat`` (the conversation whose
cached image prefix a follow-up reuses; another conversation starts its own), reading a turn's stored image files on
the engine thread, and refusing images sent to a model without vision (``NoVisionError``). Does not own the job loop
or how the events reach the client (``engine.core.core``), nor where images are kept (``engine.vision.image_store``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from engine.errors import BadInputError, EngineError, ImageError
from engine.events import Message
from engine.inputs import LoadSpec, SamplingConfig

# A turn's images: (index of the message in the turn's messages, the image files that go before its text).
TurnImages = tuple[tuple[int, tuple[str, ...]], ...]


def is_vision_folder(spec: LoadSpec) -> bool:
    """Whether ``spec`` names a model folder here of a vision family (no torch: config.json is read)."""
    from engine.models.loader import resolve_source
    from engine.vision.vlm import vision_family

    try:
        return vision_family(resolve_source(spec.model).folder) is not None
    except EngineError:
        return False  # the text loader says what is wrong with it


class VisionTurns:
    """The vision model beside the core's loaded one (None while a text model or none is loaded)."""

    def __init__(self) -> None:
        self._model: Any = None  # engine.vision.vlm.VisionModel
        self._chat: Any = None  # engine.vision.turn.VisionChat of conversation ``self._cid``
        self._cid: int | None = None
        self._pending: Any = None  # loaded, not yet the core's (a later failure elsewhere must not keep it)

    def load(self, spec: LoadSpec, progress: Any, cancel: threading.Event) -> Any:
        """``spec``'s vision model loaded (its ``LoadedModel`` returned; the ``VisionModel`` kept until ``loaded_now``
        says which model the core holds), or None for a folder that is not a vision model's."""
        if not is_vision_folder(spec):
            return None
        from engine.vision.vlm import load_vision_model

        model = load_vision_model(spec, progress, cancel)
        self._pending = model
        return model.loaded

    def loaded_now(self, loaded: object) -> None:
        """The core holds ``loaded`` now: the vision model is kept if it is this one's, dropped otherwise."""
        pending, self._pending = self._pending, None
        self._model = pending if pending is not None and pending.loaded is loaded else None
        self._chat, self._cid = None, None

    def holds(self, loaded: object) -> bool:
        """Whether ``loaded`` is the vision model's (its turns go through ``turn``)."""
        return self._model is not None and self._model.loaded is loaded

    def model_of(self, loaded: object) -> Any:
        """The ``VisionModel`` whose ``LoadedModel`` is ``loaded`` (a vision task's model); ``NoVisionError`` for a
        text model, named as the user knows it."""
        if not self.holds(loaded):
            from engine.vision.vlm import require_vision

            require_vision(None, str(getattr(getattr(loaded, "facts", None), "name", "") or "this model"))  # raises
        return self._model

    def clear(self) -> None:
        self._model, self._chat, self._cid = None, None, None

    def turn(self, conversation_id: int, messages: Sequence[Message], images: TurnImages, config: SamplingConfig,
             cancel: threading.Event) -> Iterator[object]:
        """One reply's events (``VisionChat.generate``'s: Started, ImagesEncoded, …, Finished); the images are read
        from their files here, a bad one a ``BadInputError`` line before anything is computed."""
        from engine.vision.image_input import read_image_file
        from engine.vision.turn import VisionChat  # torch: after a vision model is loaded

        if self._chat is None or self._cid != conversation_id:  # one conversation's cache at a time
            self._chat, self._cid = VisionChat(self._model), conversation_id
        pictures = {index: [read_image_file(Path(path)) for path in paths] for index, paths in images if paths}
        return self._chat.generate(messages, pictures, config, cancel)


@dataclass(frozen=True)
class ImageTokens:
    """What pictures will cost a vision turn before it is sent: the tokens each file becomes (the processor's resizing
    and tiling, no forward), in the order of ``files``; the KV bytes are the client's (tokens × bytes per token).
    A file that could not be read has 0 tokens and its own error in ``errors`` (None for each file counted)."""

    files: tuple[str, ...]
    tokens: tuple[int, ...]
    errors: tuple[ImageError | None, ...] = ()  # aligned with ``files``; () when every file was counted

    def error_of(self, index: int) -> ImageError | None:
        """Why ``files[index]`` was not counted, or None when it was."""
        return self.errors[index] if self.errors else None


def count_image_tokens(vision: Any, files: Sequence[str]) -> ImageTokens:
    """``files``' image tokens on ``vision`` (a ``VisionModel``), read here on the engine thread, each file alone: one
    that cannot be read has its ``ImageError`` in ``errors`` (its chip already says so) and the others are still
    counted, so a forecast never loses a readable picture's tokens to a damaged neighbour."""
    from engine.vision.image_input import read_image_file
    from engine.vision.turn import tokens_per_image  # torch: after a vision model is loaded

    tokens: list[int] = []
    errors: list[ImageError | None] = []
    for path in files:
        try:
            picture = read_image_file(Path(path)).rgb
        except ImageError as error:
            tokens.append(0)
            errors.append(error)
            continue
        (count,) = tokens_per_image(vision, [picture])  # the processor is asked one picture at a time anyway
        tokens.append(count)
        errors.append(None)
    return ImageTokens(tuple(files), tuple(tokens), tuple(errors) if any(errors) else ())


def refuse_images(images: TurnImages, name: str) -> None:
    """``NoVisionError`` when a turn has images and the model loaded (``name``) has no vision."""
    if any(paths for _, paths in images):
        from engine.vision.vlm import require_vision

        require_vision(None, name)


def refuse_text_job(text: str | None) -> None:
    if text is not None:
        raise BadInputError("Complete text needs a text model: a vision-language model answers in the chat")


__all__ = ["ImageTokens", "TurnImages", "VisionTurns", "count_image_tokens", "is_vision_folder", "refuse_images",
           "refuse_text_job"]
