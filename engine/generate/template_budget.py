"""The bounds of one chat-template render: its deadline, size cap, memory margin and cancel event.

Owns ``TemplateLimits`` (how far a render may go), ``Budget`` (one render's bounds in progress, checked at
every guarded step), the render's current budget (``bounded_by`` sets it for the duration of a render,
``current`` checks and returns it) and the size estimates that refuse a step *before* it runs when its
result would pass the cap: ``*``, ``**``, ``%``, ``format``, ``join``, ``replace``, ``indent`` and the like
can multiply a size in one C-level step, which cannot be interrupted once started.

Does not own the Jinja environment whose hooks call these checks (``engine.generate.template_sandbox``)
nor rendering a tokenizer's template (``engine.generate.chat_template``). Every refusal is one
``TemplateError`` line; a set cancel event is ``CancelledError``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import psutil
from jinja2.utils import generate_lorem_ipsum

from engine.errors import CancelledError, TemplateError


@dataclass(frozen=True)
class TemplateLimits:
    """How far one rendering (or one ``build_prompt``, which shares its deadline) may go."""

    # A real template renders a conversation in milliseconds; 5 s is a thousand times that on a slow CPU
    # and still short enough that a refusal does not look like a hang.
    time_s: float = 5.0
    # A template writes each message about once plus its own markup: twice the conversation plus 1 M
    # characters of markup is far more than a real template writes, and keeps a hostile one to a few MB.
    base_chars: int = 1_000_000
    # Growth of the process while rendering. A real template's working set is a few MB; this much more
    # is a runaway (Python keeps freed memory, so the margin is wide).
    memory_bytes: int = 512 * 1024 * 1024


DEFAULT_LIMITS = TemplateLimits()
# Integers an operator may build: chat templates count messages; a 64 Kbit number still multiplies in
# microseconds, while squaring in a loop past it would take minutes inside one C call.
MAX_INT_BITS = 1 << 16
# A field width or precision of 7+ digits in a format string ('%9999999999s', '{:>9999999999}').
_HUGE_WIDTH = re.compile(r"[0-9]{7,}")
# Process size is read this often at most: a read costs ~10 µs, a check ~100 ns.
_MEMORY_EVERY_S = 0.01


class Budget:
    """The bounds of one render in progress (deadline, size cap, memory, cancel)."""

    def __init__(self, deadline: float, max_chars: int, limits: TemplateLimits,
                 cancel: threading.Event | None) -> None:
        self.deadline, self.max_chars, self.limits, self.cancel = deadline, max_chars, limits, cancel
        self._process = psutil.Process()
        self._rss_limit = self._process.memory_info().rss + limits.memory_bytes
        self._next_memory_check = 0.0

    def check(self) -> None:
        """Raise when cancelled, past the deadline or grown too much."""
        if self.cancel is not None and self.cancel.is_set():
            raise CancelledError("cancelled while the chat template was rendering")
        now = time.monotonic()
        if now > self.deadline:
            raise TemplateError(f"this model's chat template took more than {self.limits.time_s:g} s to render, "
                                "so it was stopped: use another model or fix its chat template")
        if now >= self._next_memory_check:
            self._next_memory_check = now + _MEMORY_EVERY_S
            if self._process.memory_info().rss > self._rss_limit:
                raise TemplateError(f"this model's chat template used more than "
                                    f"{self.limits.memory_bytes // 2**20} MB while rendering, so it was stopped")

    def size(self, n: int) -> None:
        """Refuse a value of ``n`` characters or items (made or about to be made) past the cap."""
        if n > self.max_chars:
            raise TemplateError(f"this model's chat template builds text of {n:,} characters (at most "
                                f"{self.max_chars:,}), so it was stopped: use another model or fix its chat template")

    def sized(self, value: Any) -> Any:
        if isinstance(value, (str, list, tuple)):
            self.size(len(value))
        return value


_CURRENT: ContextVar[Budget | None] = ContextVar("chat_template_budget", default=None)


@contextmanager
def bounded_by(budget: Budget) -> Iterator[Budget]:
    """Make ``budget`` the current one for the duration of a render (this thread or task only)."""
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def current() -> Budget:
    """The current render's budget, checked: every guarded step of a template calls this first."""
    budget = _CURRENT.get()
    if budget is None:
        # Outside a render only Jinja's compile-time constant folding calls in; refusing makes it leave the
        # expression to the (bounded) render.
        raise TemplateError("chat template code ran outside a bounded render")
    budget.check()
    return budget


