"""What a generation tells its consumer: frozen event dataclasses and the ``Metrics`` snapshot.

``ChatSession.generate`` yields, in order: ``Started``, ``PrefillProgress``*, then ``Token`` events with an
occasional ``Stats``, and always exactly one ``Finished`` last (a turn with images, ``engine.vision.turn``, yields
``ImagesEncoded`` after ``Started``). Everything here is plain data (no torch,
no Qt) so the GUI, the lab, the benchmark and the CLI can read it; the session computes the values.
Metric definitions are in docs/DESIGN.md, "Metrics" (the vLLM ``bench serve`` / GenAI-Perf ones).
This module owns the shapes and ``Metrics`` arithmetic only; it computes nothing from tensors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FinishReason = Literal["eos", "length", "cancelled", "error"]
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ToolCall:
    """An assistant's call of a tool, kept structured for a chat template with tool support (``engine.tools``)."""

    id: str
    name: str
    arguments: str  # JSON text (the template gets it parsed, as transformers' templates expect)


@dataclass(frozen=True)
class Message:
    """One turn of a conversation; ``role`` is ``system``, ``user`` or ``assistant`` (or ``tool``, a tool's result,
    only for templates with native tool support: ``engine.tools.calls.native_tools``)."""

    role: str
    content: str
    reasoning: str = ""  # an assistant turn's thought (engine.generate.reasoning), given to templates that take it
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant turn's calls (native tool mode)
    tool_call_id: str = ""  # a ``tool`` turn's call


@dataclass(frozen=True)
class TopCandidate:
    """A candidate for the next token and its probability in the final (sampled-from) distribution."""

    token_id: int
    text: str  # the token on its own, special tokens shown (may be a partial UTF-8 character)
    prob: float


@dataclass(frozen=True)
class ReuseBreak:
    """Where the prompt stopped matching the KV cache (``engine.generate.reuse_break``): from ``position`` on, the
    cache held other tokens, so they were computed again. Text is decoded tokens, special tokens shown."""

    position: int  # the first prompt token the cache did not hold (= the reply's reused_tokens)
    cached_tokens: int  # tokens the cache held before this reply
    recomputed_tokens: int  # prompt tokens from ``position`` to the end
    message_index: int | None  # the message (index in the conversation) the break falls in; None: template markup
    role: str  # that message's role ("" when None)
    before: str  # a few tokens before the break (the same in both)
    now: str  # a few tokens from the break on, as the prompt has them
    was: str  # what the cache held there
    changed_value: str = ""  # the digits (a date, a time) at the break in the prompt; "" when none
    was_value: str = ""  # the same place in what the cache held


@dataclass(frozen=True)
class Started:
    """The prompt is rendered and trimmed; prefill is about to run."""

    prompt_tokens: int  # whole rendered prompt
    reused_tokens: int  # of those, already in the KV cache from earlier turns (not recomputed)
    dropped_turns: int  # oldest messages left out to fit the context window
    context_max: int
    t: float  # time.perf_counter() at submit
    reuse_break: ReuseBreak | None = None  # where the prompt parted from a cache that held other tokens there


@dataclass(frozen=True)
class ImagesEncoded:
    """A turn's images are tokens (``engine.vision.turn``; after ``Started``, before ``PrefillProgress``): the tokens
    each image became, in the order given, and the vision tower's time (0.0 when the cache held them all)."""

    image_tokens: tuple[int, ...]
    encoder_s: float
    reused_images: int = 0  # of those, already in the KV cache from an earlier turn (not encoded or prefilled again)


@dataclass(frozen=True)
class PrefillProgress:
    """One prefill chunk is done: ``done`` of ``total`` new prompt tokens are in the cache."""

    done: int
    total: int


@dataclass(frozen=True)
class Token:
    """One generated token, emitted when its id exists (device-synchronised)."""

    index: int  # 0-based position in the reply
    token_id: int
    text: str  # text this token adds; "" while a multi-byte character is incomplete, and for end tokens
    t: float  # time.perf_counter() when the id was available
    prob: float | None  # its probability in the final distribution; None when top_logprobs == 0
    top: tuple[TopCandidate, ...] = ()  # best candidates, most likely first; empty when top_logprobs == 0
    part: str = "answer"  # "reasoning" for a token of a reasoning model's thought (engine.generate.reasoning)
    reasoning: str = ""  # thought text this token adds (``text`` is then ""); markers are never shown
    drafted: bool = False  # a speculative draft the model accepted (engine/speculate): no forward of its own


