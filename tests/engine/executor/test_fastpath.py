"""engine.executor.fastpath: the FastRunner computes what transformers computes and keeps its cache consistent across
chunks, crops and turns (which models it refuses, and the fallback, are tests/engine/executor/test_runners.py's)."""

from __future__ import annotations

import threading

import pytest
import torch

from engine.events import Finished, Message, Token
from engine.executor import fastpath
from engine.executor.fastpath import FastRunner
from engine.executor.llama_fused import attend_one
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from engine.executor.runner import ModelRunner
from engine.executor.runners import make_runner
from engine.inputs import SamplingConfig
from engine.generate.session import ChatSession
from tests.helpers.reference_forward import random_prompt, reference_logits, runner_logits

STEPS = 20


@pytest.fixture(scope="module")
def tiny_fp32(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def test_logits_match_transformers_fp32_prefill_and_decode(tiny_fp32):
    model = tiny_fp32.model
    prompt = random_prompt(model.config.vocab_size)
    ref, tokens = reference_logits(model, prompt, STEPS)
    got = runner_logits(FastRunner(model), prompt, tokens, chunk=7)  # several chunks: the masked prefill path too
    assert len(got) == STEPS + 1
    for step, (a, b) in enumerate(zip(ref, got)):
        torch.testing.assert_close(b, a, atol=2e-5, rtol=1e-5, msg=lambda m: f"step {step}: {m}")
        assert int(a.argmax()) == int(b.argmax())


def test_static_step_matches_eager_step(tiny_fp32):
    """The fixed-shape step (what CUDA graphs capture) computes the same logits as the eager one."""
    model = tiny_fp32.model
    prompt = random_prompt(model.config.vocab_size, 11)
    _, tokens = reference_logits(model, prompt, 8)
    eager = runner_logits(FastRunner(model), prompt, tokens)
    static = runner_logits(FastRunner(model, static=True, max_positions=64), prompt, tokens)
    for a, b in zip(eager, static):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_cache_grows_and_crop_reuses_the_prefix(tiny_fp32):
    model = tiny_fp32.model
    vocab = model.config.vocab_size
    a, b, c = random_prompt(vocab, 13, 2), random_prompt(vocab, 9, 3), random_prompt(vocab, 10, 4)
    runner = FastRunner(model, initial_capacity=8)  # forces two reallocations that must keep the cache
    list(runner.prefill(a + b, chunk=5))
    runner.decode(7)
    assert runner.cached_ids == tuple(a + b + [7])
    runner.crop(len(a))
    assert runner.cached_len == len(a)
    reused = [logits for _, logits in runner.prefill(c, chunk=4)][-1]
    fresh = [logits for _, logits in FastRunner(model).prefill(a + c)][-1]
    torch.testing.assert_close(reused, fresh, atol=2e-5, rtol=1e-5)
    next_reused, next_fresh = runner.decode(5), ModelRunner(model)
    ref = [logits for _, logits in next_fresh.prefill(a + c + [5])][-1]
    torch.testing.assert_close(next_reused, ref, atol=2e-5, rtol=1e-5)


def test_prefill_cancel_keeps_the_valid_prefix(tiny_fp32):
    model = tiny_fp32.model
    prompt = random_prompt(model.config.vocab_size, 20)
    cancel = threading.Event()
    runner = FastRunner(model)
    for done, _ in runner.prefill(prompt, cancel, chunk=8):
        cancel.set()
    assert runner.cached_ids == tuple(prompt[:8])
    rest = [logits for _, logits in runner.prefill(prompt[8:])][-1]
    whole = [logits for _, logits in FastRunner(model).prefill(prompt)][-1]
    torch.testing.assert_close(rest, whole, atol=2e-5, rtol=1e-5)


def test_kv_bytes_follow_the_formula(tiny_fp32):
    runner = FastRunner(tiny_fp32.model, initial_capacity=16)
    assert runner.kv_bytes() == (0, runner.kv_bytes()[1])
    list(runner.prefill(list(range(10))))
    filled, allocated = runner.kv_bytes()
    assert filled == tiny_fp32.facts.kv_bytes_per_token * 10
    assert allocated == tiny_fp32.facts.kv_bytes_per_token * 16


def test_model_stays_usable_and_weights_are_not_duplicated(tiny_fp32):
    model = tiny_fp32.model
    FastRunner(model)
    attn = model.model.layers[0].self_attn
    # q, k and v became views of one fused tensor: same storage, no second copy.
    assert attn.q_proj.weight.untyped_storage().data_ptr() == attn.k_proj.weight.untyped_storage().data_ptr()
    prompt = random_prompt(model.config.vocab_size, 6)
    plain = [logits for _, logits in ModelRunner(model).prefill(prompt)][-1]
    fast = [logits for _, logits in FastRunner(model).prefill(prompt)][-1]
    torch.testing.assert_close(fast, plain, atol=2e-5, rtol=1e-5)


def test_chat_session_on_fast_runner_streams_the_same_reply_and_reuses_the_cache(tiny_fp32):
    cfg = SamplingConfig(temperature=0.0, max_new_tokens=12)
    history = [Message("system", "Be brief."), Message("user", "What is the KV cache?")]

    def reply(session, messages):
        events = list(session.generate(messages, cfg, threading.Event()))
        assert isinstance(events[-1], Finished) and events[-1].reason in ("eos", "length")
        return [e.token_id for e in events if isinstance(e, Token)], events[-1]

    plain = ChatSession(tiny_fp32, runner_factory=lambda loaded, kv: ModelRunner(loaded.model, kv))
    fast = ChatSession(tiny_fp32, runner_factory=make_runner)
    ids_plain, _ = reply(plain, history)
    ids_fast, first = reply(fast, history)
    assert ids_fast == ids_plain
    follow = history + [Message("assistant", first.text), Message("user", "And prefill?")]
    ids_plain2, _ = reply(plain, follow)
    ids_fast2, second = reply(fast, follow)
    assert ids_fast2 == ids_plain2
    assert second.metrics.reused_tokens > 0


@pytest.mark.parametrize("upcast_prefill", [False, True])
def test_bf16_logits_stay_within_rounding_of_transformers(tiny_model_dir, upcast_prefill):
    """bf16: the fast path runs transformers' operations in the same order, except that q|k|v and gate|up
    are one wider matrix product each; a BLAS that splits that reduction differently may round differently,
    so bound the difference (a few bf16 steps at the top logit) and require the same greedy choices.
    (On the 2-core AVX2 machine this was written on the logits are bit-identical without the upcast.)
    ``upcast_prefill`` (fp32 products on exactly upcast operands, rounded once) is held to the same bound."""
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="bf16", device="cpu"))
    model = loaded.model
    prompt = random_prompt(model.config.vocab_size)
    ref, tokens = reference_logits(model, prompt, STEPS)
    got = runner_logits(FastRunner(model, upcast_prefill=upcast_prefill), prompt, tokens, chunk=10)
    for a, b in zip(ref, got):
        scale = a.float().abs().max().item()
        assert (a.float() - b.float()).abs().max().item() <= 4 * scale * 2 ** -8  # 4 bf16 steps at the top logit
        assert int(a.argmax()) == int(b.argmax())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_decode_past_the_exact_attention_threshold_stays_within_rounding(tiny_model_dir, precision, monkeypatch):
    """From EXACT_ATTENTION_POSITIONS cached positions on, a dense decode step's attention is fp32 products
    (attend_one) instead of SDPA: its logits stay within rounding of transformers' and pick the same tokens.
    (The tiny model's context is 256 positions, so the threshold is lowered to cross it within the prompt.)"""
    monkeypatch.setattr(fastpath, "EXACT_ATTENTION_POSITIONS", 24)
    calls = []
    monkeypatch.setattr(fastpath, "attend_one", lambda *a: calls.append(a[1].shape[1]) or attend_one(*a))
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision, device="cpu"))
    model = loaded.model
    prompt = random_prompt(model.config.vocab_size, n=40, seed=5)
    ref, tokens = reference_logits(model, prompt, 8)
    got = runner_logits(FastRunner(model, upcast_prefill=False), prompt, tokens)
    bound = 1e-4 if precision == "fp32" else 4 * 2 ** -8
    for a, b in zip(ref, got):
        assert (a.float() - b.float()).abs().max().item() <= bound * a.float().abs().max().item()
        assert int(a.argmax()) == int(b.argmax())
    assert calls and min(calls) == 41  # every decode step past the threshold went through attend_one