# -- size estimates of the steps that can multiply a size ------------------------------------------------

def size_of(value: Any) -> int:
    """The length of a string, list, tuple or dict; 0 for anything else."""
    return len(value) if isinstance(value, (str, list, tuple, dict)) else 0


def check_ints(budget: Budget, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """A width, count or padding argument is at most the size cap ('x'.ljust(10**10) allocates first)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and abs(value) > budget.max_chars:
            raise TemplateError(f"this model's chat template asks for a size of {value:,} (at most "
                                f"{budget.max_chars:,}), so it was stopped")


def check_format(budget: Budget, fmt: str, args: Any) -> None:
    """Refuse a format string with a huge field width, or a huge number among its arguments, before formatting."""
    if _HUGE_WIDTH.search(fmt):
        raise TemplateError("this model's chat template formats with a huge field width, so it was stopped")
    check_ints(budget, args if isinstance(args, tuple) else (args,), {})


def _joined(budget: Budget, sep: Any, items: Any) -> None:
    """``items`` as a list already (``listed``): the joined length, stopping as soon as it is too long."""
    if not isinstance(items, list):
        return
    total = size_of(sep) * max(len(items) - 1, 0)
    budget.size(total)
    for item in items:
        total += len(item) if isinstance(item, str) else len(str(item))
        budget.size(total)


def listed(items: Any) -> Any:
    """A join's items as a list, so their joined length is known before the one C call that joins them
    (range(100000)|join(sep) took 19 s and 10 GB to be refused afterwards). A generator's items are made
    through guarded steps, so listing them is bounded too."""
    return items if isinstance(items, (str, list)) or not hasattr(items, "__iter__") else list(items)


def _replaced(budget: Budget, text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        budget.size(len(text) + (len(text) // max(len(old), 1) + 1) * len(new))


def estimate_method(budget: Budget, obj: Any, args: tuple, kwargs: dict) -> None:
    """Refuse a str method whose result would pass the cap, before it runs."""
    subject, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if obj is generate_lorem_ipsum:
        n = kwargs.get("n", args[0] if args else 5)
        most = kwargs.get("max", args[3] if len(args) > 3 else 100)
        if isinstance(n, int) and isinstance(most, int):
            budget.size(n * most * 12)  # words of at most ~12 characters
    if not isinstance(subject, str):
        return
    if name == "join" and args:
        _joined(budget, subject, args[0])
    elif name == "replace" and len(args) >= 2:
        _replaced(budget, subject, args[0], args[1])
    elif name == "expandtabs":
        size = (list(args) + [kwargs.get("tabsize", 8)])[0]
        if isinstance(size, int):
            budget.size(len(subject) + subject.count("\t") * size)


def estimate_filter(budget: Budget, name: str, value: Any, args: tuple, kwargs: dict) -> None:
    """Refuse a filter whose result would pass the cap, before it runs."""
    def arg(i: int, key: str, default: Any) -> Any:
        return args[i] if len(args) > i else kwargs.get(key, default)

    if name == "join":
        _joined(budget, arg(0, "d", ""), value)
    elif name == "replace":
        _replaced(budget, value, arg(0, "old", None), arg(1, "new", None))
    elif name == "indent" and isinstance(value, str):
        width = arg(0, "width", 4)
        budget.size(len(value) + (value.count("\n") + 1) * (width if isinstance(width, int) else size_of(width)))
    elif name == "wordwrap" and isinstance(value, str):
        width, wrap = arg(0, "width", 79), arg(2, "wrapstring", "\n")
        if isinstance(width, int):
            budget.size(len(value) + (len(value) // max(width, 1) + 1) * max(size_of(wrap), 1))
    elif name == "format" and isinstance(value, str):
        check_format(budget, value, args)
    elif name == "tojson":
        indent = arg(2, "indent", None)
        if isinstance(indent, int) and indent > 0:
            # Each character of the compact form can start a line of at most depth × indent spaces;
            # depth × indent itself is then bounded by the compact length times indent.
            budget.size(len(json.dumps(value, default=str)) * (1 + indent))

