"""ChatSession on the tiny model: the generation contract, cache reuse across turns, cancel, faults."""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time

import pytest
import torch

from engine.generate.context import render
from engine.errors import BadInputError, ContextTooLongError, TemplateError
from engine.events import Finished, Message, PrefillProgress, Started, Stats, Token
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from engine.executor.runner import ModelRunner
from engine.executor.runners import make_runner
from engine.inputs import SamplingConfig
from engine.generate.session import RESERVE_FROM_THREADS, ChatSession, common_prefix

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=12)
CHAT = [Message("system", "You are Miaohui."), Message("user", "What is the capital of France?")]


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def checked(events: list) -> list:
    """One turn's events (chat or completion) after the session's contract is checked: Started first, Finished last."""
    finished = [e for e in events if isinstance(e, Finished)]
    assert len(finished) == 1 and events[-1] is finished[0], "Finished must come last, exactly once"
    assert isinstance(events[0], Started)
    return events


def run(session: ChatSession, messages=CHAT, config=GREEDY, cancel=None) -> list:
    return checked(list(session.generate(messages, config, cancel)))


def tokens(events) -> list[Token]:
    return [e for e in events if isinstance(e, Token)]


class FaultyModel:
    """The real tiny model whose n-th forward raises ``error`` (a fault injected through the runner factory)."""

    def __init__(self, model, fail_on: int, error: BaseException):
        self.model, self.fail_on, self.error, self.calls = model, fail_on, error, 0

    def __call__(self, **kwargs):
        self.calls += 1
        if self.calls == self.fail_on:
            raise self.error
        return self.model(**kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


# ---------------------------------------------------------------- the stream


def test_greedy_is_deterministic_and_the_stream_is_well_formed(loaded):
    config = dataclasses.replace(GREEDY, top_logprobs=4)
    first, second = run(ChatSession(loaded), config=config), run(ChatSession(loaded), config=config)
    ids = [t.token_id for t in tokens(first)]
    assert ids == [t.token_id for t in tokens(second)]
    assert [t.index for t in tokens(first)] == list(range(len(ids)))
    finished = first[-1]
    assert finished.text == loaded.tokenizer.decode(ids, skip_special_tokens=True)
    assert finished.text.startswith("".join(t.text for t in tokens(first)))
    for token in tokens(first):  # greedy: the chosen token is the top candidate
        assert len(token.top) == 4 and token.top[0].token_id == token.token_id and token.prob == token.top[0].prob
    assert any(isinstance(e, PrefillProgress) for e in first)


def test_same_seed_same_reply(loaded):
    config = SamplingConfig(temperature=1.5, top_k=0, top_p=1.0, seed=42, max_new_tokens=16)
    replies = [[t.token_id for t in tokens(run(ChatSession(loaded), config=config))] for _ in range(2)]
    assert replies[0] == replies[1]
    other = [t.token_id for t in tokens(run(ChatSession(loaded), config=dataclasses.replace(config, seed=43)))]
    assert other != replies[0]


def test_max_new_tokens_finishes_with_length_and_honest_metrics(loaded):
    events = run(ChatSession(loaded), config=dataclasses.replace(GREEDY, max_new_tokens=20))
    finished, stream = events[-1], tokens(events)
    m = finished.metrics
    assert finished.reason == "length" and len(stream) == m.generated_tokens == 20
    assert [s for s in events if isinstance(s, Stats)]  # live snapshots during the reply
    assert m.ttft_s == pytest.approx(stream[0].t - events[0].t)
    assert m.e2e_s == pytest.approx(stream[-1].t - events[0].t)
    assert len(m.itl_s) == 19 and m.itl_s[0] == pytest.approx(stream[1].t - stream[0].t)
    assert m.decode_tok_s == pytest.approx(19 / (stream[-1].t - stream[0].t))
    assert m.tpot_s == pytest.approx((m.e2e_s - m.ttft_s) / 19)
    assert m.prefill_tok_s == pytest.approx(m.prefill_tokens / m.prefill_s)
    assert m.prefill_tokens == m.prompt_tokens and m.reused_tokens == 0
    assert m.context_tokens == m.prompt_tokens + 20 and m.context_max == 256
    assert m.weights_bytes == loaded.facts.weights_bytes and m.peak_memory_bytes > 0
    # The cache holds prompt + reply except the last token (never fed back): measured == formula.
    assert m.kv_cache_bytes == m.kv_cache_bytes_formula == loaded.facts.kv_bytes_per_token * (m.prompt_tokens + 19)
    assert m.kv_cache_bytes_formula_no_gqa == 2 * m.kv_cache_bytes_formula  # 4 heads share 2 KV heads


def test_stops_on_every_end_token(loaded, tiny_model_dir):
    # Seeded sampling: a varied but reproducible reply (the random tiny model's greedy reply repeats one token).
    config = SamplingConfig(temperature=1.5, top_k=0, top_p=1.0, seed=7, max_new_tokens=30)
    plain = [t.token_id for t in tokens(run(ChatSession(loaded), config=config))]
    stop = plain[5]  # declare a token of the reply an end token too: generation must stop at it
    with_stop = dataclasses.replace(loaded, eos_token_ids=(*loaded.eos_token_ids, stop))
    events = run(ChatSession(with_stop), config=config)
    assert events[-1].reason == "eos"
    assert [t.token_id for t in tokens(events)] == plain[: plain.index(stop) + 1]

    # A model that really ends its turn: the head biased towards <|im_end|>.
    model = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    eos = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    head = torch.nn.Linear(model.facts.hidden_size, model.facts.vocab_size, bias=True)
    head.weight = model.model.lm_head.weight
    with torch.no_grad():
        head.bias.zero_()
        head.bias[eos] = 50.0
    model.model.lm_head = head
    events = run(ChatSession(model))
    assert events[-1].reason == "eos" and [t.token_id for t in tokens(events)] == [eos]
    assert events[-1].text == "" and tokens(events)[0].text == ""


def test_cached_and_uncached_greedy_replies_are_equal(loaded):
    config = dataclasses.replace(GREEDY, max_new_tokens=16)
    cached = run(ChatSession(loaded), config=config)
    uncached = run(ChatSession(loaded), config=dataclasses.replace(config, use_kv_cache=False))
    assert [t.token_id for t in tokens(cached)] == [t.token_id for t in tokens(uncached)]
    assert uncached[-1].metrics.kv_cache_bytes == 0 and cached[-1].metrics.kv_cache_bytes > 0


# ---------------------------------------------------------------- cache across turns


def test_next_turn_prefills_only_new_tokens_and_matches_a_fresh_session(loaded):
    session = ChatSession(loaded)
    first = run(session)
    history = CHAT + [Message("assistant", first[-1].text), Message("user", "And of Spain?")]
    second = run(session, history)
    started, m = second[0], second[-1].metrics
    assert started.reused_tokens >= first[0].prompt_tokens  # the whole first prompt was kept
    assert m.prefill_tokens == m.prompt_tokens - m.reused_tokens
    assert [e.total for e in second if isinstance(e, PrefillProgress)][-1] == m.prefill_tokens
    fresh = run(ChatSession(loaded), history)
    assert [t.token_id for t in tokens(second)] == [t.token_id for t in tokens(fresh)]


def test_regenerate_and_edit_crop_the_cache_to_the_common_prefix(loaded):
    session = ChatSession(loaded)
    first = run(session)
    again = run(session)  # regenerate: same prompt, all but its last token reused
    assert again[0].reused_tokens == again[0].prompt_tokens - 1 and again[-1].metrics.prefill_tokens == 1
    assert [t.token_id for t in tokens(again)] == [t.token_id for t in tokens(first)]

    edited = [CHAT[0], Message("user", "What is the capital of Spain?")]
    old_ids, new_ids = render(loaded.tokenizer, CHAT), render(loaded.tokenizer, edited)
    prefix = common_prefix(old_ids, new_ids)
    events = run(session, edited)
    assert events[0].reused_tokens == prefix and events[-1].metrics.prefill_tokens == len(new_ids) - prefix
    assert [t.token_id for t in tokens(events)] == [t.token_id for t in tokens(run(ChatSession(loaded), edited))]


# ---------------------------------------------------------------- cancel


def test_cancel_after_the_kth_token_stops_before_another(loaded):
    cancel = threading.Event()
    stream = ChatSession(loaded).generate(CHAT, dataclasses.replace(GREEDY, max_new_tokens=50), cancel)
    seen = []
    for event in stream:
        seen.append(event)
        if isinstance(event, Token) and event.index == 3:
            cancel.set()
    assert seen[-1].reason == "cancelled" and len(tokens(seen)) == 4
    assert seen[-1].text == loaded.tokenizer.decode([t.token_id for t in tokens(seen)], skip_special_tokens=True)


def test_cancel_from_another_thread_takes_effect_within_one_token(loaded):
    cancel, kth = threading.Event(), threading.Event()
    canceller = threading.Thread(target=lambda: kth.wait(10) and cancel.set())
    canceller.start()
    after = 0
    session = ChatSession(loaded)
    for event in session.generate(CHAT, dataclasses.replace(GREEDY, max_new_tokens=100), cancel):
        if isinstance(event, Token):
            if kth.is_set():
                after += 1
            elif event.index == 2:
                kth.set()
                canceller.join(10)  # the flag is now set while the worker is between steps
        last = event
    assert last.reason == "cancelled" and after <= 1
    assert run(session)[-1].reason == "length"  # and the session carries on


def test_cancel_pressed_while_the_model_is_computing_emits_no_further_token(loaded):
    cancel = threading.Event()

    class StopPressedDuringForward(FaultyModel):
        def __call__(self, **kwargs):
            self.calls += 1
            if self.calls == self.fail_on:
                cancel.set()  # as if the GUI thread pressed Stop while the worker is inside the model
            return self.model(**kwargs)

    model = StopPressedDuringForward(loaded.model, fail_on=4, error=RuntimeError())
    session = ChatSession(loaded, runner_factory=lambda lm, kv: ModelRunner(model, kv))
    events = run(session, config=dataclasses.replace(GREEDY, max_new_tokens=50), cancel=cancel)
    # Forward 1 is the prefill (token 0), 2 and 3 decode tokens 1 and 2; the 4th's result is dropped.
    assert events[-1].reason == "cancelled" and len(tokens(events)) == 3


def test_cancel_during_chunked_prefill(loaded):
    long_chat = [Message("user", "The KV cache stores keys and values. " * 8)]
    config = dataclasses.replace(GREEDY, prefill_chunk=8)
    cancel = threading.Event()
    session = ChatSession(loaded)
    events = []
    for event in session.generate(long_chat, config, cancel):
        events.append(event)
        if isinstance(event, PrefillProgress):
            cancel.set()
    progress = [e for e in events if isinstance(e, PrefillProgress)]
    assert events[-1].reason == "cancelled" and not tokens(events)
    assert [p.done for p in progress] == [8] and progress[0].total > 8
    assert events[-1].metrics.ttft_s is None  # no token, no made-up TTFT
    # The 8 tokens computed before the cancel are reused by the next request.
    again = run(session, long_chat, config)
    assert again[0].reused_tokens == 8 and again[-1].reason == "length"


# ---------------------------------------------------------------- input and faults


def test_bad_input_raises_before_anything_runs(loaded):
    session = ChatSession(loaded)
    with pytest.raises(BadInputError):
        session.generate([Message("user", "   ")], GREEDY)
    with pytest.raises(BadInputError):
        session.generate([], GREEDY)
    with pytest.raises(ContextTooLongError):
        session.generate([Message("user", "The capital of France is Paris. " * 60)], GREEDY)
    assert session.cached_tokens == 0


def test_nul_bytes_and_surrogates_do_not_crash(loaded):
    events = run(ChatSession(loaded), [Message("user", "a\x00b \ud800 c \ud83d\ude00")])
    assert events[-1].reason == "length"


def test_history_longer_than_the_context_drops_oldest_turns(loaded):
    history = [Message("system", "You are Miaohui.")]
    for i in range(15):
        history += [Message("user", f"question {i} about Paris"), Message("assistant", f"answer {i}: Paris.")]
    history.append(Message("user", "newest"))
    events = run(ChatSession(loaded), history, dataclasses.replace(GREEDY, max_new_tokens=32))
    assert events[0].dropped_turns > 0 and events[-1].metrics.dropped_turns == events[0].dropped_turns
    assert events[0].prompt_tokens + 32 <= 256 and events[-1].reason == "length"



def test_a_history_of_thousands_of_turns_is_trimmed_and_answered(loaded):
    # Issue 31 (5): rendering all of it before trimming ran out the template's 5 s budget: a TemplateError.
    history = [Message("system", "You are Miaohui.")]
    for i in range(20_000):
        history += [Message("user", f"question {i} about Paris"), Message("assistant", f"answer {i}: Paris.")]
    history.append(Message("user", "newest"))
    events = run(ChatSession(loaded), history, dataclasses.replace(GREEDY, max_new_tokens=16))
    assert events[0].dropped_turns > 39_000 and events[0].prompt_tokens + 16 <= 256
    assert events[-1].reason == "length" and len(tokens(events)) == 16

def test_an_exception_inside_generation_ends_with_an_error_and_the_next_request_works(loaded):
    faulty = FaultyModel(loaded.model, fail_on=3, error=RuntimeError("injected fault\nsecond line"))
    session = ChatSession(loaded, runner_factory=lambda lm, kv: ModelRunner(faulty, kv))
    events = run(session)
    finished = events[-1]
    assert finished.reason == "error" and "injected fault" in finished.error and "\n" not in finished.error
    assert len(tokens(events)) == 2  # prefill + one decode ran, the second decode failed
    assert finished.text == loaded.tokenizer.decode([t.token_id for t in tokens(events)], skip_special_tokens=True)
    after = run(session)  # the faulty forward is spent: this one must simply work
    assert after[-1].reason == "length" and after[0].reused_tokens == 0  # the suspect cache was dropped


def test_out_of_memory_drops_the_cache_keeps_the_model_and_says_what_to_do(loaded):
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    faulty = FaultyModel(loaded.model, fail_on=2, error=oom)
    session = ChatSession(loaded, runner_factory=lambda lm, kv: ModelRunner(faulty, kv))
    finished = run(session)[-1]
    assert finished.reason == "error" and "out of memory" in finished.error and "4-bit" in finished.error
    assert session.loaded is loaded and session.cached_tokens == 0
    assert run(session)[-1].reason == "length"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_greedy_reply_matches_cpu(tiny_model_dir, loaded):
    gpu = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cuda"))
    events = run(ChatSession(gpu))
    assert events[-1].metrics.device.startswith("cuda") and events[-1].metrics.peak_memory_bytes > 0
    assert [t.token_id for t in tokens(events)] == [t.token_id for t in tokens(run(ChatSession(loaded)))]


def test_reserved_threads_apply_to_decode_only_and_are_restored(loaded):
    seen: dict[str, list[int]] = {"prefill": [], "decode": []}

    class Watching:
        """The real runner, noting torch's thread count at each forward."""

        def __init__(self, inner):
            self._inner = inner

        def prefill(self, ids, cancel=None, chunk=256):
            seen["prefill"].append(torch.get_num_threads())
            yield from self._inner.prefill(ids, cancel, chunk)

        def decode(self, token_id):
            seen["decode"].append(torch.get_num_threads())
            return self._inner.decode(token_id)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    before = torch.get_num_threads()
    torch.set_num_threads(RESERVE_FROM_THREADS)
    try:
        session = ChatSession(loaded, runner_factory=lambda lm, kv: Watching(make_runner(lm, kv)), reserve_threads=1)
        plain = tokens(run(ChatSession(loaded)))
        events = run(session)
        assert torch.get_num_threads() == RESERVE_FROM_THREADS  # restored when the reply ended
        assert seen["prefill"] == [RESERVE_FROM_THREADS] and set(seen["decode"]) == {RESERVE_FROM_THREADS - 1}
        assert [t.token_id for t in tokens(events)] == [t.token_id for t in plain]  # same reply, fewer threads
        cancelled = threading.Event()
        stream = session.generate(CHAT, GREEDY, cancelled)
        next(e for e in stream if isinstance(e, Token))
        assert torch.get_num_threads() == RESERVE_FROM_THREADS - 1  # mid-decode
        stream.close()  # abandoned mid-reply (the window closed): threads still come back
        assert torch.get_num_threads() == RESERVE_FROM_THREADS
        # Below RESERVE_FROM_THREADS a reserved thread would be too large a share: every thread decodes.
        torch.set_num_threads(RESERVE_FROM_THREADS - 1)
        seen["decode"].clear()
        run(session)
        assert set(seen["decode"]) == {RESERVE_FROM_THREADS - 1}
    finally:
        torch.set_num_threads(before)


def _model_with_template(tiny_model_dir, folder, template: str):
    """The tiny model with its chat template replaced (a downloaded model's template is its author's code)."""
    shutil.copytree(tiny_model_dir, folder)
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    return load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))


