"""Reasoning models: a reply's thought (``<think>``…``</think>``) told apart from its answer, as it streams.

Reasoning models (Qwen3, the DeepSeek-R1 distills, QwQ) write their chain of thought between two markers before
the answer. Whether a model does is read from its chat template (``reasoning_format``): a template that names the
end marker. Some templates open the thought in the generation prompt themselves (the R1 distills end it with
``<think>\\n``), so the model's output starts inside the thought; others (Qwen3 with ``enable_thinking=false``)
close an empty one there, so the output is all answer. ``ReasoningSplitter`` is told which from the prompt's own
text (``opens_thought``) and then splits the streamed text: a thought is recognised only at the start of the
output (leading whitespace aside), so an answer that talks about the markers is left alone; a marker split
across tokens is held back until it is whole or ruled out. The markers are never shown.

Also owned here: what a template takes (``enable_thinking``, a message's ``reasoning_content``), the template
variables a request may set (``check_template_kwargs``), the raw text a partial reply is continued from
(``continuation_text``), and the split of the reply's timings (``reasoning_metrics``). No torch, no tokenizer
calls: the session feeds text in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

from engine.errors import BadInputError

Part = Literal["reasoning", "answer"]
THINK_START = "<think>"
THINK_END = "</think>"
# Variables the engine itself gives a template (engine.generate.chat_template.render_text): a request may not
# replace them, or it could rewrite the conversation behind the session's back.
_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
_MAX_KWARGS = 16


@dataclass(frozen=True)
class ReasoningFormat:
    """How a model's template marks a thought and what it takes."""

    start: str = THINK_START
    end: str = THINK_END
    takes_enable_thinking: bool = False  # the template reads an ``enable_thinking`` variable (Qwen3)
    passes_reasoning: bool = False  # the template reads a message's ``reasoning_content`` (Qwen3, QwQ)


def reasoning_format(template_source: str | None) -> ReasoningFormat | None:
    """The reasoning format a chat template uses, or None for a model that does not think aloud."""
    if not template_source or THINK_END not in template_source:
        return None
    return ReasoningFormat(takes_enable_thinking="enable_thinking" in template_source,
                           passes_reasoning="reasoning_content" in template_source)


def opens_thought(prompt_tail: str, fmt: ReasoningFormat | None) -> bool:
    """Whether a prompt ending in ``prompt_tail`` leaves a thought open (the template wrote its start marker)."""
    if fmt is None:
        return False
    start = prompt_tail.rfind(fmt.start)
    return start >= 0 and start > prompt_tail.rfind(fmt.end)


