"""Text in and out of token ids: the prompt from a conversation, and the reply's text as it streams.

In: the conversation is checked, sanitised and rendered with the tokenizer's own chat template (as
``apply_chat_template`` with the generation prompt would, but bounded in time and size and cancellable:
``engine.generate.chat_template``). When prompt + reply budget exceed the model's context, the oldest messages
are dropped (never the system prompt, never the newest user message) and counted; a message that
cannot fit even alone is refused with ``ContextTooLongError``. Which old messages go is judged first from
each message's own token count (``content_tokens``, remembered per tokenizer), so only the kept end of a long
history is ever rendered. A plain text to continue (text completion, ``build_text_prompt``) skips the template:
it is tokenised as the tokenizer encodes it, and never cut.

Sanitising (documented choice): NUL characters are removed (they are invisible, and C-string code
paths below Python may truncate at them); lone UTF-16 surrogates, which Python strings can hold but
UTF-8 cannot encode, become U+FFFD, while a valid surrogate pair is joined into its character.

Out: ``IncrementalDecoder`` turns token ids into text deltas without ever emitting half a character:
a token that ends inside a multi-byte UTF-8 sequence (Chinese, emoji) is held back until the
character is complete. This module owns no model, no cache and no sampling.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from engine.generate.chat_template import NO_CHAT_TEMPLATE, deadline_after, render_text
from engine.errors import BadInputError, ContextTooLongError
from engine.events import ROLES, Message

REPLACEMENT = "\ufffd"
# The template ``render`` hands apply_chat_template: the text engine.generate.chat_template rendered, unchanged.
_RENDERED = "miaohui_rendered_chat"
_VERBATIM = "{{ %s }}" % _RENDERED
# A byte-level token run that still does not decode after this many tokens is not a character being
# built up but genuinely invalid bytes: let it out (with U+FFFD) rather than stall the stream.
_MAX_HELD_TOKENS = 8


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences (the session's cache reuse, the drafters' too)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def sanitise_text(text: str) -> str:
    """Remove NUL, join surrogate pairs, replace lone surrogates with U+FFFD."""
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 round trip with surrogatepass joins valid pairs; 'replace' turns lone halves into U+FFFD.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def check_messages(messages: Sequence[Message], ends_with_reply: bool = False) -> list[Message]:
    """Validate and sanitise a conversation; raise ``BadInputError`` with one line when it is unusable.
    ``ends_with_reply``: the last message may be the assistant's (a conversation counted, not answered)."""
    if not messages:
        raise BadInputError("the conversation is empty: write a message first")
    clean: list[Message] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise BadInputError(f"message {i + 1} is not a Message (got {type(message).__name__})")
        if message.role not in ROLES and message.role != "tool":
            raise BadInputError(f"message {i + 1} has role {message.role!r}; expected one of {', '.join(ROLES)}")
        if message.role == "system" and i != 0:
            raise BadInputError("only the first message may be the system prompt")
        if not isinstance(message.content, str):
            raise BadInputError(f"message {i + 1} has no text")
        reasoning = sanitise_text(message.reasoning) if isinstance(message.reasoning, str) else ""
        clean.append(dataclasses.replace(message, content=sanitise_text(message.content), reasoning=reasoning))
    if clean[-1].role == "assistant" and ends_with_reply:
        return clean  # a reply may be empty text beside its tool calls
    if clean[-1].role not in ("user", "tool"):  # a tool's result: the model answers it (native tool mode)
        raise BadInputError("the last message must be the user's")
    if not clean[-1].content.strip():
        raise BadInputError("your message is empty")
    return clean


