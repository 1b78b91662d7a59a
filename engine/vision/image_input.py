"""An image the user gives (a file, pasted bytes, a ``data:`` URL) turned into the one form a vision processor takes:
an 8-bit RGB picture the right way up, or one line saying why not (issue 44).

Owns: which formats are taken (PNG, JPEG, GIF, WebP, BMP), the limits checked from the header before any pixel is
decoded (bytes, pixels, the longer side), and the conversions a screenshot or a photo needs: EXIF orientation applied,
CMYK and palette images to RGB, transparency laid on white (the colour a chat bubble shows behind it), 16-bit
greyscale scaled to 8 bits (Pillow's own conversion clips every value above 255 to white), the first frame of an
animation (said in the note). Also ``decode_data_url`` for the API's ``image_url`` content parts. Does not own
storing images (image_store.py), the processors that cut them into tiles and tokens, or the window.

Why by hand around Pillow rather than Pillow alone: Pillow decodes whatever it recognises and protects against
decompression bombs only through a process-wide setting that warns (and errors only past twice its limit); here the
limits are checked per image from the header, so a 20,000 × 20,000 PNG of a few kilobytes is refused before
gigabytes are allocated, without touching a global another library may rely on.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ImageError, printable
from engine.fmt import format_bytes

FORMATS = {"PNG": "png", "JPEG": "jpeg", "GIF": "gif", "WEBP": "webp", "BMP": "bmp"}  # Pillow's name → ours
ORIENTATION = 0x0112  # the EXIF tag: 1 upright, 2-8 mirrored and/or turned
MIME_TYPES = {"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp", "image/bmp"}
_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,",
                       re.IGNORECASE)


@dataclass(frozen=True)
class ImageLimits:
    """What an image may be before anything is decoded."""

    max_bytes: int = 50 << 20  # a 4K PNG screenshot is ~10 MB; a phone JPEG 2-8 MB
    max_pixels: int = 64_000_000  # 8,000 × 8,000: decoded as RGB that is 192 MB
    max_side: int = 16_384  # a taller one is a scrolling screenshot the processor would shrink to a sliver


@dataclass(frozen=True)
class ImageInput:
    """A usable image: ``rgb`` (a PIL image in mode RGB, upright) and what the user should know about it."""

    rgb: object  # PIL.Image.Image; typed loosely so this module's importers need not import Pillow
    sha256: str  # of the bytes as given: the content address (image_store.py)
    format: str  # one of FORMATS' values
    width: int  # after orientation
    height: int
    frames: int  # 1, or an animation's frame count (the first is used)
    note: str  # "" or one line: what was converted ("CMYK converted to RGB", "first of 12 frames")


def read_image_file(path: Path, limits: ImageLimits = ImageLimits()) -> ImageInput:
    """``path`` read and checked: ``ImageError`` (one line naming the file) when it cannot be used."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > limits.max_bytes:
            raise ImageError(f"{printable(path.name)} is {format_bytes(size)}: images over "
                             f"{format_bytes(limits.max_bytes)} are not taken")
        with path.open("rb") as handle:
            data = handle.read(limits.max_bytes + 1)  # a file that grew since stat is still read bounded
    except FileNotFoundError:
        raise ImageError(f"{printable(path.name)} is gone: it was moved or deleted") from None
    except IsADirectoryError:
        raise ImageError(f"{printable(path.name)} is a folder, not an image") from None
    except OSError as exc:
        raise ImageError(f"{printable(path.name)} cannot be read: {exc.strerror or exc}") from None
    return read_image(data, path.name, limits)


