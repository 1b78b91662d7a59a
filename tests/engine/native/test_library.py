"""The native library's build and loading (engine/native/library.py), and its symmetric int4 kernel
(engine/native/int4_sym.cpp) against aten's int4 kernel, bit for bit,
and the modules that choose between them (engine/quant/quant.py: Int4SymLinear, Int4Linear)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.native import library as native
from engine.quant import precision
from engine.quant.quant import Int4Linear, Int4SymLinear


@pytest.fixture(scope="module")
def op():
    """The native op, built here first if `make install` has not (a test run on a fresh tree)."""
    native.int4_sym.cache_clear()
    if not native.library_path().is_file():
        native.build()
    native.int4_sym.cache_clear()
    if not hasattr(torch.ops.miaohui, "int4_sym_mm"):
        torch.ops.load_library(str(native.library_path()))
    if not torch.ops.miaohui.int4_sym_available() or torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("the native kernel reads aten's AVX-512 packing: this CPU or torch build has none")
    found = native.int4_sym()
    assert found is not None
    return found


@pytest.fixture(autouse=True)
def bf16_activations(monkeypatch):
    """These tests are about the exact bf16-activation kernels: the int8-activation ones (engine/quant/tiled.py),
    which the policy prefers, are switched off by the policy's own flag."""
    monkeypatch.setattr(precision, "INT8_ACTIVATIONS", False)


def _weight(out_features: int, in_features: int, seed: int, group: int = 32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (out_features, in_features), generator=g, dtype=torch.int32)
    scale = torch.randn(out_features, in_features // group, generator=g) * 0.02  # signed, as Q4_0's d is
    return q, scale


@pytest.mark.parametrize("shape", [(64, 32), (1152, 896), (3072, 2048), (2048, 8192), (192, 4864)])
@pytest.mark.parametrize("rows", [1, 2, 5])
def test_native_product_equals_aten_with_zero_points_bit_for_bit(op, shape, rows):
    out_features, in_features = shape
    q, scale = _weight(out_features, in_features, seed=rows)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    scale = scale.bfloat16()
    sz = torch.stack([scale.t(), torch.zeros_like(scale.t())], dim=-1).contiguous()  # (groups, out, 2)
    blocked = scale.view(out_features // 64, 64, -1).transpose(1, 2).contiguous()
    a = torch.randn(rows, in_features, generator=torch.Generator().manual_seed(7)).bfloat16() * 3
    expected = torch.ops.aten._weight_int4pack_mm_for_cpu(a, packed, 32, sz)
    assert torch.equal(op(a, packed, blocked, 32), expected)


def test_q4_0_codes_become_the_native_module_and_compute_what_aten_does(op):
    q, scale = _weight(256, 512, seed=3)
    zero = torch.zeros_like(scale)
    sym = Int4Linear.from_codes(q, scale, zero)
    assert isinstance(sym, Int4SymLinear)
    # The same codes through aten: an Int4Linear with its zeros, built as the cache or MIAOHUI_NATIVE=0 would.
    aten = Int4Linear(sym.packed, sym.scales_and_zeros, 32, 256, 512, sym.block)
    assert sym.nbytes < aten.nbytes  # scales only: 4.5 bits per weight instead of 5
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(1)).bfloat16()
    for rows in (x[:1], x):
        assert torch.equal(sym(rows), aten(rows))
        assert torch.equal(sym.bound_kernel()(rows), aten.bound_kernel()(rows))
    assert torch.equal(sym.dequantize(), aten.dequantize())  # prefill's dense copy, many rows
    many = torch.randn(200, 512, generator=torch.Generator().manual_seed(2)).bfloat16()
    assert torch.equal(sym(many), aten(many))


def test_weights_with_zero_points_stay_on_aten(op):
    q, scale = _weight(128, 256, seed=4)
    module = Int4Linear.from_codes(q, scale, scale * 0.5)
    assert type(module) is Int4Linear


def test_disabled_native_kernel_falls_back_to_aten(monkeypatch):
    monkeypatch.setenv("MIAOHUI_NATIVE", "0")
    native.int4_sym.cache_clear()
    try:
        assert native.int4_sym() is None
        q, scale = _weight(128, 256, seed=5)
        assert type(Int4Linear.from_codes(q, scale, torch.zeros_like(scale))) is Int4Linear
    finally:
        native.int4_sym.cache_clear()


def test_a_library_that_is_missing_or_broken_is_a_reason_not_an_error(tmp_path):
    assert "not built" in (native.load(tmp_path / "miaohui_native.so") or "")
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not a shared library")
    assert "failed to load" in (native.load(broken) or "")


def test_a_library_older_than_a_source_is_named_with_the_sources_changed_since(tmp_path):
    import os

    built, source, header = tmp_path / "miaohui_native.so", tmp_path / "q8act.cpp", tmp_path / "row_ops.h"
    for path in (source, header, built):
        path.write_text("")
    os.utime(source, (1_000, 1_000))
    os.utime(header, (3_000, 3_000))
    os.utime(built, (2_000, 2_000))
    assert native.older_sources(built, tmp_path) == ["row_ops.h"]
    assert native.older_sources(tmp_path / "missing.so", tmp_path) == []


def test_only_the_library_of_its_own_name_and_folder_is_loaded():
    """An older tree built ``engine/quant/build/miaohui_int4.so`` with the same ops: loading it beside this one would
    register them twice, so the loader's one path is this package's build folder and this library's name."""
    path = native.library_path()
    assert path.name == "miaohui_native.so" and path.parent == Path(native.__file__).parent / "build"
    assert all(source.parent == path.parent.parent and source.is_file() for source in native.SOURCES)