def render(tokenizer: Any, messages: Sequence[Message], cancel: threading.Event | None = None,
           deadline: float | None = None, template_kwargs: Mapping[str, Any] | None = None,
           tools: Sequence[Mapping[str, Any]] | None = None, generation_prompt: bool = True) -> list[int]:
    """Token ids of ``messages`` through the tokenizer's chat template, ending with the assistant prompt (without it
    when ``generation_prompt`` is False: the last turn closed, as a conversation that ends with a reply is held).

    The ids ``apply_chat_template(tokenize=True)`` gives, with the template run within bounds
    (engine.generate.chat_template): ``TemplateError`` for a failing or runaway template, ``CancelledError``.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise BadInputError(NO_CHAT_TEMPLATE)
    # A turn's thought goes back only to a template that reads it (it then decides, most strip all but the last).
    takes_reasoning = "reasoning_content" in str(tokenizer.chat_template)
    conversation = [{"role": m.role, "content": m.content,
                     **({"reasoning_content": m.reasoning} if m.reasoning and takes_reasoning else {}),
                     **_tool_fields(m)} for m in messages]
    text = render_text(tokenizer, conversation, add_generation_prompt=generation_prompt, cancel=cancel,
                       deadline=deadline, extra=template_kwargs, tools=tools)
    # apply_chat_template still tokenises, given a template that writes the bounded rendering verbatim:
    # the ids stay the library's, whatever it does between rendering and tokenising.
    ids = tokenizer.apply_chat_template(conversation, chat_template=_VERBATIM,
                                        add_generation_prompt=generation_prompt, tokenize=True, return_dict=False,
                                        **{_RENDERED: text})
    return [int(i) for i in ids]


def _tool_fields(message: Message) -> dict[str, Any]:
    # Structured as transformers' templates expect: a call's arguments a dict, a result its call's id.
    if message.tool_calls:
        return {"tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _json(
            c.arguments)}} for c in message.tool_calls]}
    return {"tool_call_id": message.tool_call_id} if message.role == "tool" else {}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


_LONGEST_TOKEN_BYTES: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def longest_token_bytes(tokenizer: Any) -> int:
    """An upper bound on the UTF-8 bytes of text one token can cover: the longest vocabulary entry's
    string, measured in UTF-8 (byte-level BPE spells a byte with a 1-2 byte character, so this can only
    overstate). Computed once per tokenizer; 0 when the vocabulary cannot be read (then no bound)."""
    try:
        return _LONGEST_TOKEN_BYTES[tokenizer]
    except (KeyError, TypeError):
        pass
    try:
        longest = max((len(str(token).encode("utf-8")) for token in tokenizer.get_vocab()), default=0)
    except Exception:  # noqa: BLE001  (an unusual tokenizer only loses the shortcut)
        longest = 0
    try:
        _LONGEST_TOKEN_BYTES[tokenizer] = longest
    except TypeError:
        pass  # not weak-referenceable: recomputed next time
    return longest


# Each message's own token count is kept (per tokenizer, this many most recent texts), so a conversation
# growing by one turn, or the composer's forecast measured at each pause in typing, tokenises only what is new.
_COUNTS_KEPT = 8192
_TOKEN_COUNTS: "weakref.WeakKeyDictionary[Any, OrderedDict[tuple[int, int], int]]" = weakref.WeakKeyDictionary()
# A message's text tokenised alone and inside the template can differ where it meets the markup (a
# pre-tokenisation boundary at each end); the judgement "surely too long" allows that much per message.
_SLACK_PER_MESSAGE = 2
_COUNT_BATCH = 32  # texts per tokenizer call when counting: one Rust call instead of one per message


def content_tokens(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    """Tokens of each text alone (no special tokens, no template), remembered per tokenizer."""
    try:
        cache = _TOKEN_COUNTS.setdefault(tokenizer, OrderedDict())
    except TypeError:  # not weak-referenceable: counted, not remembered
        cache = OrderedDict()
    # hash() is salted per process, so no one can choose texts that collide; a collision would only misjudge
    # which old turns are worth rendering, never the prompt (the kept suffix is always rendered exactly).
    keys = [(hash(text), len(text)) for text in texts]
    missing = [i for i, key in enumerate(keys) if key not in cache]
    if missing:
        encoded = tokenizer([texts[i] for i in missing], add_special_tokens=False)["input_ids"]
        for i, ids in zip(missing, encoded):
            cache[keys[i]] = len(ids)
    counts = []
    for key in keys:
        cache.move_to_end(key)
        counts.append(cache[key])
    while len(cache) > _COUNTS_KEPT:
        cache.popitem(last=False)
    return counts


def _fewest_tokens(tokenizer: Any, text: str) -> int:
    """A lower bound on the tokens ``text`` takes, from its UTF-8 length alone (0: no bound)."""
    longest = longest_token_bytes(tokenizer)
    return -(-len(text.encode("utf-8")) // longest) if longest > 0 else 0


def _refuse_if_surely_too_long(tokenizer: Any, message: Message, context_max: int) -> None:
    """Refuse a message that cannot fit however it tokenises, before tokenising it: a 1 MB paste took the
    tiny test model's tokenizer 2-7 s per pass on the worker thread, twice, only to be refused."""
    at_least = _fewest_tokens(tokenizer, message.content)
    if at_least > context_max:
        raise ContextTooLongError(
            f"your message is at least {at_least:,} tokens but this model's context holds {context_max}: shorten it")


