"""The fit estimate with an 8-bit KV cache: its KV term is the int8 cache's bytes (1 byte per element plus a 2-byte
scale per KV head and position), for the chosen precision and every row of the per-precision table, and equals what
a model loaded with ``kv_precision="int8"`` measures after a reply."""

from __future__ import annotations

import pytest

from engine.errors import BadInputError
from engine.events import Finished, Message
from engine.generate.session import ChatSession
from engine.inputs import KV_SCALE_BYTES, LoadSpec, SamplingConfig
from engine.library.fit import Memory, architecture_of, estimate
from engine.models.loader import load_model

PLENTY = Memory("cpu", 64 << 30, "test")


def test_the_kv_term_uses_the_chosen_kv_precision(tiny_model_dir):
    arch = architecture_of(tiny_model_dir)  # 2 layers, 2 KV heads, head_dim 16
    dense = estimate(arch, model="tiny", context=128, precision="bf16", memory=PLENTY)
    int8 = estimate(arch, model="tiny", context=128, precision="bf16", memory=PLENTY, kv_precision="int8")
    assert int8.kv_bytes_per_token == 2 * 2 * 2 * (16 + KV_SCALE_BYTES) == 144
    assert int8.kv_bytes == 128 * 144 and dense.kv_bytes == 128 * 256
    assert int8.weights_bytes == dense.weights_bytes and int8.total_bytes < dense.total_bytes
    assert "int8 KV" in int8.kv_formula and "2-byte scale" in int8.kv_formula and f"{int8.kv_bytes:,}" in int8.kv_formula
    assert {p.kv_bytes_per_token for p in int8.per_precision} == {144}  # whatever the weights' precision
    with pytest.raises(BadInputError, match="unknown KV cache precision"):
        estimate(arch, model="tiny", memory=PLENTY, kv_precision="fp8")


def test_the_estimate_equals_what_an_int8_cache_measures(tiny_model_dir):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu", kv_precision="int8"))
    est = estimate(architecture_of(tiny_model_dir), model="tiny", precision="fp32", memory=PLENTY,
                   kv_precision="int8")
    assert est.kv_bytes_per_token == loaded.facts.kv_bytes_per_token
    events = list(ChatSession(loaded).generate([Message("user", "Hello")], SamplingConfig(temperature=0.0,
                                                                                         max_new_tokens=5)))
    metrics = next(e for e in events if isinstance(e, Finished)).metrics
    cached = metrics.context_tokens - 1  # the last token is never fed back
    assert metrics.kv_cache_bytes == est.kv_bytes_per_token * cached
