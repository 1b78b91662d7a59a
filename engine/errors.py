"""The engine's exception family.

Every error the engine lets out is an ``EngineError`` whose ``str()`` is one line a user can act
on; the GUI shows it as is and the CLI prints it and exits 2. Errors from torch, safetensors,
bitsandbytes or the file system are converted at the engine's edge (loader, session) into one of
these. Each type carries its ``kind`` (an ``ErrorKind``), so a caller branches on what went wrong, never on
the wording. This module owns the types, their kinds, the one-line rule (``printable``) and
the refusal texts several floors raise alike (``REMOTE_CODE_REFUSAL``, ``NO_CHAT_TEMPLATE``), nothing else.
"""

from __future__ import annotations

import enum
import re
from typing import ClassVar

# C0 and C1 control characters and the Unicode line/paragraph separators: any of them in a message
# would let a value (a path with a newline, say) forge a second line on a terminal or in a log.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: object) -> str:
    """``text`` on one line: each control character becomes its escape (``\\n``, ``\\x1b``, ``\\u2028``).

    The one helper for echoing a user-supplied value (a path, an option) in a message. Idempotent:
    the escapes it writes are plain characters, so escaping twice changes nothing.
    """
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], str(text))


class ErrorKind(enum.Enum):
    """What went wrong, for a caller that acts on it (the window offers the remote-code opt-in on
    ``REMOTE_CODE_REFUSED``); the message says it to the user."""

    REMOTE_CODE_REFUSED = "remote code refused"
    NOT_FOUND = "not found"
    CORRUPT = "corrupt"
    UNSAFE = "unsafe"
    BAD_INPUT = "bad input"
    OUT_OF_MEMORY = "out of memory"
    CANCELLED = "cancelled"
    OTHER = "other"


class EngineError(Exception):
    """Base class: a one-line, user-facing message.

    ``str()`` escapes control characters, so a message that quotes a user-supplied value (a folder
    name holding a newline) is still exactly one line wherever it is shown: CLI, window, log.
    """

    kind: ClassVar[ErrorKind] = ErrorKind.OTHER

    def __str__(self) -> str:
        return printable(super().__str__())


class BadInputError(EngineError):
    """The request itself is invalid (empty message, bad option value)."""

    kind = ErrorKind.BAD_INPUT


class ModelNotFoundError(EngineError):
    """No model at the given path, repo id or default location."""

    kind = ErrorKind.NOT_FOUND


class CorruptModelError(EngineError):
    """A model file is truncated, empty, garbage or inconsistent."""

    kind = ErrorKind.CORRUPT


class UnsafeModelError(EngineError):
    """A model would execute code when loaded (pickle checkpoint, remote code)."""

    kind = ErrorKind.UNSAFE


class RemoteCodeRefusedError(UnsafeModelError):
    """A model folder asks to run its own Python code (``auto_map``) and the caller did not opt in; the
    window then asks the user, the CLI's opt-in is --allow-remote-code."""

    kind = ErrorKind.REMOTE_CODE_REFUSED


# The words every remote-code refusal's message carries, so the user reads the same reason in the CLI and the window.
REMOTE_CODE_REFUSAL = "asks to run the model's own Python code"


class EngineOutOfMemoryError(EngineError):
    """Device or host memory ran out; the message suggests what to change."""

    kind = ErrorKind.OUT_OF_MEMORY


class ContextTooLongError(EngineError):
    """A message cannot fit in the model's context window."""

    kind = ErrorKind.BAD_INPUT


class TemplateError(EngineError):
    """A model's chat template failed (syntax, its own refusal, recursion) or was stopped at a bound."""


# Every refusal of a model without a chat template says this: what it probably is, and the two ways forward (the
# CLI's and the window's chat, and the server's chat endpoint, go through the template; text completion does not).
# Here, beside the error types, because two floors refuse with it: the loader from the files' metadata before the
# weights load (engine/models/template_meta.py) and the renderer (engine/generate/chat_template.py).
NO_CHAT_TEMPLATE = ("this model has no chat template (it is most likely a base model, trained to continue text "
                    "rather than to chat), so it cannot chat: continue text with it instead (`python -m engine "
                    "complete --prompt TEXT`), or use an instruct or chat version of it (its name usually ends in "
                    "-Instruct or -Chat), which ships with one")


class CancelledError(EngineError):
    """The user cancelled a load, or a prompt while it rendered (generation cancel is a normal finish, not an
    error: the session turns this one into a cancelled finish too)."""

    kind = ErrorKind.CANCELLED


class FetchError(EngineError):
    """Putting the default model in place failed (download, checksum, conversion)."""


class DataDirError(EngineError):
    """Miaohui's data folder (``MIAOHUI_HOME`` or the platform's) or a folder in it cannot be used."""


class DownloadsDisabledError(BadInputError):
    """A Hub search, model page or download was asked for while downloads are off (the default)."""


class HubError(FetchError):
    """The model hub could not be reached, refused a request, or sent a file that failed verification."""


class GatedModelError(HubError):
    """The Hub refused a gated model's files: no token was given, or its account has not been granted access."""


class DocumentError(BadInputError):
    """A document cannot be read as text (engine/docs): too large, binary, a zip bomb, unreadable, gone.

    One per file: the indexer reports it as that file's line and goes on with the others."""


class NoTextLayerError(DocumentError):
    """A PDF has no text to extract: encrypted, or pages that are only images (scans need OCR, which we lack)."""


class ImageError(BadInputError):
    """An image cannot be used (engine/vision): not an image, damaged or truncated, too large, a decompression bomb,
    an unreadable data: URL. One line naming the image; nothing else in the message or conversation is lost."""


class CollectionNotFoundError(EngineError):
    """No document collection of that name in the documents store (``engine docs list`` names them)."""

    kind = ErrorKind.NOT_FOUND
