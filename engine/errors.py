"""The engine's exception family.

Every error the engine lets out is an ``EngineError`` whose ``str()`` is one line a user can act
on; the GUI shows it as is and the CLI prints it and exits 2. Errors from torch, safetensors,
bitsandbytes or the file system are converted at the engine's edge (loader, session) into one of
these. This module owns the types and the one-line rule (``printable``), nothing else.
"""

from __future__ import annotations

import re

# C0 and C1 control characters and the Unicode line/paragraph separators: any of them in a message
# would let a value (a path with a newline, say) forge a second line on a terminal or in a log.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: object) -> str:
    """``text`` on one line: each control character becomes its escape (``\\n``, ``\\x1b``, ``\\u2028``).

    The one helper for echoing a user-supplied value (a path, an option) in a message. Idempotent:
    the escapes it writes are plain characters, so escaping twice changes nothing.
    """
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], str(text))


class EngineError(Exception):
    """Base class: a one-line, user-facing message.

    ``str()`` escapes control characters, so a message that quotes a user-supplied value (a folder
    name holding a newline) is still exactly one line wherever it is shown: CLI, window, log.
    """

    def __str__(self) -> str:
        return printable(super().__str__())


class BadInputError(EngineError):
    """The request itself is invalid (empty message, bad option value)."""


class ModelNotFoundError(EngineError):
    """No model at the given path, repo id or default location."""


class CorruptModelError(EngineError):
    """A model file is truncated, empty, garbage or inconsistent."""


class UnsafeModelError(EngineError):
    """A model would execute code when loaded (pickle checkpoint, remote code)."""


# The words every remote-code refusal carries: the window recognises them in the one-line error and offers
# the opt-in (the CLI's is --allow-remote-code).
REMOTE_CODE_REFUSAL = "asks to run the model's own Python code"


class EngineOutOfMemoryError(EngineError):
    """Device or host memory ran out; the message suggests what to change."""


class ContextTooLongError(EngineError):
    """A message cannot fit in the model's context window."""


class TemplateError(EngineError):
    """A model's chat template failed (syntax, its own refusal, recursion) or was stopped at a bound."""


class CancelledError(EngineError):
    """The user cancelled a load, or a prompt while it rendered (generation cancel is a normal finish, not an
    error: the session turns this one into a cancelled finish too)."""


class FetchError(EngineError):
    """Putting the default model in place failed (download, checksum, conversion)."""


class DataDirError(EngineError):
    """Miaohui's data folder (``MIAOHUI_HOME`` or the platform's) or a folder in it cannot be used."""
