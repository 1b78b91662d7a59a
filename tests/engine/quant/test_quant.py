"""Weight-only int8/int4 (engine/quant/quant.py): numerics against dense references, both kernel paths, the
packed-layout detection, and int8/int4 models through the loader, the fast path and the plain path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import torch

from engine.executor.fastpath import FastRunner
from engine.executor.llama_fused import unsupported_reason
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from engine.quant.quant import (Int4Linear, Int8Linear, ProjectionSlice, QuantizedEmbedding, _unpack, int4_codes,
                                 quantize_model)
from engine.executor.runner import ModelRunner


def _weight(out_features: int = 128, in_features: int = 256, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(out_features, in_features, generator=generator).to(torch.bfloat16)


def test_int8_dequantizes_within_half_a_step_of_each_row():
    weight = _weight()
    linear = Int8Linear.from_dense(weight)
    step = weight.float().abs().amax(dim=1, keepdim=True) / 127
    error = (linear.dequantize().float() - weight.float()).abs()
    assert torch.all(error <= step * 0.5 + step * 0.01 + 1e-2 * weight.float().abs())  # bf16 scale rounding
    assert linear.qweight.dtype == torch.int8 and linear.nbytes == 128 * 256 + 128 * 2


def test_int4_dequantizes_within_half_a_step_of_each_group():
    weight = _weight()
    linear = Int4Linear.from_dense(weight, group=32)
    assert linear.can_dequantize, "the packed layout of this CPU's kernel was not recognised"
    groups = weight.float().view(128, 8, 32)
    step = ((groups.amax(-1) - groups.amin(-1)) / 15)[..., None]  # (out, groups, 1)
    error = (linear.dequantize().float().view(128, 8, 32) - groups).abs()
    assert torch.all(error <= step * 0.5 + 0.02 * groups.abs() + 0.02 * step)
    assert linear.nbytes == 128 * 256 // 2 + (256 // 32) * 128 * 2 * 2  # nibbles + bf16 scale and zero


@pytest.mark.parametrize("block", [64, 32])
def test_int4_dequantize_is_bit_identical_to_the_formula_on_unpacked_codes(block, aten_kernels):
    """dequantize() reads the packed bytes column-block-wise (no element-wise transpose); its values must
    equal (q - 8) · scale + zero computed in fp32 and rounded once to bf16 on the codes unpacked row by row,
    for both layouts."""
    weight = _weight(192, 96, seed=3)
    q, scale, zero = int4_codes(weight, 32)
    linear = Int4Linear.from_codes(q, scale, zero, 32)
    if linear.block != block:  # build the other layout's packed bytes by hand from the same codes
        tiles = q.to(torch.uint8).view(192 // block, block, 96).transpose(1, 2)  # (blocks, in, block)
        packed = (tiles[..., :block // 2] | (tiles[..., block // 2:] << 4)).reshape(192, 48).contiguous()
        linear = Int4Linear(packed, linear.scales_and_zeros, 32, 192, 96, block)
    assert torch.equal(_unpack(linear.packed, block, 192, 96), q.to(torch.uint8))
    sz = linear.scales_and_zeros  # (groups, out, 2)
    expected = ((q.view(192, 3, 32).float() - 8) * sz[..., 0].t()[..., None].float()
                + sz[..., 1].t()[..., None].float()).to(torch.bfloat16).view(192, 96)
    dense = linear.dequantize()
    assert dense.shape == (192, 96) and torch.equal(dense, expected)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_kernel_rows_and_dequantized_rows_give_the_same_products(kind):
    weight = _weight()
    linear = Int8Linear.from_dense(weight) if kind == "int8" else Int4Linear.from_dense(weight)
    rows = linear.kernel_rows + 8
    x = torch.randn(rows, 256).to(torch.bfloat16)
    many = linear(x)  # dequantized, then the dense GEMM
    few = torch.cat([linear(x[i:i + 1]) for i in range(x.shape[0])])  # the packed kernel, row by row
    reference = x.float() @ linear.dequantize().float().t()
    scale = reference.abs().max()
    assert (many.float() - reference).abs().max() <= 0.02 * scale
    assert (few.float() - reference).abs().max() <= 0.02 * scale
    assert many.shape == few.shape == (rows, 128)


def test_int4_layout_is_recognised_on_the_avx2_kernels_too():
    """The CPU packing differs by kernel build (64-row blocks on AVX-512, 32 on AVX2): force AVX2."""
    code = ("import torch; from engine.quant.quant import Int4Linear\n"
            "w = torch.randn(192, 64).to(torch.bfloat16); q = Int4Linear.from_dense(w)\n"
            "x = torch.randn(20, 64).to(torch.bfloat16)\n"
            "d = (q(x).float() - torch.cat([q(x[i:i+1]) for i in range(20)]).float()).abs().max().item()\n"
            "print(torch.backends.cpu.get_cpu_capability(), q.block, d < 0.05 * q(x).float().abs().max().item())")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", MIAOHUI_NATIVE="0")  # aten's packing, not the tiles
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-1500:]
    capability, block, agree = result.stdout.split()
    assert capability == "AVX2" and block == "32" and agree == "True"


def test_a_shape_the_kernel_cannot_pack_is_refused(aten_kernels):
    with pytest.raises(ValueError):  # aten's packing (the tiles of engine/quant/tiled.py pad the rows instead)
        Int4Linear.from_dense(_weight(40, 256))  # 40 output rows: not a multiple of 16
    with pytest.raises(ValueError):
        Int4Linear.from_dense(_weight(32, 40))  # 40 input columns: not a multiple of the group


@pytest.fixture(scope="module")
def bf16_tiny(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="bf16"))


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_loader_quantizes_every_projection_and_the_tied_table(tiny_model_dir, bf16_tiny, precision):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision))
    model = loaded.model
    kind = Int8Linear if precision == "int8" else Int4Linear
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        assert isinstance(attn.o_proj, kind) and isinstance(mlp.down_proj, kind)  # or their tiled subclasses
        # q|k|v and gate|up are one quantized product each, the projections slices of it
        for group in ((attn.q_proj, attn.k_proj, attn.v_proj), (mlp.gate_proj, mlp.up_proj)):
            assert all(type(s) is ProjectionSlice and s.fused is group[0].fused for s in group)
            assert isinstance(group[0].fused, kind)
            assert [(s.start, s.end) for s in group] == [(0, group[0].end)] + [
                (a.end, b.end) for a, b in zip(group, group[1:])]
    assert isinstance(model.lm_head, Int8Linear) and isinstance(model.model.embed_tokens, QuantizedEmbedding)
    assert loaded.facts.precision == precision
    assert loaded.facts.weights_bytes < 0.75 * bf16_tiny.facts.weights_bytes
    assert unsupported_reason(model) is None


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_fast_path_and_plain_path_agree_on_a_quantized_model(tiny_model_dir, precision):
    """Same quantized weights through transformers' modules and through the fast path: same greedy tokens."""
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision))
    prompt = list(range(3, 40))
    runs = []
    for runner in (ModelRunner(loaded.model, use_kv_cache=True), FastRunner(loaded.model)):
        logits = None
        for _, logits in runner.prefill(prompt, threading.Event(), chunk=16):
            pass
        tokens = []
        for _ in range(12):
            token = int(logits[0].argmax())
            tokens.append(token)
            logits = runner.decode(token)
        runs.append(tokens)
    assert runs[0] == runs[1]


