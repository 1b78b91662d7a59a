"""The precision policy (issue 25): what each load ends up in, pinned on today's decisions before the policy moved
into one ``choose_precision``, and the policy itself on inputs no CPU test could load (a CUDA GPU's free memory).

The loads use the tiny random-weight test model (tests/helpers) and GGUF files written from it; the default
model's own ``auto`` decisions (int4 by its measured agreement, its GGUF's Q4_1 blocks kept) are
tests/engine/quant/test_auto_quant.py's and test_gguf_quant.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import cpu
from engine.inputs import LoadSpec
from engine.models.loader import load_model
from engine.quant import auto_quant
from tests.engine._local_models import write_llama_gguf

FLOAT = "float"  # the CPU's float type: bf16 where native, else fp32


def _cpu_float() -> str:
    return "bf16" if cpu.native_bf16() else "fp32"


def _source(kind: str, tiny_model_dir: Path, tmp_path: Path) -> Path:
    if kind == "safetensors":
        return tiny_model_dir
    projections = kind.removeprefix("gguf-")
    return write_llama_gguf(tiny_model_dir, tmp_path / f"tiny.{projections}.gguf", projections,
                            "Q8_0" if projections != "Q5_0" else "F32")


# (source, asked, size floor lowered so the quality bar applies, bars) → (precision, auto's verdict's precision)
DECISIONS = [
    ("safetensors", "auto", False, None, FLOAT, None),  # under MIN_PARAMS: the float type, no bar
    ("safetensors", "fp32", False, None, "fp32", None),
    ("safetensors", "int8", False, None, "int8", None),
    ("safetensors", "int4", True, None, "int4", None),  # asked for: no bar even where it would apply
    ("safetensors", "auto", True, None, "int4", "int4"),  # the bar applies: int4 meets its 90%
    ("safetensors", "auto", True, {"int4": 1.01, "int8": 0.0}, "int8", "int8"),  # int4 misses: the next one
    ("safetensors", "auto", True, {"int4": 1.01, "int8": 1.01}, FLOAT, FLOAT),  # both miss: the float type
    ("gguf-Q4_1", "auto", False, None, "int4", None),  # a GGUF keeps its 4-bit blocks
    ("gguf-Q4_1", "auto", True, None, "int4", None),  # ... and never weighs the bar
    ("gguf-Q8_0", "auto", False, None, "int8", None),
    ("gguf-Q5_0", "auto", False, None, FLOAT, None),  # no kernel of its own: dequantized to the float type
    ("gguf-Q4_1", "fp32", False, None, "fp32", None),
]


@pytest.mark.parametrize("kind, asked, lowered, bars, expected, verdict", DECISIONS)
def test_each_load_ends_in_todays_precision(tiny_model_dir, tmp_path, home, monkeypatch, kind, asked, lowered, bars,
                                            expected, verdict):
    if lowered:
        monkeypatch.setattr(auto_quant, "MIN_PARAMS", 0)
    if bars is not None:
        monkeypatch.setattr(auto_quant, "QUALITY_BARS", bars)
    loaded = load_model(LoadSpec(model=str(_source(kind, tiny_model_dir, tmp_path)), precision=asked, device="cpu"))
    float_name = _cpu_float()
    assert loaded.facts.precision == (float_name if expected == FLOAT else expected)
    choice = loaded.facts.auto_choice
    if verdict is None:
        assert choice is None
    else:
        assert choice is not None and choice.precision == (float_name if verdict == FLOAT else verdict)
        assert choice.reference == float_name