@dataclass(frozen=True)
class Metrics:
    """Measurements of one reply (live in ``Stats``, final in ``Finished``). Times in seconds.

    A value that is not defined yet (no token, a single token) is ``None``, never a made-up number. A figure the
    engine that answered cannot know at all (a remote server's KV bytes, weights, prefill time: see
    ``engine.remote.session``) is named in ``unknown``: its 0 then means "not known", ``known()`` and
    ``to_dict()`` give it as ``None``. A local reply knows every figure (``unknown`` is empty).
    """

    prompt_tokens: int = 0
    prefill_tokens: int = 0  # prompt tokens actually computed (reused cache excluded)
    reused_tokens: int = 0
    generated_tokens: int = 0  # end token included, as vLLM counts it
    ttft_s: float | None = None  # submit -> first token (tokenisation, template and prefill included)
    prefill_s: float | None = None  # first prefill chunk start -> last prompt position's logits
    prefill_tok_s: float | None = None  # prefill_tokens / prefill_s
    decode_tok_s: float | None = None  # (n - 1) / (t_last - t_first)
    itl_s: tuple[float, ...] = ()  # every gap between consecutive tokens
    tpot_s: float | None = None  # (e2e - ttft) / (n - 1)
    e2e_s: float | None = None  # submit -> last token
    ttft_thought_s: float | None = None  # submit -> first token of the thought (None: no thought)
    ttft_answer_s: float | None = None  # submit -> first token of the answer (after the thought, if any)
    thinking_tokens: int = 0  # tokens of the thought, its markers included
    thinking_s: float | None = None  # first -> last token of the thought
    kv_cache_bytes: int = 0  # measured: nbytes of the filled part of every key/value tensor
    kv_cache_bytes_allocated: int = 0  # measured: bytes of the storage behind those tensors
    kv_cache_bytes_formula: int = 0  # 2 × layers × kv_heads × head_dim × cached tokens × bytes
    kv_cache_bytes_formula_no_gqa: int = 0  # the seeds' 2 × layers × tokens × d_model × bytes
    weights_bytes: int = 0
    peak_memory_bytes: int = 0  # CUDA allocator peak on GPU; peak sampled process RSS on CPU
    context_tokens: int = 0  # positions of the context used: prompt + generated
    context_max: int = 0
    dropped_turns: int = 0
    reuse_break: ReuseBreak | None = None  # where the prompt parted from the KV cache (as in ``Started``), if it did
    device: str = ""
    precision: str = ""
    # Speculative decoding (engine/speculate): who drafted ("prompt-lookup", "draft:NAME", "self"; "" when off),
    # steps with a draft, tokens drafted and accepted, forwards of the model while decoding, accepted / drafted,
    # and tokens after the first per such forward (1.0 without speculation's help).
    speculation: str = ""
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    target_steps: int = 0
    acceptance_rate: float | None = None
    tokens_per_step: float | None = None
    # Constrained decoding (engine/constrain: a JSON schema, a grammar): tokens chosen under a mask, the decode loop's
    # time waiting for and applying their masks (the cost on its critical path) and llguidance's time building them
    # (overlapped with the forwards), both summed over the reply; None when nothing was constrained.
    masked_tokens: int = 0
    mask_wait_s: float | None = None
    mask_build_s: float | None = None
    # Images (engine/vision/turn.py): the tokens each image of this turn became, in order, and the time the vision
    # tower and projector took to encode them (None: no image encoded, or every image's tokens were in the cache).
    image_tokens: tuple[int, ...] = ()
    vision_encoder_s: float | None = None
    unknown: tuple[str, ...] = ()  # names of the fields above that are not known (their value is a placeholder)

    def known(self, name: str) -> Any:
        """The field ``name``, or None when it is one of the ``unknown``."""
        return None if name in self.unknown else getattr(self, name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with exactly the field names but ``unknown`` (``itl_s`` as a list; unknown ones None)."""
        data = asdict(self)
        data["itl_s"] = list(self.itl_s)
        data["image_tokens"] = list(self.image_tokens)
        for name in data.pop("unknown"):
            if name in data:
                data[name] = None
        return data


@dataclass(frozen=True)
class Stats:
    """A live snapshot, emitted every few tokens (cheap: no extra device work)."""

    metrics: Metrics


@dataclass(frozen=True)
class Finished:
    """Always the last event, exactly once. ``text`` is the whole reply (authoritative over the deltas): the answer,
    with a reasoning model's thought in ``reasoning``."""

    reason: FinishReason
    text: str
    metrics: Metrics = field(default_factory=Metrics)
    error: str | None = None  # one line, only when reason == "error"
    reasoning: str = ""  # a reasoning model's thought, markers removed (``text`` is then the answer alone)


Event = Started | ImagesEncoded | PrefillProgress | Token | Stats | Finished
