"""The contract between the two forms of the decoder step: the one Python step (engine/executor/step.py) and the
int8/int4 step in one native call (engine/executor/native_step.py, engine/native/decode_step.cpp) give the same logits
and cache, bit for bit, in each of the step's forms, for the default model and for random-weight models of each family
the native step takes (built from the families' real transformers configs, scaled down), at int8 and int4:

- eager: one token, the native step against the Python step;
- verify: k tokens, the native step's own verify (issue 45) and the Python step's verify rows against k native steps;
- batched: n runners one token each (decode_batch, the Python step over n rows) against each runner's native step.

And the row operations the two share match torch's."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from engine.executor import native_step
from engine.executor.batched import decode_batch
from engine.executor.fastpath import FastRunner
from engine.executor.llama_fused import attend_one, gemma_rms_norm
from engine.native import library as native
from tests.engine.executor.test_families import _gemma3, _llama_biased, _qwen2, _qwen3
from tests.engine.executor.test_families_mistral import _mistral
from tests.engine.executor.test_families_phi_gemma2_llama3 import _gemma2, _phi4_mini
from tests.helpers.family_models import build_family, load_cpu
from tests.helpers.reference_forward import random_prompt

pytestmark = pytest.mark.skipif(not native.decode_ops(), reason="native library not built here, or no AVX2")

# gemma2: (1 + w) fp32 norms, post norms, GeGLU, soft-capped scores and logits, sliding layers (window 8) between
# global ones; gemma3: those but the caps, plus q/k norms and two RoPE tables (local base on sliding layers).
FAMILIES = {"qwen2": _qwen2, "qwen3": _qwen3, "llama-biased": _llama_biased, "mistral-window": _mistral,
            "phi4-partial-rotary": _phi4_mini, "gemma2": _gemma2, "gemma3": _gemma3}
STEPS = 24


def _python_twin(runner: FastRunner) -> FastRunner:
    """A runner of the same model whose decode runs the Python step."""
    twin = FastRunner(runner.model)
    twin._native = None
    return twin


def same_decodes(a: FastRunner, b: FastRunner, prompt: list[int], steps: int,
                  same_cache: Callable[[FastRunner, FastRunner, int], None] | None = None) -> None:
    """Both runners prefill ``prompt`` and decode ``steps`` greedy tokens: the same logits each step, then the same
    caches (``same_cache``; the dense cache's K and V by default)."""
    for runner in (a, b):
        list(runner.prefill(prompt))
    token = prompt[-1]
    for step in range(steps):
        got, want = a.decode(token), b.decode(token)
        assert torch.equal(got, want), f"step {step}: logits differ by {(got.float() - want.float()).abs().max()}"
        token = int(got.argmax())
    (same_cache or _same_dense_cache)(a, b, len(prompt) + steps)


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("native_families")
    return {name: build_family(root / name, make) for name, make in FAMILIES.items()}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_native_step_equals_the_python_step_for_each_family(family_dirs, family, precision):
    model = load_cpu(family_dirs[family], precision).model
    runner = FastRunner(model)
    assert runner.native_step_reason is None and runner._native is not None
    # past the mistral and Gemma models' sliding windows, through every layer's bias, q/k norm, partial rotary,
    # Gemma norm, GeGLU, soft cap and RoPE table
    same_decodes(runner, _python_twin(runner), random_prompt(model.config.vocab_size, 20, seed=5), STEPS)


@pytest.mark.parametrize("native_bf16", ["1", "0"])
def test_native_step_equals_the_python_step_on_the_default_model(default_model_dir, monkeypatch, native_bf16):
    """The real default model in int4, whether or not bf16 is computed natively here."""
    monkeypatch.setenv("MIAOHUI_CPU_BF16", native_bf16)
    model = load_cpu(default_model_dir, "int4").model
    runner = FastRunner(model)
    assert runner._native is not None, runner.native_step_reason
    same_decodes(runner, _python_twin(runner), random_prompt(model.config.vocab_size, 30, seed=1), 12)


def test_the_default_model_at_auto_without_native_bf16_takes_the_native_step(default_model_dir, monkeypatch):
    """Where bf16 is not native, ``auto`` measures its verdict on the model in fp32, then loads int4 in bf16 as an
    explicit int4 does (engine/models/loader.py): every projection and the int8 head must take the tiles, or the whole
    step falls back to Python (32 against 217 tok/s on an AVX2-only EPYC until 2026-12-07, when auto's int4 was fp32
    and its head stayed on aten's kernel; tests/engine/quant/test_tiled.py checks that head in fp32 too)."""
    monkeypatch.setenv("MIAOHUI_CPU_BF16", "0")
    loaded = load_cpu(default_model_dir, "auto")
    model = loaded.model
    assert loaded.facts.precision == "int4" and model.dtype == torch.bfloat16
    runner = FastRunner(model)
    assert runner._native is not None, runner.native_step_reason
    same_decodes(runner, _python_twin(runner), random_prompt(model.config.vocab_size, 30, seed=3), 12)


def test_verify_and_the_batched_step_give_the_native_steps_bits(family_dirs):
    """Speculation prints what plain decoding prints, and a batch what each sequence alone gives, because the
    Python rows they run are the native step's own operations."""
    model = load_cpu(family_dirs["qwen3"], "int4").model
    prompt = random_prompt(model.config.vocab_size, 16, seed=7)
    alone, checked = FastRunner(model), FastRunner(model)
    assert alone._native is not None
    for runner in (alone, checked):
        list(runner.prefill(prompt))
    tokens = random_prompt(model.config.vocab_size, 6, seed=8)
    decoded = torch.cat([alone.decode(token) for token in tokens])
    assert torch.equal(checked.verify(tokens), decoded)
    others = [FastRunner(model) for _ in range(2)]
    for runner, seed in zip(others, (9, 10)):
        list(runner.prefill(random_prompt(model.config.vocab_size, 11 + seed, seed=seed)))
    single = FastRunner(model)
    list(single.prefill(prompt + tokens))
    batch = decode_batch([single, *others], [3, 4, 5])
    reference = FastRunner(model)
    list(reference.prefill(prompt + tokens))
    assert torch.equal(batch[:1], reference.decode(3))


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_python_verify_rows_give_each_native_steps_bits_for_each_family(family_dirs, family, precision):
    """The Python step over one runner and k tokens (what verify runs where the native step does not) against k native
    steps: logits and cache, 1 row, a kernel's 4-row chunk and a ragged 9, past the mistral model's sliding window."""
    from engine.executor.verify import RowExact, verify_rows

    model = load_cpu(family_dirs[family], precision).model
    exact = RowExact()
    for rows, seed in ((1, 21), (4, 22), (9, 23)):
        prompt = random_prompt(model.config.vocab_size, 20, seed=seed)
        tokens = random_prompt(model.config.vocab_size, rows, seed=seed + 100)
        alone, checked = FastRunner(model), _python_twin(FastRunner(model))
        assert alone._native is not None
        for runner in (alone, checked):
            list(runner.prefill(prompt))
        decoded = torch.cat([alone.decode(token) for token in tokens])
        checked._ensure(len(prompt) + len(tokens))
        assert torch.equal(verify_rows(checked, tokens, len(prompt), exact), decoded)
        end = len(prompt) + len(tokens)
        assert torch.equal(checked._kv.k[:, :, :end], alone._kv.k[:, :, :end])
        assert torch.equal(checked._kv.v[:, :, :end], alone._kv.v[:, :, :end])


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("precision", ["int4", "int8"])
@pytest.mark.parametrize("path", ["native", "python"])
def test_the_batched_step_gives_each_native_steps_bits_for_each_family(family_dirs, family, precision, path,
                                                                         monkeypatch):
    """decode_batch over n runners, one token each, in one native call (DecodeStep.batch) or as the Python step,
    against each runner's own native steps: three sequences of different lengths, several steps, logits and caches."""
    from engine.executor import batched as batched_module

    if path == "python":
        monkeypatch.setattr(batched_module, "_native_batch", lambda *args: None)
    else:  # the native batch must serve every step: the Python rows are never reached
        monkeypatch.setattr(batched_module, "forward_rows", lambda *args: pytest.fail("the Python batch ran"))
    check_batch_against_alone(load_cpu(family_dirs[family], precision).model, 6, _same_dense_cache)


def _same_dense_cache(a: FastRunner, b: FastRunner, end: int) -> None:
    assert torch.equal(a._kv.k[:, :, :end], b._kv.k[:, :, :end])
    assert torch.equal(a._kv.v[:, :, :end], b._kv.v[:, :, :end])


def check_batch_against_alone(model: Any, steps: int, same_cache: Callable[[FastRunner, FastRunner, int], None],
                              **runner_args: Any) -> None:
    """decode_batch over three runners (prompts of 9, 17 and 24 tokens) against three others each decoding alone on
    its native step, for ``steps`` steps: the same logits each step, then the same caches (``same_cache``)."""
    prompts = [random_prompt(model.config.vocab_size, length, seed=30 + length) for length in (9, 17, 24)]
    batched = [FastRunner(model, **runner_args) for _ in prompts]
    alone = [FastRunner(model, **runner_args) for _ in prompts]
    assert alone[0]._native is not None
    for pair, prompt in zip(zip(batched, alone), prompts):
        for runner in pair:
            list(runner.prefill(prompt))
    tokens = [prompt[-1] for prompt in prompts]
    for step in range(steps):
        got = decode_batch(batched, tokens)
        want = torch.cat([runner.decode(token) for runner, token in zip(alone, tokens)])
        assert torch.equal(got, want), f"step {step}"
        tokens = [int(row.argmax()) for row in got]
    for a, b in zip(batched, alone):
        same_cache(a, b, b.cached_len)


def test_why_not_names_what_keeps_a_model_on_the_python_step(family_dirs, monkeypatch):
    model = load_cpu(family_dirs["qwen2"], "int4").model
    assert FastRunner(model, kv_precision="int8").native_step_reason is None  # test_native_step_int8kv.py
    monkeypatch.setattr(native, "int8_kv_ops", lambda: False)  # a library built before the 8-bit cache's ops
    assert "int8 KV cache" in FastRunner(model, kv_precision="int8").native_step_reason
    monkeypatch.undo()
    monkeypatch.setenv(native_step.NATIVE_STEP_ENV, "0")
    runner = FastRunner(model)
    assert runner._native is None and "MIAOHUI_NATIVE_STEP=0" in runner.native_step_reason
    dense = load_cpu(family_dirs["qwen2"], "bf16").model
    assert FastRunner(dense).native_step_reason  # dense weights: the exact Python step
    monkeypatch.delenv(native_step.NATIVE_STEP_ENV)
    monkeypatch.setattr(native_step, "has_gemma_ops", lambda: False)  # a library built from older sources
    assert "older sources" in FastRunner(model).native_step_reason


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_row_operations_match_torch_within_rounding(dtype):
    torch.manual_seed(0)
    x = (torch.randn(5, 200) * 3).to(dtype)
    weight = torch.randn(200).to(dtype)
    want = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float())
    got = torch.ops.miaohui.rms_norm_rows(x, weight, 1e-6)
    torch.testing.assert_close(got.float(), want, atol=0.02, rtol=0.01)
    # rows are independent: one row alone gives its bits in the batch
    assert torch.equal(torch.ops.miaohui.rms_norm_rows(x[2:3], weight, 1e-6), got[2:3])
    gate_up = (torch.randn(3, 2 * 77) * 4).to(dtype)
    want = torch.nn.functional.silu(gate_up[:, :77].float()) * gate_up[:, 77:].float()
    torch.testing.assert_close(torch.ops.miaohui.silu_mul(gate_up, 77).float(), want, atol=0.05, rtol=0.02)
    for positions in (1, 7, 300):  # short spans on one thread, long ones spread over heads
        q = torch.randn(6, 40).to(dtype)
        cache = torch.randn(2, 2, positions + 5, 40).to(dtype)
        k, v = cache[0, :, 3:3 + positions], cache[1, :, 3:3 + positions]  # strided views, as the cache is read
        want = torch.nn.functional.scaled_dot_product_attention(
            q.float().view(1, 6, 1, 40), k.float()[None], v.float()[None], scale=40 ** -0.5, enable_gqa=True)
        got = torch.ops.miaohui.attend_one(q, k, v, 40 ** -0.5)
        torch.testing.assert_close(got.float(), want.view(1, -1), atol=0.02, rtol=0.02)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gemma_row_operations_match_torch_within_rounding(dtype):
    """Gemma's: the norm with its fp32 (1 + w) weight (gemma_rms_norm's one rounding), GeGLU's tanh-GELU, and the
    attention scores soft-capped (Gemma 2's transformers caps cap · tanh(s / cap) before the softmax)."""
    torch.manual_seed(1)
    x = (torch.randn(5, 200) * 3).to(dtype)
    weight = 1.0 + torch.randn(200) * 0.5  # fp32, as _norm_weight stores Gemma's
    got = torch.ops.miaohui.rms_norm_rows(x, weight, 1e-6)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), gemma_rms_norm(x, weight, 1e-6).float(), atol=0.02, rtol=0.01)
    assert torch.equal(torch.ops.miaohui.rms_norm_rows(x[3:4], weight, 1e-6), got[3:4])
    gate_up = (torch.randn(3, 2 * 77) * 4).to(dtype)
    want = torch.nn.functional.gelu(gate_up[:, :77].float(), approximate="tanh") * gate_up[:, 77:].float()
    torch.testing.assert_close(torch.ops.miaohui.gelu_tanh_mul(gate_up, 77).float(), want, atol=0.05, rtol=0.02)
    for positions, cap in ((1, 2.0), (13, 2.0), (300, 50.0)):
        q = (torch.randn(6, 40) * 4).to(dtype)
        cache = torch.randn(2, 2, positions, 40).to(dtype)
        k, v = cache[0], cache[1]
        scores = torch.einsum("kgd,knd->kgn", q.float().view(2, 3, 40), k.float()) * 40 ** -0.5
        probs = torch.softmax(torch.tanh(scores / cap) * cap, dim=-1)
        want = torch.einsum("kgn,knd->kgd", probs, v.float()).reshape(1, -1)
        got = torch.ops.miaohui.attend_one(q, k, v, 40 ** -0.5, cap)
        torch.testing.assert_close(got.float(), want, atol=0.02, rtol=0.02)
        # the Python step's call is the same op: the same bits
        assert torch.equal(attend_one(q, k, v, 40 ** -0.5, cap), got)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_attention_shifts_by_the_largest_score_even_when_every_score_is_far_below_zero(dtype):
    """Each head's largest score is kept in 8 lanes over the positions (row_ops.h): the lanes past a span's last
    position are padding and must not count. Scores near -200 with spans not a multiple of 8: counting a padding
    lane's 0 as the largest would clamp every e^(s - 0) alike (a uniform softmax), not the right weights."""
    torch.manual_seed(3)
    dim = 64
    for positions in (5, 13, 2100):
        direction = torch.rand(dim) + 0.5
        k = (direction + 0.05 * torch.randn(2, positions, dim)).to(dtype)
        q = (-200.0 * direction / direction.norm() + torch.randn(8, dim)).to(dtype)
        v = torch.randn(2, positions, dim).to(dtype)
        scores = torch.einsum("kgd,knd->kgn", q.float().view(2, 4, dim), k.float()) * dim ** -0.5
        assert scores.max() < -50 and (scores.amax(-1) - scores.amin(-1)).min() > 1  # far below zero, not uniform
        want = torch.einsum("kgn,knd->kgd", torch.softmax(scores, dim=-1), v.float()).reshape(1, -1)
        got = torch.ops.miaohui.attend_one(q, k, v, dim ** -0.5)
        torch.testing.assert_close(got.float(), want, atol=0.02, rtol=0.02)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (14, 2, 64), (32, 8, 64), (16, 1, 72), (4, 4, 40)])
