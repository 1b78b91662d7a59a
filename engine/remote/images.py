"""Images sent to a remote engine (issue 44): a turn's pictures as OpenAI ``image_url`` content parts.

vLLM, llama.cpp's ``llama-server`` (started with its ``--mmproj``), Ollama's ``/v1`` and ``python -m engine serve``
all take a user message whose ``content`` is a list of ``image_url`` parts (a ``data:`` URL each) and a ``text``
part; ``engine.remote.session`` speaks that one dialect to all of them, so Ollama's own ``/api/chat`` (base64 strings
in a message's ``images``) is not needed. The picture is sent as PNG of the upright RGB the engine read
(``engine.vision.image_input``): lossless, so the server sees what a local model would, EXIF rotation already
applied. A server whose model has no vision answers with its own 400, reported as its one line.

Owns the encoding and the message shape; does not own reading images or the request (``engine.remote.session``).
"""

from __future__ import annotations

import base64
import io
from typing import Any, Mapping, Sequence

from engine.errors import BadInputError


def data_url(image: Any) -> str:
    """A ``data:image/png;base64,...`` URL of an ``engine.vision.image_input.ImageInput``'s pixels."""
    buffer = io.BytesIO()
    image.rgb.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def message_content(text: str, images: Sequence[Any]) -> str | list[dict[str, Any]]:
    """A message's ``content``: its text alone, or its images (first, as the families were trained) and its text as
    content parts."""
    if not images:
        return text
    return [*({"type": "image_url", "image_url": {"url": data_url(image)}} for image in images),
            {"type": "text", "text": text}]


def with_images(messages: Sequence[Mapping[str, Any]], images: Mapping[int, Sequence[Any]]) -> list[dict[str, Any]]:
    """``messages`` (role/content dicts) with ``images`` (message index -> pictures) in their user messages;
    ``BadInputError`` for images on a message that is not the user's."""
    out = []
    for index, message in enumerate(messages):
        given = images.get(index, ())
        if given and message["role"] != "user":
            raise BadInputError(f"images go with the user's messages, not a {message['role']} message")
        out.append({**message, "content": message_content(message["content"], given)})
    return out


__all__ = ["data_url", "message_content", "with_images"]
