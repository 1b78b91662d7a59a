"""What the benchmark runs: its sizes (``Plan``), its prompts and its scenarios.

Owns the plan of a run (``--quick`` shrinks every size), the messages of every scenario sized to the plan
and to the model's context (a short prompt, a ~500-token prompt, a ~1,500-token conversation and its
follow-up turn), and the scenarios themselves (``decode``, ``long``, ``followup``, ``no_kv``): what each
runs on a variant and which figures it returns. Does not time anything (``engine.bench.core``), does not
know how a variant generates (``engine.bench.variants``), does not load models or report
(``engine.bench.run``, ``engine.bench.report``). Torch-free, so the command line can name the scenarios
in its help without loading torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from engine.errors import BadInputError
from engine.events import Message
from engine.generate.context import render  # the engine's bounded rendering: a model's template is its code

SCENARIOS = ("decode", "long", "followup", "no_kv")
_SYSTEM = "You are a helpful assistant."
_SHORT = "Write a long story about a cat who learns to fly. Describe every day of its training."
_FILLER = ("The history of the printing press begins with movable type in East Asia and continues with "
           "Gutenberg's workshop in Mainz, where metal type, oil-based ink and a screw press made books "
           "cheap enough for merchants, students and churches across Europe. ")


@dataclass(frozen=True)
class Plan:
    """Sizes of one benchmark run (``--quick`` shrinks all of them)."""

    tokens: int  # new tokens per decode measurement
    reps: int
    long_prompt: int  # target tokens of the long prompt
    conversation: int  # target tokens of the follow-up turn's history
    no_kv_tokens: int  # new tokens with the cache off (quadratic: kept short)
    long_decode_tokens: int  # new tokens after the long prompt: decode speed with a filled cache
    bandwidth_bytes: int | None  # buffer for the bandwidth measurement; None: membw's default


def make_plan(quick: bool, tokens: int | None = None, reps: int | None = None) -> Plan:
    """The sizes of a full run, or of a ``quick`` one; ``tokens`` / ``reps`` override theirs when given."""
    if quick:
        plan = Plan(tokens=16, reps=1, long_prompt=120, conversation=200, no_kv_tokens=6, long_decode_tokens=8,
                    bandwidth_bytes=64 * 1024 * 1024)
    else:
        plan = Plan(tokens=128, reps=3, long_prompt=500, conversation=1500, no_kv_tokens=24, long_decode_tokens=64,
                    bandwidth_bytes=None)
    if tokens is not None:
        plan = dataclasses.replace(plan, tokens=max(2, tokens))
    if reps is not None:
        plan = dataclasses.replace(plan, reps=max(1, reps))
    return plan


def chosen_scenarios(wanted: str | None) -> list[str]:
    """The scenario names asked for (comma-separated), in running order; ``decode`` always (the base).
    Raises ``BadInputError`` naming the first unknown one."""
    chosen = {name.strip() for name in (wanted or "decode").split(",") if name.strip()} | {"decode"}
    unknown = chosen - set(SCENARIOS)
    if unknown:
        raise BadInputError(f"unknown scenario {sorted(unknown)[0]}: choose from {', '.join(SCENARIOS)}")
    return [name for name in SCENARIOS if name in chosen]


# ---------------------------------------------------------------------------------------- prompts


def _fit(tokenizer: Any, target: int) -> str:
    """Filler text of about ``target`` tokens."""
    per = max(1, len(tokenizer.encode(_FILLER, add_special_tokens=False)))
    return (_FILLER * (target // per + 1))[: max(1, len(_FILLER) * target // per)]


def count_tokens(tokenizer: Any, messages: Sequence[Message]) -> int:
    """Tokens of ``messages`` as the engine renders them."""
    return len(render(tokenizer, messages))


def build_prompts(tokenizer: Any, plan: Plan, context: int) -> dict[str, Any]:
    """The messages of every scenario, sized to ``plan`` and to the model's context."""
    room = max(32, context - plan.tokens - 64)  # what a prompt may use and still leave the reply room
    long_target = min(plan.long_prompt, room)
    conv_target = min(plan.conversation, room)
    history = [Message("system", _SYSTEM)]
    turn = max(20, conv_target // 6)
    while True:
        trial = history + [Message("user", "Tell me more. " + _fit(tokenizer, turn // 2)),
                           Message("assistant", "Certainly. " + _fit(tokenizer, turn // 2))]
        if count_tokens(tokenizer, trial) > conv_target:
            break
        history = trial
        if len(history) > 200:
            break
    if len(history) == 1:  # context too small for a turn of the planned size: one short pair
        history += [Message("user", "Hi."), Message("assistant", "Hello.")]
    return {
        "short": [Message("system", _SYSTEM), Message("user", _SHORT)],
        "long": [Message("system", _SYSTEM), Message("user", "Summarise this: " + _fit(tokenizer, long_target))],
        "conversation": history,  # ends with an assistant message
        "followup": history + [Message("user", "So what changed for readers?")],
    }


# ---------------------------------------------------------------------------------------- scenarios


def _long_prompt(v: Any, prompts: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """TTFT of the long prompt, and the decode speed of its reply: with ~500 positions cached, what a chat's
    later turns run at (attention reads every cached position each step)."""
    sample = v.run(prompts["long"], plan.long_decode_tokens)
    return {"ttft_long_s": sample.ttft_s, "decode_tok_s_long": sample.decode_tok_s}


def scenarios(prompts: dict[str, Any], plan: Plan) -> list[tuple[str, Callable[[Any], dict[str, Any]]]]:
    """(name, fn(variant) -> {figure: value, ...}) in the order they run inside each repetition. Figures
    whose name starts with ``_`` are kept for checks (the ids, the reused tokens), not reported as such."""

    def decode(v: Any) -> dict[str, Any]:
        s = v.run(prompts["short"], plan.tokens)
        # the KV bytes a step read (the engine's measured cache; None for generate() and the peer): the roofline's
        return {"decode_tok_s": s.decode_tok_s, "ttft_short_s": s.ttft_s, "_ids": s.ids,
                "_kv_read_bytes": s.kv_read_bytes}

    def long_prompt(v: Any) -> dict[str, Any]:
        return _long_prompt(v, prompts, plan)

    def followup(v: Any) -> dict[str, Any]:
        full = v.run(prompts["followup"], 1).ttft_s
        if not v.keeps_cache:  # generate() keeps no cache between calls: every turn re-prefills
            return {"followup_ttft_full_s": full, "followup_ttft_reuse_s": None}
        session = v.session()
        v.run(prompts["conversation"][:-1], 1, session=session)  # the earlier turn, untimed: fills the cache
        reuse = v.run(prompts["followup"], 1, session=session)
        return {"followup_ttft_full_s": full, "followup_ttft_reuse_s": reuse.ttft_s,
                "_reused_tokens": reuse.reused_tokens}

    def no_kv(v: Any) -> dict[str, Any]:
        if v.name == "fastpath":  # the fast path needs a cache: without one it is the plain runner
            return {"decode_tok_s_no_kv": None}
        return {"decode_tok_s_no_kv": v.run(prompts["short"], plan.no_kv_tokens, use_kv_cache=False).decode_tok_s}

    return [("decode", decode), ("long", long_prompt), ("followup", followup), ("no_kv", no_kv)]


def precision_scenarios(prompts: dict[str, Any], plan: Plan) -> list[tuple[str, Callable[[Any], dict[str, Any]]]]:
    """The scenarios run again in each other precision: decode (with the short prompt's TTFT) and the long
    prompt's TTFT and decode."""

    def decode(v: Any) -> dict[str, Any]:
        sample = v.run(prompts["short"], plan.tokens)
        return {"decode_tok_s": sample.decode_tok_s, "ttft_short_s": sample.ttft_s}

    def long_prompt(v: Any) -> dict[str, Any]:
        return _long_prompt(v, prompts, plan)

    return [("decode", decode), ("long", long_prompt)]