def test_a_slice_reuses_the_fused_product_only_for_the_same_unchanged_input():
    fused = Int8Linear.from_dense(_weight(96, 64))
    first, second = ProjectionSlice(fused, 0, 64), ProjectionSlice(fused, 64, 96)
    x = torch.randn(2, 64).to(torch.bfloat16)
    reference = fused(x)
    assert torch.equal(first(x), reference[:, :64]) and torch.equal(second(x), reference[:, 64:])
    assert fused.__dict__["_memo"] is None  # the last slice dropped it
    first(x)
    x.mul_(2)  # same tensor object, new contents: the memo must not be used
    assert torch.equal(second(x), fused(x)[:, 64:])
    y = x.clone()
    first(x)
    assert torch.equal(second(y), fused(y)[:, 64:])  # another tensor: computed afresh


def test_quantizing_an_unknown_layout_is_a_value_error():
    with pytest.raises(ValueError):
        quantize_model(torch.nn.Linear(4, 4), "int8")
    with pytest.raises(ValueError):
        quantize_model(torch.nn.Linear(4, 4), "int3")


@pytest.mark.default_model
@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_default_model_answers_paris_in_quantized_weights(default_model_dir, precision):
    result = subprocess.run([sys.executable, "-m", "engine", "chat", "--precision", precision, "--json",
                             "--max-new-tokens", "24", "--temperature", "0",
                             "--prompt", "What is the capital of France?"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-1500:]
    report = json.loads(result.stdout)
    assert "Paris" in report["text"]
    assert report["precision"] == precision