def test_stop_while_a_runaway_template_renders_finishes_cancelled(tiny_model_dir, tmp_path):
    # Issue 18: loops with no output, call or lookup inside ran for minutes and Stop had no effect.
    silent = ("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% for k in r %}"
              "{% endfor %}{% endfor %}{% endfor %}")
    session = ChatSession(_model_with_template(tiny_model_dir, tmp_path / "m", silent))
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    events = list(session.generate(CHAT, GREEDY, cancel))
    assert time.monotonic() - start < 2
    assert len(events) == 1 and isinstance(events[0], Finished) and events[0].reason == "cancelled"
    # Not cancelled, the same template is refused at its deadline with one line.
    with pytest.raises(TemplateError, match="took more than 5 s") as info:
        session.generate(CHAT, GREEDY)
    assert "\n" not in str(info.value)


def test_a_budget_beyond_the_context_is_capped_by_it(loaded):
    # --max-new-tokens 10**12 with a repetition penalty once sized a buffer of 10**12 ids (8 TB) and failed;
    # the budget is capped by the context (256 positions here), so the reply simply runs to the end of it.
    config = SamplingConfig(temperature=0.0, max_new_tokens=10**12, repetition_penalty=1.3)
    events = run(ChatSession(loaded), [Message("user", "Hi")], config)
    finished = events[-1]
    assert finished.reason in ("eos", "length"), finished.error
    assert 0 < finished.metrics.context_tokens <= loaded.facts.context_length == 256
