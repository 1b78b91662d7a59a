"""Rendering a model's chat template within bounds of time, size, memory and a cancel event.

A chat template is a Jinja program that arrives with a downloaded model: untrusted code. transformers
runs it in Jinja's sandbox, which stops file and attribute escapes but nothing else: nested loops over
large ranges ran for minutes and grew to 9 GB, and the window's Stop could not end them. This module
renders the way transformers does (the same sandbox class, options, globals, ``tojson`` and
``{% generation %}`` tag, the same variables), so a real template gives the same text, with every place
a template can spend time or memory guarded:

- each loop iteration, call, filter, operator, attribute or item lookup and output chunk checks the
  deadline, the cancel event and (every few milliseconds) how much the process has grown;
- every string or list that a call, filter, operator, ``~`` or captured block builds, and the output,
  is capped in size, and the operations that can multiply a size in one step (``*``, ``**``, ``%``,
  ``format``, ``join``, ``replace``, ``indent``, ...) are refused *before* they run when the result
  would pass the cap: a single C-level step cannot be interrupted.

Every failure is one ``TemplateError`` line (a syntax error, ``raise_exception``, recursion, an
undefined value, a bound); a set cancel event is ``CancelledError``. Owns rendering to text only: which
messages to render, and tokenising the text, are ``engine.generate.context``'s.
"""

from __future__ import annotations

import json
import re
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, wraps
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import jinja2
import psutil
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, generate_lorem_ipsum
from jinja2.visitor import NodeTransformer

from engine.errors import CancelledError, TemplateError
from engine.fmt import one_line


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
# The longest real templates (tool use, reasoning) are ~20 KB; compiling is not interruptible, so a
# template file past this is refused before it is parsed.
MAX_TEMPLATE_CHARS = 1_000_000
# Integers an operator may build: chat templates count messages; a 64 Kbit number still multiplies in
# microseconds, while squaring in a loop past it would take minutes inside one C call.
_MAX_INT_BITS = 1 << 16
# A field width or precision of 7+ digits in a format string ('%9999999999s', '{:>9999999999}').
_HUGE_WIDTH = re.compile(r"[0-9]{7,}")
# Process size is read this often at most: a read costs ~10 µs, a check ~100 ns.
_MEMORY_EVERY_S = 0.01
_MESSAGE_CHARS = 200  # a template's own words in an error, cut to fit one line


class _Budget:
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


_BUDGET: ContextVar[_Budget | None] = ContextVar("chat_template_budget", default=None)


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:
        # Outside a render only Jinja's compile-time constant folding calls in; refusing makes it leave the
        # expression to the (bounded) render.
        raise TemplateError("chat template code ran outside a bounded render")
    budget.check()
    return budget


# -- size estimates of the steps that can multiply a size ------------------------------------------------

def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple, dict)) else 0


