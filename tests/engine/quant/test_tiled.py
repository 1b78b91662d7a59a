"""The int8-activation kernels (engine/native/q8act.cpp) and their modules (engine/quant/tiled.py): the activation
quantization bit for bit, the products against the same integer math in torch (exact integer sums, the fp32
combination within 1e-6 of the terms' magnitudes) on both instruction-set paths the CPU has, the layouts' round
trips, the modules (kernel rows and prefill), GGUF blocks landing on them, the cache and the off-switches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize

from engine.inputs import LoadSpec
from engine.models.loader import load_model
from engine.native import library as native
from engine.quant import precision, tiled
from engine.quant.gguf_quant import QT, int4_from_blocks
from engine.quant.quant import Int4Linear, Int4SymLinear, Int8Linear, int4_module, int8_module
from engine.quant.tiled import Int4Q8Linear, Int8Q8Linear

RELATIVE = 1e-6  # fp32 combination of exact integer sums, against the sum of the terms' magnitudes


@pytest.fixture(scope="module")
def best_isa() -> int:
    """The best instruction set the ops run with here, the library built first if `make install` has not."""
    native.q8act_isa.cache_clear()
    if not native.library_path().is_file():
        native.build()
    native.q8act_isa.cache_clear()
    isa = native.q8act_isa()
    if isa is None:
        pytest.skip("the int8-activation kernels do not run here (no library, or a CPU without AVX2/FMA/F16C)")
    return isa


@pytest.fixture(params=sorted(native.ISAS.items()), ids=lambda item: item[0])
def isa(request, best_isa) -> int:
    if request.param[1] > best_isa:
        pytest.skip(f"this CPU lacks {request.param[0]}")
    return request.param[1]


def _int4(out_features: int, in_features: int, seed: int, symmetric: bool, group: int = 32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (out_features, in_features), generator=g, dtype=torch.int32)
    scale = torch.randn(out_features, in_features // group, generator=g) * 0.02
    zero = torch.zeros_like(scale) if symmetric else torch.randn(out_features, in_features // group, generator=g) * 0.05
    return q, scale, zero


def _activations(rows: int, in_features: int, seed: int) -> torch.Tensor:
    a = torch.randn(rows, in_features, generator=torch.Generator().manual_seed(seed)) * 3
    a[:, :32] = 0  # an all-zero block: d = 0, its codes 0
    return a


def _within(out: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor) -> bool:
    return bool(((out.double() - expected).abs() <= RELATIVE * bound + 1e-30).all())


def test_activations_are_quantized_as_the_reference_does_bit_for_bit(best_isa):
    a = _activations(5, 544, seed=1)
    a[2, 64:96] = torch.tensor([0.5, -0.5, 1.5, 2.5] * 8) * (127 / 2.5)  # halves: ties round to even
    qa, d, sa = torch.ops.miaohui.q8_quantize(a)
    x = a.view(5, -1, 32)
    expected_d = x.abs().amax(-1) / 127.0
    inverse = torch.where(expected_d > 0, 1.0 / expected_d, torch.zeros_like(expected_d))
    expected = torch.round(x * inverse[..., None])
    assert torch.equal(d, expected_d) and torch.equal(qa.view(5, -1, 32).float(), expected)
    assert torch.equal(sa, expected.sum(-1).int()) and int(qa.abs().max()) == 127


@pytest.mark.parametrize("shape", [(64, 32), (40, 96), (17, 160), (100, 544), (1152, 896), (2048, 8192)])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_int4_products_are_the_integer_math_of_the_reference(isa, shape, rows, symmetric):
    out_features, in_features = shape
    if in_features * out_features > 2_000_000 and rows > 2:
        pytest.skip("one large shape is enough at many rows")
    codes, scales = tiled.pack_int4(*_int4(out_features, in_features, rows, symmetric), 32)
    a = _activations(rows, in_features, seed=7)
    expected, bound = tiled.reference(a, codes, scales, out_features)
    out = torch.ops.miaohui.q4_q8_mm(a, codes, scales, out_features, isa)
    assert out.shape == (rows, out_features) and out.dtype == torch.float32
    assert _within(out, expected, bound)
    b = a.bfloat16()  # bf16 activations: the same sums, the result rounded once to bf16
    assert torch.equal(torch.ops.miaohui.q4_q8_mm(b, codes, scales, out_features, isa),
                       torch.ops.miaohui.q4_q8_mm(b.float(), codes, scales, out_features, isa).bfloat16())


@pytest.mark.parametrize("shape", [(64, 32), (40, 96), (17, 160), (1000, 576), (2048, 2048)])
@pytest.mark.parametrize("rows", [1, 2, 4, 7])
def test_int8_products_are_the_integer_math_of_the_reference(isa, shape, rows):
    out_features, in_features = shape
    g = torch.Generator().manual_seed(rows)
    w = torch.randint(-127, 128, (out_features, in_features), generator=g, dtype=torch.int8)
    w[0, :64] = 127  # the extremes: 127 · ±127 in the sums, and the VNNI path's q + 128 = 255
    w[1, :64] = -127
    scales = (torch.rand(out_features, generator=g) * 0.01).bfloat16()
    tiles = tiled.pack_int8(w)
    a = _activations(rows, in_features, seed=3)
    expected, bound = tiled.reference(a, tiles, scales, out_features)
    assert _within(torch.ops.miaohui.q8_q8_mm(a, tiles, scales, out_features, isa), expected, bound)


@pytest.mark.parametrize("rows", [1, 5, 13, 40])  # one row, a few, more than one group of 12, several groups
@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_both_instruction_sets_give_the_same_bits(best_isa, rows, symmetric):
    """The VNNI tile (12 rows a weight load) and the AVX2 one (4) do the same arithmetic per output, so a model's
    logits do not depend on which one a CPU runs (engine/native/__init__.py's table promises it)."""
    if best_isa < native.ISAS["avx512vnni"]:
        pytest.skip("this CPU has one instruction-set path only")
    codes, scales = tiled.pack_int4(*_int4(100, 544, rows, symmetric), 32)
    a = _activations(rows, 544, seed=11).bfloat16()
    assert torch.equal(torch.ops.miaohui.q4_q8_mm(a, codes, scales, 100, native.ISAS["avx2"]),
                       torch.ops.miaohui.q4_q8_mm(a, codes, scales, 100, native.ISAS["avx512vnni"]))
    w = torch.randint(-127, 128, (100, 544), generator=torch.Generator().manual_seed(rows), dtype=torch.int8)
    row_scales = (torch.rand(100, generator=torch.Generator().manual_seed(rows)) * 0.01).bfloat16()
    tiles = tiled.pack_int8(w)
    assert torch.equal(torch.ops.miaohui.q8_q8_mm(a, tiles, row_scales, 100, native.ISAS["avx2"]),
                       torch.ops.miaohui.q8_q8_mm(a, tiles, row_scales, 100, native.ISAS["avx512vnni"]))


def test_the_layouts_round_trip():
    q, scale, zero = _int4(40, 96, seed=2, symmetric=False, group=96 // 3)
    codes, scales = tiled.pack_int4(q, scale, zero, 32)
    assert codes.shape == (3, 3, 256) and scales.shape == (3, 3, 2, 16) and scales.dtype == torch.float16
    back, s, m = tiled.unpack_int4(codes, scales, 40)
    assert torch.equal(back.int(), q)
    assert torch.equal(s, scale.half().float()) and torch.equal(m, (zero - 8 * scale).half().float())
    q, scale, zero = _int4(48, 128, seed=3, symmetric=True, group=64)  # groups of 64: scales repeated per 32
    codes, scales = tiled.pack_int4(q, scale, zero, 64)
    back, s, m = tiled.unpack_int4(codes, scales, 48)
    assert scales.shape[2] == 1 and torch.equal(back.int(), q)
    assert torch.equal(s, scale.half().float().repeat_interleave(2, 1)) and torch.equal(m, -8 * s)
    w = torch.randint(-127, 128, (33, 64), dtype=torch.int8)
    assert torch.equal(tiled.dense_int8(tiled.pack_int8(w), 33), w)


@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_the_int4_module_runs_few_rows_on_the_kernel_and_many_on_its_dequantized_weight(best_isa, symmetric):
    q, scale, zero = _int4(200, 352, seed=4, symmetric=symmetric)
    module = int4_module(q, scale, zero)
    assert isinstance(module, Int4Q8Linear) and module.symmetric == symmetric and module.isa == best_isa
    groups = 352 // 32
    assert module.nbytes == 13 * groups * 256 + 13 * groups * 16 * 2 * (1 if symmetric else 2)  # 4.5 or 5 bits
    back, s, m = tiled.unpack_int4(module.codes, module.scales, 200)
    dense = (back.float().view(200, groups, 32) * s[..., None] + m[..., None]).view(200, 352)
    assert torch.equal(module.dequantize(), dense.bfloat16())  # q·s + m in fp32, rounded once
    x = _activations(type(module).kernel_rows + 4, 352, seed=5).bfloat16()  # more rows than the aten modules take
    few, many = module(x[:3]), module(x)
    assert torch.equal(few, torch.ops.miaohui.q4_q8_mm(x[:3], module.codes, module.scales, 200, best_isa))
    assert torch.equal(module.bound_kernel()(x[:3]), few)
    reference = x.float() @ dense.t()
    # many rows dequantize (bf16 activations) on every CPU, until a fast runner measures the kernel faster here and
    # moves all rows onto it (engine/executor/prefill_forms.py, tests/engine/executor/test_prefill_forms.py)
    assert torch.equal(many, torch.nn.functional.linear(x, module.dequantize()))
    error = (few.float() - reference[:3]).abs().max() / reference[:3].abs().max()
    assert error < 0.03  # int8 activations: about 1% of the largest output


def test_the_kernels_run_on_torchs_threads_and_give_the_same_bits_on_one_thread_or_all(best_isa):
    """The library is built with OpenMP, so at::parallel_for uses torch's threads (it ran serially before); each
    thread takes whole tiles, so the bits do not depend on how many there are."""
    threads = torch.get_num_threads()
    if threads < 2:
        pytest.skip("one thread here: nothing to share")
    assert torch.ops.miaohui.q8act_threads() == threads
    weight = torch.randn(1000, 576, generator=torch.Generator().manual_seed(9)).bfloat16()
    int8 = int8_module(weight)
    int4 = Int4Q8Linear.from_tiled_codes(*_int4(1000, 576, seed=9, symmetric=False), 32, torch.bfloat16)
    x = _activations(3, 576, seed=9).bfloat16()
    together = [int8(x), int4(x)]
    try:
        torch.set_num_threads(1)
        assert torch.ops.miaohui.q8act_threads() == 1
        alone = [int8(x), int4(x)]
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(together, alone))


def test_the_int8_module_and_the_table_it_shares(best_isa):
    weight = torch.randn(300, 256, generator=torch.Generator().manual_seed(6)).bfloat16()
    module = int8_module(weight)
    assert isinstance(module, Int8Q8Linear)
    plain = Int8Linear(module.qweight, module.scales)  # the same int8 values on aten's kernel
    assert torch.equal(module.dequantize(), plain.dequantize())
    ids = torch.tensor([0, 15, 16, 299, 17])
    assert torch.equal(module.rows(ids), plain.rows(ids)) and torch.equal(module.row(299), plain.row(299))
    x = _activations(2, 256, seed=8).bfloat16()
    reference = plain(x).float()
    assert (module(x).float() - reference).abs().max() < 0.03 * reference.abs().max()
    expected, bound = tiled.reference(x, module.tiles, module.scales, 300)
    assert _within(torch.ops.miaohui.q8_q8_mm(x.float(), module.tiles, module.scales, 300, best_isa), expected, bound)


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q4_1])
def test_gguf_4bit_blocks_land_on_the_tiles_exactly(best_isa, qtype):
    weight = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32)
    raw = quantize(weight, qtype)
    reference = torch.from_numpy(gguf_dequantize(raw, qtype))
    module = int4_module(*int4_from_blocks(raw, qtype))
    assert isinstance(module, Int4Q8Linear) and module.symmetric == (qtype == QT.Q4_0)
    q, s, m = tiled.unpack_int4(module.codes, module.scales, 128)
    # fp16 scales and offsets hold the file's fp16 d (and m) exactly: q·s + m is the file's value in fp32.
    assert torch.equal((q.float().view(128, 8, 32) * s[..., None] + m[..., None]).view(128, 256), reference)