def test_attention_reads_a_kv_head_once_for_its_group_with_each_head_s_own_bits(dtype, heads, kv_heads, dim):
    """attend_one passes over each KV head once for up to 8 of its query heads, and splits the passes over threads at
    long spans: every head's output is bit for bit that head computed alone over its KV head, for short spans (one
    thread) and long ones (passes spread), whatever the head count per pass (16 heads of 1 KV head: two passes)."""
    torch.manual_seed(1)
    for positions in (5, 300, 2100):
        q = torch.randn(heads, dim).to(dtype)
        cache = torch.randn(2, kv_heads, positions + 3, dim).to(dtype)
        k, v = cache[0, :, :positions], cache[1, :, :positions]  # strided views, as the cache is read
        together = torch.ops.miaohui.attend_one(q, k, v, dim ** -0.5).view(heads, dim)
        group = heads // kv_heads
        for h in range(heads):
            alone = torch.ops.miaohui.attend_one(q[h:h + 1], k[h // group:h // group + 1], v[h // group:h // group + 1],
                                                 dim ** -0.5)
            assert torch.equal(together[h:h + 1], alone), (positions, h)


def test_the_model_facts_name_the_decode_step(default_model_dir, family_dirs):
    """What engine info, engine chat --json and the facts say: native for the default model in int4, with an int8 KV
    cache too, nothing for float weights (their step is transformers-exact Python)."""
    assert load_cpu(default_model_dir, "int4").facts.decode_step == "native"
    assert load_cpu(family_dirs["qwen3"], "bf16").facts.decode_step is None
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model

    loaded = load_model(LoadSpec(model=str(family_dirs["qwen2"]), precision="int4", device="cpu", kv_precision="int8"))
    assert loaded.facts.decode_step == "native"
    assert loaded.facts.to_dict()["decode_step"] == "native"


def _verify_equals_decodes(model, prompt: list[int], tokens: list[int]) -> None:
    """``verify(tokens)`` through the native step's own verify: the logits and cache of one step per token."""
    from engine.executor.verify import native_rows

    alone, checked = FastRunner(model), FastRunner(model)
    for runner in (alone, checked):
        list(runner.prefill(prompt))
    decoded = torch.cat([alone.decode(token) for token in tokens])
    checked._ensure(len(prompt) + len(tokens))
    native = native_rows(checked, tokens, len(prompt))  # the native call itself, not the Python rows
    assert native is not None and torch.equal(native, decoded)
    checked.crop(len(prompt))
    assert torch.equal(checked.verify(tokens), decoded)  # and the runner's verify takes it
    end = len(prompt) + len(tokens)
    assert torch.equal(checked._kv.k[:, :, :end], alone._kv.k[:, :, :end])
    assert torch.equal(checked._kv.v[:, :, :end], alone._kv.v[:, :, :end])


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_native_verify_gives_each_steps_bits_for_each_family(family_dirs, family, precision):
    """Issue 45: speculation's verify of n tokens as one native call (products on all rows at once, each token's
    attention in C++), bit for bit n native steps: 1 row, a kernel's 4-row chunk and a ragged 9, past the mistral
    model's sliding window."""
    model = load_cpu(family_dirs[family], precision).model
    for rows, seed in ((1, 11), (4, 12), (9, 13)):
        prompt = random_prompt(model.config.vocab_size, 20, seed=seed)
        _verify_equals_decodes(model, prompt, random_prompt(model.config.vocab_size, rows, seed=seed + 100))


def test_native_verify_gives_each_steps_bits_on_the_default_model(default_model_dir):
    """A verify's tokens share each widened KV block (row_ops.h's attend_all): on one thread as one group, and past
    ~16k values cut into slices spread over the threads (a 300-token prompt, 8 and 9 tokens, on 1 and 2 threads)."""
    model = load_cpu(default_model_dir, "int4").model
    _verify_equals_decodes(model, random_prompt(model.config.vocab_size, 30, seed=2),
                           random_prompt(model.config.vocab_size, 12, seed=3))
    threads = torch.get_num_threads()
    try:
        for count in sorted({1, max(2, threads)}):
            torch.set_num_threads(count)
            for rows, seed in ((8, 4), (9, 5)):
                _verify_equals_decodes(model, random_prompt(model.config.vocab_size, 300, seed=seed),
                                       random_prompt(model.config.vocab_size, rows, seed=seed + 100))
    finally:
        torch.set_num_threads(threads)