def test_compile_failure_falls_back_to_eager(tiny_fp32, monkeypatch):
    """An unusable torch.compile must cost nothing but the speed-up."""

    def broken(*_a, **_k):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", broken)
    model = tiny_fp32.model
    prompt = random_prompt(model.config.vocab_size, 5)
    _, tokens = reference_logits(model, prompt, 3)
    got = runner_logits(FastRunner(model, compile=True), prompt, tokens)
    want = runner_logits(FastRunner(model), prompt, tokens)
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a)


@pytest.mark.default_model
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_default_model_greedy_text_equals_generate(default_model_dir, precision):
    """128 greedy tokens equal generate()'s. bf16 runs without the prefill upcast: that one rounds K/V
    differently (bounded by the bf16 logits test), which on a near-tie can change a later token."""
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision=precision, device="cpu"))
    model, tok = loaded.model, loaded.tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": "Write a long story about a cat who learns to fly."}],
                                  add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    n = 128
    with torch.inference_mode():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             temperature=None, top_p=None, top_k=None)[0, len(ids):].tolist()
    runner = FastRunner(model, upcast_prefill=False)
    logits = [out for _, out in runner.prefill(ids)][-1]
    got = []
    for i in range(n):
        got.append(int(logits.float().argmax()))
        if i + 1 < n:
            logits = runner.decode(got[-1])
    assert tok.decode(got) == tok.decode(ref)


@pytest.mark.cuda
def test_cuda_static_graph_step_matches_eager(tiny_model_dir):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cuda"))
    model = loaded.model
    prompt = random_prompt(model.config.vocab_size, 9)
    eager = FastRunner(model)
    graph = FastRunner(model, static=True, compile=True, max_positions=64)
    a = [logits for _, logits in eager.prefill(prompt)][-1]
    b = [logits for _, logits in graph.prefill(prompt)][-1]
    for token in (3, 5, 8, 13):
        a, b = eager.decode(token), graph.decode(token)
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)
