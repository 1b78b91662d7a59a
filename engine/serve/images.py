"""Images in ``/v1/chat/completions`` (issue 44): OpenAI's ``image_url`` content parts read and turned into pictures.

A user message's ``content`` may be a list of ``{"type": "text", "text": ...}`` and ``{"type": "image_url",
"image_url": {"url": ...}}`` parts; ``image_url_of`` takes a part's URL (``engine.serve.schemas`` keeps it as an
``ImageRef``: the message's index and the URL). ``resolve_images`` then reads them, off the event loop:

- a ``data:image/...;base64,...`` URL is decoded by ``engine.vision.image_input`` (its limits, its one-line
  ``ImageError``: a 400 with that line);
- an ``http(s)://`` URL is fetched only when the server was started with downloads allowed (``engine serve
  --allow-downloads``, the same switch as the model library's, ``engine.library.access``); else a 400 saying to send
  a data: URL. A fetch reads at most the image limit's bytes (``ImageLimits.max_bytes``), follows redirects only to
  http(s), and any failure is one 400 line;
- any other URL is a 400.

``refuse_images`` is the 400 a text-only model gives an image (``engine.vision.vlm.NoVisionError``'s line), or a
request with more than ``MAX_IMAGES``.

Does not own decoding image bytes (``engine.vision.image_input``), serving a vision model
(``engine.serve.vision_worker``) or the HTTP routes (``engine.serve.app``).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from engine.errors import ImageError
from engine.fmt import format_bytes, one_line
from engine.serve.errors import ApiError
from engine.vision.image_input import ImageInput, ImageLimits, decode_data_url, read_image
from engine.vision.vlm import require_vision

MAX_IMAGES = 16  # per request: each is a vision-tower pass and hundreds to thousands of prompt tokens
FETCH_TIMEOUT_S = 20.0
NO_DOWNLOADS = ("image URLs on the web are not fetched: this server's downloads are off (engine serve "
                "--allow-downloads); send the image itself as a data: URL (data:image/png;base64,...)")


@dataclass(frozen=True)
class ImageRef:
    """An ``image_url`` part: the index of its message in the conversation and its URL."""

    message: int
    url: str


def image_url_of(part: Mapping[str, Any], where: str) -> str:
    """The URL of an ``image_url`` content part (``{"url": ...}``, or the URL alone as some clients send it)."""
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise ApiError(400, f"{where}: an image_url part needs image_url.url (a data: URL or an http(s) URL)",
                       param="messages")
    return url


def refuse_images(refs: Sequence[ImageRef], model: str, vision: bool) -> None:
    """The 400 for images sent to a text-only model, or too many images in one request."""
    if not refs:
        return
    if not vision:
        try:
            require_vision(None, model)
        except ImageError as exc:
            raise ApiError(400, str(exc), param="messages", code="model_has_no_vision") from None
    if len(refs) > MAX_IMAGES:
        raise ApiError(400, f"{len(refs)} images in one request: this server takes at most {MAX_IMAGES}",
                       param="messages")


def resolve_images(refs: Sequence[ImageRef], allow_downloads: bool,
                   limits: ImageLimits = ImageLimits()) -> dict[int, tuple[ImageInput, ...]]:
    """Each message's pictures, in order (see the module docstring); ``ApiError(400)`` with one line for any that
    cannot be used. Blocking (decoding, a fetch): the app calls it in a thread."""
    found: dict[int, list[ImageInput]] = {}
    for number, ref in enumerate(refs, 1):
        name = f"image {number}"
        try:
            scheme = ref.url.split(":", 1)[0].lower()
            if scheme == "data":
                data = decode_data_url(ref.url, limits)
            elif scheme in ("http", "https"):
                if not allow_downloads:
                    raise ApiError(400, f"{name}: {NO_DOWNLOADS}", param="messages", code="downloads_disabled")
                data = fetch_image(ref.url, limits.max_bytes)
            else:
                raise ImageError("an image URL must be a data: URL or, with downloads allowed, an http(s) URL")
            found.setdefault(ref.message, []).append(read_image(data, name, limits))
        except ImageError as exc:
            raise ApiError(400, f"{name}: {exc}" if not str(exc).startswith(name) else str(exc),
                           param="messages", code="invalid_image") from None
    return {index: tuple(images) for index, images in found.items()}


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed to http(s) only (urllib's own handler would follow one to ftp)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if not newurl.lower().startswith(("http://", "https://")):
            raise ImageError(f"the image URL redirects to {newurl.split(':', 1)[0]}:, which is not fetched")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch_image(url: str, max_bytes: int) -> bytes:
    """The bytes at ``url``, ``ImageError`` (one line) when it cannot be fetched or is over ``max_bytes``: the body
    is read in pieces and given up on past the bound, whatever its Content-Length said."""
    opener = urllib.request.build_opener(_HttpOnlyRedirects())
    request = urllib.request.Request(url, headers={"User-Agent": "Miaohui", "Accept": "image/*"})
    try:
        with opener.open(request, timeout=FETCH_TIMEOUT_S) as response:
            declared = response.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise ImageError(f"the image at the URL is {format_bytes(int(declared))}, over "
                                 f"{format_bytes(max_bytes)}")
            chunks, size = [], 0
            while chunk := response.read(1 << 16):
                size += len(chunk)
                if size > max_bytes:
                    raise ImageError(f"the image at the URL is over {format_bytes(max_bytes)}")
                chunks.append(chunk)
            return b"".join(chunks)
    except urllib.error.HTTPError as exc:
        raise ImageError(f"fetching the image URL failed: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise ImageError(f"fetching the image URL failed: {one_line(reason)}") from None


__all__ = ["ImageRef", "image_url_of", "refuse_images", "resolve_images", "fetch_image", "MAX_IMAGES", "NO_DOWNLOADS"]
