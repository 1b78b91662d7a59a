"""The engine's exception family.

Every error the engine lets out is an ``EngineError`` whose ``str()`` is one line a user can act
on; the GUI shows it as is and the CLI prints it and exits 2. Errors from torch, safetensors,
bitsandbytes or the file system are converted at the engine's edge (loader, session) into one of
these. This module owns the types only.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class: a one-line, user-facing message."""


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


class CancelledError(EngineError):
    """The user cancelled a load (generation cancel is a normal finish, not an error)."""


class FetchError(EngineError):
    """Putting the default model in place failed (download, checksum, conversion)."""