def test_gguf_q8_0_lands_on_the_int8_tiles(best_isa):
    from engine.quant.gguf_quant import dequantize

    raw = quantize(np.random.default_rng(2).standard_normal((64, 128)).astype(np.float32), QT.Q8_0)
    assert isinstance(int8_module(dequantize(raw, QT.Q8_0), torch.bfloat16), Int8Q8Linear)


def test_the_off_switches_give_the_aten_modules(best_isa, aten_kernels):
    q, scale, zero = _int4(64, 128, seed=9, symmetric=True)
    assert type(int4_module(q, scale, zero)) is Int4Linear  # MIAOHUI_NATIVE=0: aten, as before
    assert type(int8_module(torch.randn(32, 64))) is Int8Linear


def test_the_policy_flag_keeps_bf16_activations(best_isa, monkeypatch):
    monkeypatch.setattr(precision, "INT8_ACTIVATIONS", False)
    q, scale, zero = _int4(64, 128, seed=9, symmetric=False)
    assert type(int4_module(q, scale, zero)) is Int4Linear
    assert type(int8_module(torch.randn(32, 64).bfloat16())) is Int8Linear
    assert not isinstance(int4_module(q, scale, torch.zeros_like(zero)), Int4Q8Linear)


def test_fp32_activations_take_the_tiles_for_int8_with_bf16_scales_and_for_int4(best_isa):
    """A model computing in fp32 (a CPU without native bf16) keeps its int8 head on the kernel: each scale rounded
    to bf16 once, which its dense forms use too, and its outputs and rows in fp32."""
    torch.manual_seed(9)
    dense = torch.randn(40, 64)
    plain = Int8Linear.from_dense(dense, torch.float32)
    int8 = int8_module(dense, torch.float32)
    assert isinstance(int8, Int8Q8Linear) and int8.dtype == torch.float32
    assert torch.equal(int8.scales, plain.scales.bfloat16().float()) and torch.equal(int8.kernel_scales,
                                                                                     plain.scales.bfloat16())
    rows = torch.randn(3, 64)
    out = int8(rows)
    assert out.dtype == torch.float32 and int8.rows(torch.tensor([0, 39])).dtype == torch.float32
    assert _within(out, *tiled.reference(rows, int8.tiles, int8.kernel_scales, 40))
    assert torch.equal(int8.dequantize(), plain.qweight.float() * int8.scales[:, None])
    q, scale, zero = _int4(64, 128, seed=9, symmetric=True)
    module = int4_module(q, scale, zero, dtype=torch.float32)
    assert isinstance(module, Int4Q8Linear) and module(torch.randn(1, 128)).dtype == torch.float32
    assert not isinstance(module, Int4SymLinear)


