"""The CPU capability probe and its override (engine/cpu.py): the answer the precision and upcast rules act on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import cpu
from engine.errors import BadInputError
from engine.executor.fastpath import FastRunner
from engine.models.loader import load_model
from engine.quant.precision import Machine, ModelWeights, choose_precision, device_float_name
from engine.inputs import LoadSpec


def test_hardware_probe_matches_the_cpu_flags(monkeypatch):
    monkeypatch.delenv(cpu.OVERRIDE_ENV, raising=False)
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo to compare with")
    flags = set(cpuinfo.read_text().split())
    assert cpu.hardware_native_bf16() == bool(flags & {"avx512_bf16", "amx_bf16"})
    assert cpu.native_bf16() == cpu.hardware_native_bf16()


@pytest.mark.parametrize("raw, forced", [("1", True), ("true", True), ("0", False), ("off", False),
                                         ("", None), ("auto", None)])
def test_override_values(monkeypatch, raw, forced):
    monkeypatch.setenv(cpu.OVERRIDE_ENV, raw)
    assert cpu.forced_native_bf16() is forced
    expected = cpu.hardware_native_bf16() if forced is None else forced
    assert cpu.native_bf16() is expected and (device_float_name("cpu") == "bf16") is expected


def test_a_misspelt_override_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv(cpu.OVERRIDE_ENV, "maybe")
    with pytest.raises(BadInputError, match=cpu.OVERRIDE_ENV):
        cpu.native_bf16()


@pytest.mark.parametrize("forced", [True, False])
def test_auto_precision_follows_the_capability(monkeypatch, forced):
    monkeypatch.setenv(cpu.OVERRIDE_ENV, "1" if forced else "0")
    small = ModelWeights(10**6, "safetensors")  # under the quality bar's size floor: the float rule alone
    assert choose_precision("auto", Machine.detect("cpu"), small).precision == ("bf16" if forced else "fp32")
    assert choose_precision("fp16", Machine.detect("cpu"), small).precision == "fp16"  # explicit: as asked


@pytest.mark.parametrize("forced", [True, False])
def test_gemm_capability_follows_the_override_for_16_bit_types_only(monkeypatch, forced):
    monkeypatch.setenv(cpu.OVERRIDE_ENV, "1" if forced else "0")
    assert cpu.native_gemm(torch.float32) is True
    assert cpu.native_gemm(torch.bfloat16) is forced
    assert cpu.native_gemm(torch.float16) is forced


@pytest.mark.parametrize("forced", [True, False])
def test_fast_path_upcasts_bf16_prefill_only_without_native_bf16(monkeypatch, tiny_model_dir, forced):
    """Both branches on one machine: the capability decides the upcast. (That both give logits within bf16
    rounding of transformers' is tests/engine/executor/test_fastpath.py's bf16 test, run with the upcast on and off.)"""
    monkeypatch.setenv(cpu.OVERRIDE_ENV, "1" if forced else "0")
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="bf16"))
    runner = FastRunner(loaded.model)
    assert runner._upcast_prefill is (not forced)
    fp32 = FastRunner(load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32")).model)
    assert fp32._upcast_prefill is False  # fp32 never needs it