def read_image(data: bytes, name: str = "image", limits: ImageLimits = ImageLimits()) -> ImageInput:
    """``data`` (an image file's bytes) decoded and converted; ``name`` is only for the messages."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    label = printable(name)
    if len(data) > limits.max_bytes:
        raise ImageError(f"{label} is {format_bytes(len(data))}: images over {format_bytes(limits.max_bytes)} "
                         "are not taken")
    if not data:
        raise ImageError(f"{label} is empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # our limits decide, below
            picture = Image.open(io.BytesIO(data), formats=list(FORMATS))  # reads the header only
    except UnidentifiedImageError:
        raise ImageError(f"{label} is not an image Miaohui reads ({_what_it_is(data)}); "
                         "PNG, JPEG, GIF, WebP and BMP are") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        declared = re.search(r"\((\d+) pixels\)", str(exc))  # Pillow names the count; the size is not read yet
        count = f"{int(declared.group(1)):,} pixels" if declared else "more pixels than any photo"
        raise ImageError(f"{label} declares {count} (a decompression bomb): the most taken is "
                         f"{limits.max_pixels / 1e6:.0f} megapixels") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"{label} is damaged: {exc}") from None
    width, height = picture.size
    if width < 1 or height < 1:
        raise ImageError(f"{label} has no pixels ({width} × {height})")
    if width * height > limits.max_pixels or max(width, height) > limits.max_side:
        kind = "a decompression bomb" if len(data) * 50 < width * height else "too large"
        raise ImageError(f"{label} is {width:,} × {height:,} pixels ({kind}): the most taken is "
                         f"{limits.max_pixels / 1e6:.0f} megapixels and {limits.max_side:,} pixels a side; "
                         "scale it down first")
    fmt = FORMATS[picture.format]
    frames = int(getattr(picture, "n_frames", 1) or 1)
    notes: list[str] = []
    try:
        picture.seek(0)
        picture.load()
        orientation = picture.getexif().get(ORIENTATION, 1)
        upright = ImageOps.exif_transpose(picture) if orientation in range(2, 9) else picture
        if upright is not picture:
            notes.append("turned upright from its EXIF orientation")
        rgb = _to_rgb(upright, notes)
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise ImageError(f"{label} is truncated or damaged ({_short(exc)}): save it again and attach the new "
                         "file") from None
    if frames > 1:
        notes.append(f"animated: the first of its {frames} frames is used")
    return ImageInput(rgb, hashlib.sha256(data).hexdigest(), fmt, rgb.width, rgb.height, frames, "; ".join(notes))


def _to_rgb(picture, notes: list[str]):  # PIL.Image.Image -> PIL.Image.Image (mode RGB)
    from PIL import Image

    mode = picture.mode
    if mode == "RGB":
        return picture
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        # 16-bit (or 32-bit integer) greyscale: scale the full range to 8 bits; Pillow's convert("L") clips instead.
        import numpy as np

        values = np.asarray(picture, dtype=np.uint32 if mode == "I" else np.uint16)
        top = 65535 if mode != "I" else max(int(values.max()), 1)
        grey = (values.astype(np.float64) * (255.0 / top)).round().clip(0, 255).astype(np.uint8)
        notes.append(f"{16 if mode != 'I' else 32}-bit greyscale scaled to 8 bits")
        return Image.fromarray(grey).convert("RGB")
    if mode == "CMYK":
        notes.append("CMYK converted to RGB")
        return picture.convert("RGB")
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in picture.info) \
            or (mode in ("L", "RGB") and "transparency" in picture.info):
        rgba = picture.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        notes.append("transparent parts shown on white")
        return Image.alpha_composite(white, rgba).convert("RGB")
    return picture.convert("RGB")  # L, P, 1, YCbCr, F…: Pillow's conversions are exact for these


def decode_data_url(url: str, limits: ImageLimits = ImageLimits()) -> bytes:
    """The bytes of a ``data:image/...;base64,...`` URL (an OpenAI ``image_url`` content part); ``ImageError``
    (one line) for any other URL, another media type, bad base64, or more bytes than ``limits`` allow."""
    match = _DATA_URL.match(url)
    if match is None:
        raise ImageError("an image URL must be a data: URL (data:image/png;base64,...)")
    mime = (match.group("mime") or "").lower()
    if mime not in MIME_TYPES:
        raise ImageError(f"a data: URL of type {printable(mime or 'text/plain')} is not an image Miaohui reads "
                         "(image/png, image/jpeg, image/gif, image/webp, image/bmp)")
    if not match.group("b64"):
        raise ImageError("an image data: URL must be base64-encoded (;base64,)")
    payload = url[match.end():]
    if len(payload) > (limits.max_bytes * 4) // 3 + 4:
        raise ImageError(f"the image in the data: URL is over {format_bytes(limits.max_bytes)}")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image data: URL's base64 is invalid") from None


def _what_it_is(data: bytes) -> str:
    head = data[:512]
    if head.startswith(b"%PDF"):
        return "it is a PDF"
    try:
        head.decode("utf-8")
        return "its bytes are text"
    except UnicodeDecodeError:
        return "unknown bytes"


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 80 else text[:79] + "…"