@pytest.mark.parametrize("precision_name", ["int4", "int8"])
def test_a_cached_model_comes_back_in_the_tiles(best_isa, home, tiny_model_dir, precision_name):
    stages: list[str] = []
    first = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision_name))
    second = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision_name),
                        progress=lambda p: stages.append(p.stage))
    assert "quantized weights from the cache" in stages
    kind = Int4Q8Linear if precision_name == "int4" else Int8Q8Linear
    assert isinstance(second.model.model.layers[0].mlp.down_proj, kind)
    assert isinstance(second.model.lm_head, Int8Q8Linear)
    ids = torch.tensor([[5, 17, 42]])
    with torch.inference_mode():
        assert torch.equal(first.model(input_ids=ids).logits, second.model(input_ids=ids).logits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("out,symmetric", [(100, False), (8192, True), (16, True)])
def test_the_native_dense_weight_is_the_torch_forms_bits(dtype, out, symmetric):
    """Int4Q8Linear.dequantize (miaohui::q4_dense, prefill's dense form) against its torch form: equal, bit for bit."""
    if native.q8act_isa() is None:
        pytest.skip("the int8-activation kernels do not run here")
    torch.manual_seed(out)
    inp = 2048 if out == 8192 else 96
    q = torch.randint(0, 16, (out, inp), dtype=torch.uint8)
    scale = torch.rand(out, inp // 32) * 0.01
    zero = -8 * scale if symmetric else torch.randn(out, inp // 32) * 0.01
    codes, scales = tiled.pack_int4(q, scale, zero, 32)
    module = Int4Q8Linear(codes, scales, 32, out, inp, dtype, native.q8act_isa())
    got, want = module.dequantize(), module.dequantize_reference()
    assert got.shape == (out, inp) and torch.equal(got, want)