def check_template_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Extra chat-template variables of a request (vLLM's ``chat_template_kwargs``), checked: names that are
    identifiers and not the engine's own, plain JSON scalars as values. ``BadInputError`` (one line) otherwise."""
    if not kwargs:
        return {}
    if not isinstance(kwargs, Mapping) or len(kwargs) > _MAX_KWARGS:
        raise BadInputError(f"chat_template_kwargs must be an object of at most {_MAX_KWARGS} names")
    clean: dict[str, Any] = {}
    for name, value in kwargs.items():
        if not isinstance(name, str) or not name.isidentifier() or name in _RESERVED:
            raise BadInputError(f"chat_template_kwargs may not set {name!r}")
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise BadInputError(f"chat_template_kwargs.{name} must be true/false, a number or a text")
        clean[name] = value
    return clean


def continuation_text(reasoning: str, answer: str, fmt: ReasoningFormat | None, prompt_opened: bool) -> str:
    """The raw text of a partial reply as the model wrote it, markers included, for the prompt that continues it.

    A reply with a thought but no answer yet was cut inside the thought: it is continued there (no end marker)."""
    if fmt is None or not reasoning:
        return answer
    opened = "" if prompt_opened else fmt.start + "\n"
    if not answer:
        return opened + reasoning
    return f"{opened}{reasoning}\n{fmt.end}\n\n{answer}"


class ReasoningSplitter:
    """Streamed reply text in, ``(reasoning, answer)`` deltas out, markers removed.

    ``inside``: the prompt opened the thought (``opens_thought``); ``in_answer``: the output continues an answer
    (a reply resumed after its cut-off), so no thought can start; ``resumed``: the output continues a reply, so its
    first whitespace is the reply's own (not stripped). With no format everything is answer.
    """

    def __init__(self, fmt: ReasoningFormat | None, *, inside: bool = False, in_answer: bool = False,
                 resumed: bool = False) -> None:
        self._fmt = fmt
        self._state = "answer" if fmt is None or in_answer else ("thought" if inside else "lead")
        # Whitespace at the start of each part is the markers' layout, not text; a resumed reply keeps its own.
        self._fresh_thought = self._state != "answer" and not resumed
        self._fresh_answer = self._state != "answer" and not resumed
        self._held = ""
        self.reasoning = ""
        self.answer = ""
        self.part: Part = "reasoning" if self._state == "thought" else "answer"

    def push(self, text: str) -> tuple[str, str]:
        """Add the text one token gave; return the (reasoning, answer) text that may be shown now.

        ``part`` is then the part this token belongs to (the one closing a thought is reasoning)."""
        if self._fmt is None:
            self.answer += text
            return "", text
        thought, answer = [], []
        self._held += text
        closed = False
        while self._held:
            if self._state == "lead":
                stripped = self._held.lstrip()
                if stripped.startswith(self._fmt.start):
                    self._state, self._held = "thought", stripped[len(self._fmt.start):]
                    continue
                if self._fmt.start.startswith(stripped):
                    break  # whitespace, or a start marker not whole yet
                self._state, self._fresh_answer = "answer", False
            elif self._state == "thought":
                at = self._held.find(self._fmt.end)
                if at >= 0:
                    thought.append(self._held[:at])
                    self._state, self._held, closed = "answer", self._held[at + len(self._fmt.end):], True
                    self._fresh_answer = True
                    continue
                keep = _partial_suffix(self._held, self._fmt.end)
                thought.append(self._held[:len(self._held) - keep])
                self._held = self._held[len(self._held) - keep:]
                break
            else:
                answer.append(self._held)
                self._held = ""
        self.part = "reasoning" if closed or self._state == "thought" else "answer"
        return self._emit("".join(thought), "".join(answer))

    def flush(self) -> tuple[str, str]:
        """What is still held back at the end of the reply (an unfinished marker is text after all)."""
        held, self._held = self._held, ""
        if self._fmt is None or not held:
            return "", ""
        return self._emit(held, "") if self._state == "thought" else self._emit("", held.lstrip() if
                                                                                 self._state == "lead" else held)

    def _emit(self, thought: str, answer: str) -> tuple[str, str]:
        if self._fresh_thought and thought:
            thought = thought.lstrip()
            self._fresh_thought = not thought
        if self._fresh_answer and answer:
            answer = answer.lstrip()
            self._fresh_answer = not answer
        self.reasoning += thought
        self.answer += answer
        return thought, answer


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that begins ``marker`` (what may yet become the marker)."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def reasoning_metrics(parts: Sequence[Part], times: Sequence[float], t_submit: float) -> dict[str, Any]:
    """The split of the reply's timings (``engine.events.Metrics``' reasoning fields) from each token's part.

    ``ttft_thought_s``: submit to the first reasoning token; ``ttft_answer_s``: submit to the first answer token;
    ``thinking_tokens``: tokens in the thought (markers included); ``thinking_s``: first to last reasoning token."""
    thought = [t for part, t in zip(parts, times) if part == "reasoning"]
    first_answer = next((t for part, t in zip(parts, times) if part == "answer"), None)
    return dict(ttft_thought_s=thought[0] - t_submit if thought else None,
                ttft_answer_s=first_answer - t_submit if first_answer is not None else None,
                thinking_tokens=len(thought),
                thinking_s=thought[-1] - thought[0] if thought else None)


def split_reasoning(text: str, fmt: ReasoningFormat | None, *, inside: bool = False) -> tuple[str, str]:
    """A whole reply's ``(reasoning, answer)``: what streaming it through a ``ReasoningSplitter`` gives."""
    splitter = ReasoningSplitter(fmt, inside=inside)
    splitter.push(text)
    splitter.flush()
    return splitter.reasoning.rstrip(), splitter.answer
