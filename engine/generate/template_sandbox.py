"""The Jinja environment a chat template runs in: transformers' sandbox with every hook bounded.

Owns the environment (``ImmutableSandboxedEnvironment`` with the options, globals, ``tojson`` filter and
``{% generation %}`` tag transformers gives a chat template, so a real template writes the same text) and
``compile_template``, which rewrites a template's ``for`` loops and ``~`` concatenations to go through
guarded filters before compiling it. Each loop iteration, call, filter, operator, attribute or item lookup
and captured block asks the current ``engine.generate.template_budget.Budget`` first, and the result of
every call, filter and operator is capped in size.

Does not own the bounds themselves or the size estimates (``engine.generate.template_budget``), nor the
render entry point that turns every failure into one ``TemplateError`` line (``engine.generate.chat_template``).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache, wraps
from typing import Any, Callable, Iterable, Iterator, Sequence

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

from engine.errors import TemplateError
from engine.generate.template_budget import (MAX_INT_BITS, check_format, check_ints, current, estimate_filter,
                                             estimate_method, listed, size_of)


class TemplateRaised(jinja2.TemplateError):
    """What ``raise_exception`` raises: the template's own refusal of the conversation."""


def _raise_exception(message: Any) -> None:
    raise TemplateRaised(message)


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
        current()
        yield item


def _bounded_concat(parts: Sequence[Any]) -> str:
    budget = current()
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
        budget = current()
        value, rest = (args[skip], args[skip + 1:]) if len(args) > skip else (None, ())
        if name == "join" and len(args) > skip:
            value = listed(value)
            args = (*args[:skip], value, *rest)
        check_ints(budget, rest, kwargs)
        estimate_filter(budget, name, value, rest, kwargs)
        return budget.sized(func(*args, **kwargs))

    return guarded


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template sandbox with every hook checking the current render's ``Budget``."""

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
        budget, total, kept = current(), 0, []
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
            budget = current()
            check_format(budget, fmt, args)
            check_ints(budget, args, kwargs)
            return budget.sized(wrapped(*args, **kwargs))

        return checked

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = current()
        if getattr(obj, "__name__", "") == "join" and isinstance(getattr(obj, "__self__", None), str) and args:
            args = (listed(args[0]), *args[1:])
        check_ints(budget, args, kwargs)
        estimate_method(budget, obj, args, kwargs)
        return budget.sized(super().call(context, obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = current()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    budget.size(len(seq) * max(n, 0))
            both_ints = isinstance(left, int) and isinstance(right, int)
            if both_ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise TemplateError("this model's chat template builds a huge number, so it was stopped")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            if right * left.bit_length() > MAX_INT_BITS:
                raise TemplateError("this model's chat template builds a huge number, so it was stopped")
        elif operator == "%" and isinstance(left, str):
            check_format(budget, left, right)
        elif operator == "+" and isinstance(left, (str, list, tuple)):
            budget.size(len(left) + size_of(right))
        return budget.sized(super().call_binop(context, operator, left, right))

    def getattr(self, obj: Any, attribute: str) -> Any:
        current()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        current()
        return super().getitem(obj, argument)


_ENVIRONMENT = _BoundedSandbox()


@lru_cache(maxsize=8)
def compile_template(source: str) -> jinja2.Template:
    """``source`` compiled in the bounded sandbox, its loops and ``~`` routed through guarded filters (cached)."""
    ast = _ENVIRONMENT.parse(source)
    ast = _Bounder().visit(ast)
    ast.set_environment(_ENVIRONMENT)
    return _ENVIRONMENT.from_string(ast)