def _check_ints(budget: _Budget, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """A width, count or padding argument is at most the size cap ('x'.ljust(10**10) allocates first)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and abs(value) > budget.max_chars:
            raise TemplateError(f"this model's chat template asks for a size of {value:,} (at most "
                                f"{budget.max_chars:,}), so it was stopped")


def _check_format(budget: _Budget, fmt: str, args: Any) -> None:
    if _HUGE_WIDTH.search(fmt):
        raise TemplateError("this model's chat template formats with a huge field width, so it was stopped")
    _check_ints(budget, args if isinstance(args, tuple) else (args,), {})


def _joined(budget: _Budget, sep: Any, items: Any) -> None:
    """``items`` as a list already (``_listed``): the joined length, stopping as soon as it is too long."""
    if not isinstance(items, list):
        return
    total = _length(sep) * max(len(items) - 1, 0)
    budget.size(total)
    for item in items:
        total += len(item) if isinstance(item, str) else len(str(item))
        budget.size(total)


def _listed(items: Any) -> Any:
    # A join's items as a list, so their joined length is known before the one C call that joins them
    # (range(100000)|join(sep) took 19 s and 10 GB to be refused afterwards). A generator's items are made
    # through guarded steps, so listing them is bounded too.
    return items if isinstance(items, (str, list)) or not hasattr(items, "__iter__") else list(items)


def _replaced(budget: _Budget, text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        budget.size(len(text) + (len(text) // max(len(old), 1) + 1) * len(new))


def _estimate_method(budget: _Budget, obj: Any, args: tuple, kwargs: dict) -> None:
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


def _estimate_filter(budget: _Budget, name: str, value: Any, args: tuple, kwargs: dict) -> None:
    """Refuse a filter whose result would pass the cap, before it runs."""
    def arg(i: int, key: str, default: Any) -> Any:
        return args[i] if len(args) > i else kwargs.get(key, default)

    if name == "join":
        _joined(budget, arg(0, "d", ""), value)
    elif name == "replace":
        _replaced(budget, value, arg(0, "old", None), arg(1, "new", None))
    elif name == "indent" and isinstance(value, str):
        width = arg(0, "width", 4)
        budget.size(len(value) + (value.count("\n") + 1) * (width if isinstance(width, int) else _length(width)))
    elif name == "wordwrap" and isinstance(value, str):
        width, wrap = arg(0, "width", 79), arg(2, "wrapstring", "\n")
        if isinstance(width, int):
            budget.size(len(value) + (len(value) // max(width, 1) + 1) * max(_length(wrap), 1))
    elif name == "format" and isinstance(value, str):
        _check_format(budget, value, args)
    elif name == "tojson":
        indent = arg(2, "indent", None)
        if isinstance(indent, int) and indent > 0:
            # Each character of the compact form can start a line of at most depth × indent spaces;
            # depth × indent itself is then bounded by the compact length times indent.
            budget.size(len(json.dumps(value, default=str)) * (1 + indent))


# -- the environment ---------------------------------------------------------------------------------

class _TemplateRaised(jinja2.TemplateError):
    """What ``raise_exception`` raises: the template's own refusal of the conversation."""


def _raise_exception(message: Any) -> None:
    raise _TemplateRaised(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # transformers' override: Jinja's own escapes HTML characters, which chat prompts must keep.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict`` as transformers exposes it: callable, no attribute tricks on the type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(Namespace):
    """``namespace`` as transformers exposes it: no underscore-prefixed attributes (CPython internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Jinja's signature trick: namespace(self=...) works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_' ({name!r})")


class _GenerationTag(Extension):
    """``{% generation %}…{% endgeneration %}`` (transformers marks assistant text with it): renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


_LOOP_FILTER = "_miaohui_bounded_loop"
_CONCAT_FILTER = "_miaohui_bounded_concat"


def _bounded_loop(iterable: Iterable[Any]) -> Iterator[Any]:
    for item in iterable:
        _budget()
        yield item


def _bounded_concat(parts: Sequence[Any]) -> str:
    budget = _budget()
    strings = [str(part) for part in parts]  # what Jinja's own `~` (str_join) does
    budget.size(sum(map(len, strings)))
    return "".join(strings)


class _Bounder(NodeTransformer):
    """Routes the two steps Jinja compiles to plain Python (a ``for`` loop, ``~``) through guarded filters."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        node = self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, _LOOP_FILTER, [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        node = self.generic_visit(node)
        return nodes.Filter(nodes.List(node.nodes, lineno=node.lineno), _CONCAT_FILTER, [], [], None, None,
                            lineno=node.lineno)


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    # A filter marked pass_context / pass_eval_context / pass_environment gets that object first.
    skip = 0 if getattr(func, "jinja_pass_arg", None) is None else 1

    @wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        value, rest = (args[skip], args[skip + 1:]) if len(args) > skip else (None, ())
        if name == "join" and len(args) > skip:
            value = _listed(value)
            args = (*args[:skip], value, *rest)
        _check_ints(budget, rest, kwargs)
        _estimate_filter(budget, name, value, rest, kwargs)
        return budget.sized(func(*args, **kwargs))

    return guarded


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template sandbox with every hook checking the current render's ``_Budget``."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, loopcontrols])
        self.filters["tojson"] = _tojson
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}
        self.filters[_LOOP_FILTER] = _bounded_loop
        self.filters[_CONCAT_FILTER] = _bounded_concat
        self.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_TemplateDict(),
                            namespace=_TemplateNamespace)

    def concat(self, parts: Iterable[str]) -> str:  # type: ignore[override]
        """Joins captured blocks and macro bodies: counted as they come, so a loop's buffer stays bounded."""
        budget, total, kept = _budget(), 0, []
        for part in parts:
            total += len(part)
            budget.size(total)
            kept.append(part)
        return "".join(kept)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format`` / ``format_map`` as the sandbox wraps them, refusing a huge field width first."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        @wraps(wrapped)
        def checked(*args: Any, **kwargs: Any) -> str:
            budget = _budget()
            _check_format(budget, fmt, args)
            _check_ints(budget, args, kwargs)
            return budget.sized(wrapped(*args, **kwargs))

        return checked

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        if getattr(obj, "__name__", "") == "join" and isinstance(getattr(obj, "__self__", None), str) and args:
            args = (_listed(args[0]), *args[1:])
        _check_ints(budget, args, kwargs)
        _estimate_method(budget, obj, args, kwargs)
        return budget.sized(super().call(context, obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    budget.size(len(seq) * max(n, 0))
            both_ints = isinstance(left, int) and isinstance(right, int)
            if both_ints and left.bit_length() + right.bit_length() > _MAX_INT_BITS:
                raise TemplateError("this model's chat template builds a huge number, so it was stopped")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            if right * left.bit_length() > _MAX_INT_BITS:
                raise TemplateError("this model's chat template builds a huge number, so it was stopped")
        elif operator == "%" and isinstance(left, str):
            _check_format(budget, left, right)
        elif operator == "+" and isinstance(left, (str, list, tuple)):
            budget.size(len(left) + _length(right))
        return budget.sized(super().call_binop(context, operator, left, right))

    def getattr(self, obj: Any, attribute: str) -> Any:
        _budget()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _budget()
        return super().getitem(obj, argument)


_ENVIRONMENT = _BoundedSandbox()


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    ast = _ENVIRONMENT.parse(source)
    ast = _Bounder().visit(ast)
    ast.set_environment(_ENVIRONMENT)
    return _ENVIRONMENT.from_string(ast)


# -- rendering -----------------------------------------------------------------------------------------

def deadline_after(limits: TemplateLimits = DEFAULT_LIMITS) -> float:
    """The ``time.monotonic()`` deadline for renders starting now (``build_prompt`` shares one)."""
    return time.monotonic() + limits.time_s


def _plain(value: Any) -> Any:
    # Special-token maps may hold AddedToken objects; the template gets plain strings (as transformers does).
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def render_text(tokenizer: Any, conversation: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True,
                cancel: threading.Event | None = None, deadline: float | None = None,
                limits: TemplateLimits = DEFAULT_LIMITS) -> str:
    """The conversation through ``tokenizer``'s chat template, as ``apply_chat_template(tokenize=False)``
    writes it, within ``limits`` (and ``deadline``, a ``time.monotonic()`` time, when given).

    Raises ``TemplateError`` (one line) for any failure or bound, ``CancelledError`` once ``cancel`` is set.
    """
    try:
        source = tokenizer.get_chat_template()
    except ValueError as exc:  # transformers: no template, or several and none named "default"
        raise TemplateError(f"this model's chat template cannot be used: {one_line(exc, max_chars=_MESSAGE_CHARS)}") from None
    if not isinstance(source, str):
        raise TemplateError("this model's chat template is not text")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"this model's chat template is {len(source):,} characters long (at most "
                            f"{MAX_TEMPLATE_CHARS:,}), so it was not used")
    input_chars = sum(len(str(m.get("content", ""))) for m in conversation)
    budget = _Budget(deadline if deadline is not None else deadline_after(limits),
                     limits.base_chars + 2 * input_chars, limits, cancel)
    variables = {key: _plain(value) for key, value in tokenizer.special_tokens_map.items()}
    variables.update(messages=[dict(m) for m in conversation], tools=None, documents=None,
                     add_generation_prompt=add_generation_prompt)
    token = _BUDGET.set(budget)
    try:
        budget.check()
        template = _compile(source)
        parts: list[str] = []
        total = 0
        for chunk in template.generate(**variables):
            total += len(chunk)
            budget.size(total)
            budget.check()
            parts.append(chunk)
        return "".join(parts)
    except (TemplateError, CancelledError):
        raise
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"this model's chat template has a syntax error on line {exc.lineno}: "
                            f"{one_line(exc.message, max_chars=_MESSAGE_CHARS)}") from None
    except _TemplateRaised as exc:
        raise TemplateError(f"this model's chat template refused the conversation: {one_line(exc, max_chars=_MESSAGE_CHARS)}") from None
    except jinja2.exceptions.SecurityError as exc:
        raise TemplateError(f"this model's chat template tried something the sandbox forbids: "
                            f"{one_line(exc, max_chars=_MESSAGE_CHARS)}") from None
    except RecursionError:
        raise TemplateError("this model's chat template calls itself too deeply, so it was stopped") from None
    except MemoryError:
        raise TemplateError("this model's chat template ran out of memory, so it was stopped") from None
    except Exception as exc:  # noqa: BLE001  (a template is a program: any error it hits is its own)
        raise TemplateError(f"this model's chat template failed: {type(exc).__name__}: "
                            f"{one_line(exc, max_chars=_MESSAGE_CHARS)}") from None
    finally:
        _BUDGET.reset(token)
