"""The native decode step over an 8-bit KV cache (``DecodeStep.step_q8``/``verify_q8``, issue 45) against the Python
step over the same cache (``Int8KVCache``'s writes and ``attend_one`` on the native ops): the same logits and cache
bytes and scales, bit for bit, over 24 steps, for the default model and random-weight families (a Llama with biases,
Qwen2's biases, Qwen3's q/k norms, Mistral's sliding window, Gemma 2's soft cap and Gemma 3), at int4 and int8
weights; speculation's verify rows (native and Python) equal the steps; a batch of 8-bit runners, in one native call
(``DecodeStep.batch_q8``) or as the Python rows, equals each runner's native steps. The ops themselves:
tests/engine/native/test_kv_int8.py."""

from __future__ import annotations

import pytest
import torch

from engine.executor.fastpath import FastRunner
from engine.native import library as native
from tests.engine.executor.test_native_step import same_decodes
from tests.engine.executor.test_native_step import check_batch_against_alone, family_dirs  # noqa: F401 (fixture)
from tests.helpers.family_models import load_cpu
from tests.helpers.reference_forward import random_prompt

pytestmark = pytest.mark.skipif(not (native.decode_ops() and native.int8_kv_ops()),
                                reason="native library not built here (or from older sources), or no AVX2")

FAMILIES = ["llama-biased", "qwen2", "qwen3", "mistral-window", "gemma2", "gemma3"]
STEPS = 24


def _runners(model) -> tuple[FastRunner, FastRunner]:
    """A runner on the native step and one on the Python step, both over an 8-bit cache."""
    native_runner, python_runner = FastRunner(model, kv_precision="int8"), FastRunner(model, kv_precision="int8")
    assert native_runner.native_step_reason is None and native_runner._native is not None
    python_runner._native = None
    return native_runner, python_runner


def _same_cache(a: FastRunner, b: FastRunner, end: int) -> None:
    assert torch.equal(a._kv.kv[:, :, :, :end], b._kv.kv[:, :, :, :end])
    assert torch.equal(a._kv.scale[:, :, :, :end], b._kv.scale[:, :, :, :end])


def _same_decodes(model, prompt: list[int], steps: int) -> None:
    same_decodes(*_runners(model), prompt, steps, _same_cache)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_native_step_over_an_int8_cache_equals_the_python_step(family_dirs, family, precision):  # noqa: F811
    model = load_cpu(family_dirs[family], precision).model
    _same_decodes(model, random_prompt(model.config.vocab_size, 20, seed=5), STEPS)


def test_native_step_over_an_int8_cache_on_the_default_model(default_model_dir):
    model = load_cpu(default_model_dir, "int4").model
    _same_decodes(model, random_prompt(model.config.vocab_size, 30, seed=1), STEPS)


@pytest.mark.parametrize("family", ["llama-biased", "qwen3", "mistral-window", "gemma2"])
@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_verify_rows_over_an_int8_cache_give_each_native_steps_bits(family_dirs, family, precision):  # noqa: F811
    """Speculation's verify of n tokens, as one native call (verify_q8) and as the Python rows, against n native
    steps: logits, int8 rows and scales; 1 row, 4 and a ragged 9, past the mistral model's window."""
    from engine.executor.verify import RowExact, native_rows, verify_rows

    model = load_cpu(family_dirs[family], precision).model
    for rows, seed in ((1, 11), (4, 12), (9, 13)):
        prompt = random_prompt(model.config.vocab_size, 20, seed=seed)
        tokens = random_prompt(model.config.vocab_size, rows, seed=seed + 100)
        alone, python = _runners(model)
        checked = _runners(model)[0]
        for runner in (alone, checked, python):
            list(runner.prefill(prompt))
            runner._ensure(len(prompt) + len(tokens))
        decoded = torch.cat([alone.decode(token) for token in tokens])
        got = native_rows(checked, tokens, len(prompt))  # the native call itself
        assert got is not None and torch.equal(got, decoded)
        _same_cache(checked, alone, len(prompt) + len(tokens))
        assert torch.equal(verify_rows(python, tokens, len(prompt), RowExact()), decoded)
        _same_cache(python, alone, len(prompt) + len(tokens))


@pytest.mark.parametrize("family", ["qwen2", "gemma2"])
@pytest.mark.parametrize("path", ["native", "python"])
def test_a_batch_of_int8_cache_runners_gives_each_native_steps_bits(family_dirs, family, path,  # noqa: F811
                                                                    monkeypatch):
    from engine.executor import batched as batched_module

    if path == "python":
        monkeypatch.setattr(batched_module, "_native_batch", lambda *args: None)
    else:  # the native batch must serve every step: the Python rows are never reached
        monkeypatch.setattr(batched_module, "forward_rows", lambda *args: pytest.fail("the Python batch ran"))
    check_batch_against_alone(load_cpu(family_dirs[family], "int4").model, 4, _same_cache, kv_precision="int8")


def test_the_torch_int8_path_stays_for_comparison_and_keeps_the_python_step(family_dirs, monkeypatch):  # noqa: F811
    """``MIAOHUI_NATIVE_KV=0`` (what the KV bench's "torch attention" runs set): the 8-bit cache's torch operations,
    whose bits are not the native ops', so the runner keeps the Python step; the writes are the same bytes anyway."""
    from engine.native.library import NATIVE_KV_ENV

    model = load_cpu(family_dirs["qwen3"], "int4").model
    prompt = random_prompt(model.config.vocab_size, 12, seed=3)
    native_runner = FastRunner(model, kv_precision="int8")
    monkeypatch.setenv(NATIVE_KV_ENV, "0")
    torch_runner = FastRunner(model, kv_precision="int8")
    assert torch_runner._native is None and NATIVE_KV_ENV in torch_runner.native_step_reason
    for runner in (native_runner, torch_runner):
        list(runner.prefill(prompt))
    _same_cache(native_runner, torch_runner, len(prompt))
    torch.testing.assert_close(torch_runner.decode(5).float(), native_runner.decode(5).float(), atol=0.1, rtol=0.05)