def _first_possible_start(tokenizer: Any, system: Sequence[Message], rest: Sequence[Message], limit: int) -> int:
    """The earliest index of ``rest`` a kept history can start at and still fit ``limit`` tokens, judged from the
    messages' own token counts, newest first: the messages before it are never tokenised (nor rendered).

    A message whose length alone puts the sum past the limit is not tokenised either (a pasted document far
    back). Only a lower bound is judged here; which suffix fits is decided by rendering it."""
    floor = sum(content_tokens(tokenizer, [m.content for m in system])) - _SLACK_PER_MESSAGE * len(system)
    end = len(rest)
    while end > 0:
        batch, bound = [], floor
        while end - len(batch) > 0 and len(batch) < _COUNT_BATCH:
            fewest = _fewest_tokens(tokenizer, rest[end - len(batch) - 1].content) - _SLACK_PER_MESSAGE
            if bound + fewest > limit:
                break
            bound += fewest
            batch.append(end - len(batch) - 1)
        if not batch:
            return end  # the message before `end` cannot fit together with what comes after it
        for index, count in zip(batch, content_tokens(tokenizer, [rest[i].content for i in batch])):
            floor += count - _SLACK_PER_MESSAGE
            if floor > limit:
                return index + 1
        end = batch[-1]
    return 0


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt that fits the context, with the reply budget left for it."""

    ids: tuple[int, ...]
    dropped_turns: int  # messages left out, oldest first
    max_new_tokens: int  # the request's budget, lowered if the context has less room


def build_prompt(tokenizer: Any, messages: Sequence[Message], context_max: int, max_new_tokens: int,
                 cancel: threading.Event | None = None, template_kwargs: Mapping[str, Any] | None = None,
                 partial: str = "", tools: Sequence[Mapping[str, Any]] | None = None) -> Prompt:
    """Check, sanitise, render and trim ``messages`` to fit ``context_max`` with ``max_new_tokens`` of reply.

    Trimming drops whole leading messages after the system prompt and always restarts the kept
    history at a user message (chat templates expect user/assistant alternation). When even the
    system prompt plus the newest message leave less than ``max_new_tokens`` of room, the reply
    budget shrinks to the room there is; with no room at all, ``ContextTooLongError``.

    Each message's own token count (``content_tokens``) rules out the starts that surely cannot fit, so a
    history of thousands of turns, or fifty times the context, is neither rendered nor tokenised whole (that
    ran out the template's time budget before any trimming); only suffixes near the kept one are rendered,
    and the kept one is rendered exactly. Every rendering shares one template deadline and stops once
    ``cancel`` is set.

    ``template_kwargs``: extra template variables (``enable_thinking``); ``tools``: the template's ``tools``
    (native tool mode, ``engine.tools.calls``). ``partial``: the raw text of the reply
    being continued (cut off at its length limit): its tokens follow the generation prompt, no new turn.
    """
    clean = check_messages(messages)
    tail = [int(i) for i in tokenizer.encode(sanitise_text(partial), add_special_tokens=False)] if partial else []
    _refuse_if_surely_too_long(tokenizer, clean[-1], context_max)
    system = clean[:1] if clean[0].role == "system" else []
    rest = clean[len(system):]
    deadline = deadline_after()
    limit = context_max - max_new_tokens
    rendered: dict[int, list[int]] = {}

    def from_cut(cut: int) -> list[int]:
        if cut not in rendered:
            rendered[cut] = render(tokenizer, system + rest[cut:], cancel, deadline, template_kwargs, tools) + tail
        return rendered[cut]

    # Cut points: indices into `rest` where a kept history may start: 0 (all of it), then each user message
    # after the first. The last is the newest user message alone.
    cuts = [0] + [i for i, m in enumerate(rest) if m.role == "user" and i > 0]
    start = _first_possible_start(tokenizer, system, rest, limit)
    possible = [cut for cut in cuts if cut >= start]
    # The longest possible suffix first: a conversation that fits is rendered once. Fewer tokens with every
    # later cut, so binary search the rest for the earliest cut that fits.
    if possible and len(from_cut(possible[0])) <= limit:
        return Prompt(tuple(rendered[possible[0]]), possible[0], max_new_tokens)
    lo, hi, best = 1, len(possible) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if len(from_cut(possible[mid])) <= limit:
            best, hi = possible[mid], mid - 1
        else:
            lo = mid + 1
    if best is not None:
        return Prompt(tuple(rendered[best]), best, max_new_tokens)

    # Even system + newest user message leave less room than asked: shorten the reply budget instead.
    dropped = cuts[-1]
    shortest = from_cut(dropped)
    room = context_max - len(shortest)
    if room >= 1:
        return Prompt(tuple(shortest), dropped, room)
    alone = len(render(tokenizer, rest[-1:], cancel, deadline, template_kwargs, tools)) + len(tail)
    if system and alone < context_max:
        raise ContextTooLongError(
            f"the system prompt and your message need {len(shortest)} tokens but this model's context holds "
            f"{context_max}: shorten one of them")
    raise ContextTooLongError(
        f"your message is {alone} tokens but this model's context holds {context_max}: shorten it")


def held_ids(tokenizer: Any, messages: Sequence[Message], cancel: threading.Event | None = None,
             template_kwargs: Mapping[str, Any] | None = None) -> tuple[int, ...]:
    """The ids of ``messages`` through the chat template with no generation prompt after the last (the template's
    own, ``apply_chat_template(add_generation_prompt=False)``): what a conversation that ends with a reply holds,
    which ``build_prompt`` refuses (a prompt ends where a reply starts). Count only, for the context bar: nothing
    trimmed, rendered whole within the template's budget (``TemplateError`` past it)."""
    clean = check_messages(messages, ends_with_reply=True)
    return tuple(render(tokenizer, clean, cancel, deadline_after(), template_kwargs, generation_prompt=False))


def check_text(text: str) -> str:
    """Validate and sanitise a text to continue; ``BadInputError`` (one line) when it is unusable."""
    if not isinstance(text, str):
        raise BadInputError(f"the text to continue is not text (got {type(text).__name__})")
    clean = sanitise_text(text)
    if not clean:
        raise BadInputError("the text to continue is empty: give a prompt")
    return clean


def build_text_prompt(tokenizer: Any, text: str, context_max: int, max_new_tokens: int) -> Prompt:
    """The ids of a plain text to continue (text completion: no chat template), fitted to ``context_max``.

    ``tokenizer.encode(text)``, the tokenizer adding its special tokens as it does: a BOS where the model
    expects one. The text is sanitised like a message. Trimming (documented choice): the text is never
    cut, since dropping its beginning would silently change what is continued; when prompt +
    ``max_new_tokens`` exceed the context the reply budget shrinks to the room there is (as a chat's
    does), and a prompt that leaves no room for one token is refused with ``ContextTooLongError``.
    An empty text is ``BadInputError``.
    """
    clean = check_text(text)
    too_long = f"but this model's context holds {context_max:,}, the continuation included: shorten it"
    at_least = _fewest_tokens(tokenizer, clean)  # a pasted book is refused before it is tokenised
    if at_least >= context_max:
        raise ContextTooLongError(f"the prompt is at least {at_least:,} tokens {too_long}")
    ids = tuple(int(i) for i in tokenizer.encode(clean))
    if not ids:
        raise BadInputError("the text to continue gives no tokens with this model's tokenizer")
    if len(ids) >= context_max:
        raise ContextTooLongError(f"the prompt is {len(ids):,} tokens {too_long}")
    return Prompt(ids, 0, min(max_new_tokens, context_max - len(ids)))


class IncrementalDecoder:
    """Token ids in, text deltas out; holds back bytes until they form whole characters.

    Decodes a small sliding window (the tokens since the last emitted text plus the ones before
    them) rather than the whole reply each step, the way vLLM's incremental detokenizer does, so the
    cost per token stays constant. Special tokens (the end token) add no text.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix = 0  # window start: already emitted tokens kept for context
        self._read = 0  # tokens up to here have been emitted as text
        self._parts: list[str] = []
        self._token_text: dict[int, str] = {}

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes ("" while a character is incomplete)."""
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix:self._read])
        new_text = self._decode(self._ids[self._prefix:])
        held = len(self._ids) - self._read
        if len(new_text) > len(prefix_text) and (not new_text.endswith(REPLACEMENT) or held >= _MAX_HELD_TOKENS):
            delta = new_text[len(prefix_text):]
            self._prefix, self._read = self._read, len(self._ids)
            self._parts.append(delta)
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is still held back, less a character the reply was cut in the middle of.

        Held tokens end in an incomplete UTF-8 sequence (that is why they were held): when the reply stops
        there (the token limit, Stop, a stop string), those bytes are half of a character, not text, and
        decoding them would end the reply in U+FFFD. Whole characters before them are kept."""
        if self._read == len(self._ids):
            return ""
        prefix_text = self._decode(self._ids[self._prefix:self._read])
        delta = self._decode(self._ids[self._prefix:])[len(prefix_text):].rstrip(REPLACEMENT)
        self._prefix = self._read = len(self._ids)
        self._parts.append(delta)
        return delta

    @property
    def text(self) -> str:
        """Text emitted so far (deltas joined)."""
        return "".join(self._parts)

    def token_text(self, token_id: int) -> str:
        """One token on its own, special tokens shown, for the inspector (cached: the same ids recur)."""
        text = self._token_text.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            self._token_text[token_id] = text
        return text
