"""Rendering a model's chat template within bounds of time, size, memory and a cancel event.

A chat template is a Jinja program that arrives with a downloaded model: untrusted code. transformers
runs it in Jinja's sandbox, which stops file and attribute escapes but nothing else: nested loops over
large ranges ran for minutes and grew to 9 GB, and the window's Stop could not end them. ``render_text``
renders the way transformers does (``engine.generate.template_sandbox``: the same sandbox class, options,
globals, ``tojson`` and ``{% generation %}`` tag, the same variables), so a real template gives the same
text, with every place a template can spend time or memory guarded (``engine.generate.template_budget``):

- each loop iteration, call, filter, operator, attribute or item lookup and output chunk checks the
  deadline, the cancel event and (every few milliseconds) how much the process has grown;
- every string or list that a call, filter, operator, ``~`` or captured block builds, and the output,
  is capped in size, and the operations that can multiply a size in one step are refused *before*
  they run when the result would pass the cap.

This module owns the entry points (``render_text``, ``deadline_after``) and turning every failure into
one ``TemplateError`` line (a syntax error, ``raise_exception``, recursion, an undefined value, a bound);
a set cancel event is ``CancelledError``. It owns rendering to text only: which messages to render, and
tokenising the text, are ``engine.generate.context``'s.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping, Sequence

import jinja2

from engine.errors import NO_CHAT_TEMPLATE, CancelledError, TemplateError
from engine.fmt import one_line
from engine.generate.template_budget import DEFAULT_LIMITS, Budget, TemplateLimits, bounded_by
from engine.generate.template_sandbox import TemplateRaised, compile_template

# The longest real templates (tool use, reasoning) are ~20 KB; compiling is not interruptible, so a
# template file past this is refused before it is parsed.
MAX_TEMPLATE_CHARS = 1_000_000
_MESSAGE_CHARS = 200  # a template's own words in an error, cut to fit one line


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
                limits: TemplateLimits = DEFAULT_LIMITS, extra: Mapping[str, Any] | None = None,
                tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The conversation through ``tokenizer``'s chat template, as ``apply_chat_template(tokenize=False)``
    writes it, within ``limits`` (and ``deadline``, a ``time.monotonic()`` time, when given).

    Raises ``TemplateError`` (one line) for any failure or bound, ``CancelledError`` once ``cancel`` is set.
    ``extra``: a request's own template variables (``enable_thinking``); the conversation's are set after them.
    ``tools``: the template's ``tools`` (JSON schemas of functions, as ``apply_chat_template(tools=...)`` gets them).
    """
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(NO_CHAT_TEMPLATE)
    try:
        source = tokenizer.get_chat_template()
    except ValueError as exc:  # transformers: no template, or several and none named "default"
        raise TemplateError(f"this model's chat template cannot be used: {one_line(exc, max_chars=_MESSAGE_CHARS)}") from None
    if not isinstance(source, str):
        raise TemplateError("this model's chat template is not text")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"this model's chat template is {len(source):,} characters long (at most "
                            f"{MAX_TEMPLATE_CHARS:,}), so it was not used")
    input_chars = sum(len(str(m.get("content", ""))) + len(str(m.get("tool_calls", ""))) for m in conversation)
    input_chars += len(str(tools or ""))
    budget = Budget(deadline if deadline is not None else deadline_after(limits),
                    limits.base_chars + 2 * input_chars, limits, cancel)
    variables = {key: _plain(value) for key, value in tokenizer.special_tokens_map.items()}
    variables.update(extra or {})
    variables.update(messages=[dict(m) for m in conversation], tools=[dict(t) for t in tools] if tools else None,
                     documents=None,
                     add_generation_prompt=add_generation_prompt)
    with bounded_by(budget):
        try:
            budget.check()
            template = compile_template(source)
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
        except TemplateRaised as exc:
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


__all__ = ["DEFAULT_LIMITS", "MAX_TEMPLATE_CHARS", "NO_CHAT_TEMPLATE", "TemplateLimits", "deadline_after",
           "render_text"]
