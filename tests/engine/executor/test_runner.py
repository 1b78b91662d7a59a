"""ModelRunner on the tiny model: chunked prefill, cache reuse and crop, no-cache mode, measured KV bytes."""

from __future__ import annotations

import threading

import pytest
import torch

from engine.models.loader import load_model

from engine.inputs import LoadSpec
from engine.executor.runner import ModelRunner
from engine.executor.runners import make_runner


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


@pytest.fixture(scope="module")
def ids(loaded):
    text = "The KV cache stores keys and values so decode does not recompute them. 秒回的秘密"
    return loaded.tokenizer.encode(text, add_special_tokens=False)


def _last(steps):
    return list(steps)[-1]


def _full_logits(loaded, ids):
    """Reference: one forward over the whole sequence, no cache at all."""
    with torch.inference_mode():
        return loaded.model(input_ids=torch.tensor([ids]), use_cache=False).logits[:, -1, :]


def test_chunked_prefill_equals_one_forward(loaded, ids):
    runner = make_runner(loaded, use_kv_cache=True)
    steps = list(runner.prefill(ids, chunk=5))
    assert [done for done, _ in steps] == list(range(5, len(ids), 5)) + [len(ids)]
    assert all(logits is None for _, logits in steps[:-1])
    torch.testing.assert_close(steps[-1][1], _full_logits(loaded, ids), rtol=1e-4, atol=1e-5)
    assert runner.cached_ids == tuple(ids) and runner.cached_len == len(ids)


def test_reused_and_cropped_cache_give_the_same_next_token_logits(loaded, ids):
    runner = make_runner(loaded)
    half = len(ids) // 2
    _last(runner.prefill(ids[:half]))
    _, logits = _last(runner.prefill(ids[half:]))  # a second turn: only the new tokens computed
    reference = _full_logits(loaded, ids)
    assert torch.allclose(logits, reference, rtol=1e-4, atol=1e-5)
    # Regenerate/edit: crop back to a prefix and recompute the rest.
    runner.crop(half - 3)
    assert runner.cached_len == half - 3 and runner.cached_ids == tuple(ids[: half - 3])
    _, logits = _last(runner.prefill(ids[half - 3:]))
    assert torch.allclose(logits, reference, rtol=1e-4, atol=1e-5)


def test_decode_with_and_without_cache_gives_the_same_logits(loaded, ids):
    cached, uncached = make_runner(loaded, True), make_runner(loaded, False)
    _, a = _last(cached.prefill(ids, chunk=7))
    _, b = _last(uncached.prefill(ids, chunk=7))
    for _ in range(6):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        token = int(a.argmax())
        a, b = cached.decode(token), uncached.decode(token)
    assert uncached.cached_len == 0 and uncached.kv_bytes() == (0, 0)  # no cache is held at all


def test_measured_kv_bytes_equal_the_formula(loaded, ids):
    facts = loaded.facts
    per_token = 2 * facts.layers * facts.kv_heads * facts.head_dim * 4  # fp32
    assert facts.kv_bytes_per_token == per_token
    # The plain runner (DynamicCache) allocates exactly what it holds; a crop keeps the buffer.
    runner = ModelRunner(loaded.model)
    _last(runner.prefill(ids, chunk=8))
    for token in (5, 6, 7):
        runner.decode(token)
    filled, allocated = runner.kv_bytes()
    assert filled == allocated == per_token * (len(ids) + 3)
    runner.crop(10)
    filled, allocated = runner.kv_bytes()
    assert filled == per_token * 10
    assert allocated == per_token * (len(ids) + 3)  # a crop is a view: the old buffer is still held


def test_fast_runner_filled_kv_bytes_equal_the_formula(loaded, ids):
    # make_runner may return the fast path's static cache: its filled part follows the formula,
    # its allocation is fixed up front and never smaller.
    per_token = loaded.facts.kv_bytes_per_token
    runner = make_runner(loaded)
    _last(runner.prefill(ids, chunk=8))
    for token in (5, 6, 7):
        runner.decode(token)
    filled, allocated = runner.kv_bytes()
    assert filled == per_token * (len(ids) + 3)
    assert allocated >= filled
    runner.crop(10)
    assert runner.kv_bytes()[0] == per_token * 10


def test_cancel_between_prefill_chunks_keeps_a_valid_partial_cache(loaded, ids):
    runner = make_runner(loaded)
    cancel = threading.Event()
    seen = []
    for done, logits in runner.prefill(ids, cancel, chunk=4):
        seen.append(done)
        cancel.set()
    assert seen == [4] and runner.cached_len == 4
    _, logits = _last(runner.prefill(ids[4:]))  # the partial prefill is reused, not thrown away
    assert torch.allclose(logits, _full_logits(loaded, ids), rtol=1e-4, atol=1e-5)


def test_an_interrupted_forward_resets_the_cache_before_the_next_use(loaded, ids):
    class Boom(RuntimeError):
        pass

    class FailOnce:
        """The real model, except that one chosen forward raises after running (cache half-updated)."""

        def __init__(self, model):
            self.model, self.fail = model, True

        def __call__(self, **kwargs):
            out = self.model(**kwargs)
            if self.fail:
                self.fail = False
                raise Boom("injected")
            return out

        def __getattr__(self, name):
            return getattr(self.model, name)

    runner = ModelRunner(loaded.model)
    _last(runner.prefill(ids[:10]))
    runner.model = FailOnce(loaded.model)
    with pytest.raises(Boom):
        runner.decode(ids[10])
    assert runner.cached_len == 10  # the id was not recorded…
    runner.crop(10)  # …and the next use notices the half-written step and starts over
    assert runner.cached_len == 0
    _, logits = _last(runner.prefill(ids))
    assert torch.allclose(logits, _full_logits(loaded, ids), rtol=1e-4, atol=1e-5)
