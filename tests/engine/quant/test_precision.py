"""The precision policy (issue 25): what each load ends up in, pinned on today's decisions before the policy moved
into one ``choose_precision``, and the policy itself on inputs no CPU test could load (a CUDA GPU's free memory).

The loads use the tiny random-weight test model (tests/helpers) and GGUF files written from it; the default
model's own ``auto`` decisions (int4 by its measured agreement, its GGUF's Q4_1 blocks kept) are
tests/engine/quant/test_auto_quant.py's and test_gguf_quant.py's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from engine import cpu
from engine.inputs import LoadSpec
from engine.models.loader import load_model
from engine.models.model import AutoChoice
from engine.quant import precision
from engine.quant.precision import GGUFBlocks, Machine, ModelWeights, PrecisionChoice, Reason, choose_precision
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
        monkeypatch.setattr(precision, "MIN_PARAMS", 0)
    if bars is not None:
        monkeypatch.setattr(precision, "QUALITY_BARS", bars)
    loaded = load_model(LoadSpec(model=str(_source(kind, tiny_model_dir, tmp_path)), precision=asked, device="cpu"))
    float_name = _cpu_float()
    assert loaded.facts.precision == (float_name if expected == FLOAT else expected)
    choice = loaded.facts.auto_choice
    if verdict is None:
        assert choice is None
    else:
        assert choice is not None and choice.precision == (float_name if verdict == FLOAT else verdict)
        assert choice.reference == float_name


def test_the_loader_asks_the_policy_once_and_reports_its_verdict(tiny_model_dir, home, monkeypatch):
    import engine.models.loader as loader

    asked: list[PrecisionChoice] = []

    def counting(*args, **kwargs) -> PrecisionChoice:
        asked.append(choose_precision(*args, **kwargs))
        return asked[-1]

    monkeypatch.setattr(loader, "choose_precision", counting)
    monkeypatch.setattr(precision, "MIN_PARAMS", 0)
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="auto", device="cpu"))
    [choice] = asked
    assert choice.reason is Reason.QUALITY_MET and choice.precision == loaded.facts.precision == "int4"
    assert choice.verdict == loaded.facts.auto_choice and choice.float_name == _cpu_float()


# ---------------------------------------------------------------- the policy alone (no load)

CPU = Machine("cpu", "bf16")
BIG = ModelWeights(precision.MIN_PARAMS, "safetensors")


def test_explicit_precisions_pass_through_everywhere():
    for machine in (CPU, Machine("cuda", "fp16", free_bytes=1)):
        choice = choose_precision("fp32", machine, BIG)
        assert (choice.precision, choice.reason) == ("fp32", Reason.ASKED)


def test_cpu_auto_is_its_float_type_under_the_size_floor_or_without_the_kernel_or_safetensors():
    small = ModelWeights(precision.MIN_PARAMS - 1, "safetensors")
    no_kernel = Machine("cpu", "bf16", int4_kernel=False)
    for machine, weights in ((CPU, small), (Machine("cpu", "fp32"), small), (no_kernel, BIG),
                             (CPU, ModelWeights(precision.MIN_PARAMS, "other"))):
        choice = choose_precision("auto", machine, weights, quality=lambda _f: pytest.fail("measured"))
        assert (choice.precision, choice.reason) == (machine.float_name, Reason.DEVICE_FLOAT)


def test_cpu_auto_over_the_floor_measures_once_and_takes_the_verdict():
    calls: list[str] = []

    def quality(float_name: str) -> AutoChoice:
        calls.append(float_name)
        return AutoChoice("int8", float_name, 0.99, 0.98, (("int4", 0.5),), measured_now=True)

    choice = choose_precision("auto", CPU, BIG, quality)
    assert calls == ["bf16"] and (choice.precision, choice.reason) == ("int8", Reason.QUALITY_MET)
    assert choice.verdict.rejected == (("int4", 0.5),) and "99.0% ≥ 98%" in choice.describe()
    missed = choose_precision("auto", CPU, BIG, lambda f: AutoChoice(f, f, None, None, (("int4", 0.5), ("int8", 0.9))))
    assert (missed.precision, missed.reason) == ("bf16", Reason.QUALITY_MISSED)
    assert missed.describe() == "bf16: no quantized candidate met its quality bar"
    shapes = choose_precision("auto", CPU, BIG, lambda f: AutoChoice(f, f, None, None))  # quant.py refused the shapes
    assert shapes.reason is Reason.QUALITY_MISSED and "cannot take this model's shapes" in shapes.describe()


def test_without_a_measurement_the_fastest_candidate_is_assumed_and_said():
    choice = choose_precision("auto", CPU, BIG)
    assert (choice.precision, choice.reason, choice.bar) == ("int4", Reason.QUALITY_UNMEASURED, 0.90)
    assert choice.describe().startswith("int4: what auto loads on this CPU when its top-1 agreement with bf16 "
                                        "reaches 90%")


def test_a_gguf_keeps_its_blocks_on_a_cpu_only():
    """The callers pass the header's blocks unjudged; the policy alone decides what auto keeps of them."""
    q4 = ModelWeights(precision.MIN_PARAMS, "gguf", GGUFBlocks((("Q4_0", 14),), 2, (), "llama"))
    assert (choose_precision("auto", CPU, q4).precision, choose_precision("auto", CPU, q4).reason) == \
        ("int4", Reason.GGUF_BLOCKS)
    assert choose_precision("int8", CPU, q4).reason is Reason.ASKED
    mixed = GGUFBlocks((("Q4_0", 13), ("Q6_K", 1)), 2, (), "llama")
    assert choose_precision("auto", CPU, ModelWeights(10**9, "gguf", mixed)).reason is Reason.DEVICE_FLOAT
    assert choose_precision("auto", CPU, ModelWeights(10**9, "gguf", None)).reason is Reason.DEVICE_FLOAT
    assert choose_precision("auto", Machine("cuda", "bf16", free_bytes=10**12), q4).precision == "bf16"


def test_cuda_auto_is_nf4_when_16_bit_weights_and_a_fifth_exceed_the_free_memory():
    weights = ModelWeights(10**9, "safetensors")  # 2.4e9 bytes at 16 bits with a fifth
    roomy = choose_precision("auto", Machine("cuda", "bf16", free_bytes=2_400_000_000), weights)
    assert (roomy.precision, roomy.reason) == ("bf16", Reason.DEVICE_FLOAT)
    tight = choose_precision("auto", Machine("cuda", "fp16", free_bytes=2_399_999_999), weights)
    assert (tight.precision, tight.reason, tight.needed_bytes) == ("nf4", Reason.SMALL_GPU, 2_400_000_000)
    assert tight.describe().startswith("nf4: 16-bit weights and a fifth (2,400,000,000 bytes) exceed")


def test_gguf_block_rule():
    layers = 2
    q4 = Counter({"Q4_0": 10, "Q4_K": 4})
    assert precision.gguf_blocks(q4, layers, [], "llama") == "int4"
    assert precision.gguf_blocks(Counter({"Q8_0": 14}), layers, ["F32"], "qwen2") == "int8"
    assert precision.gguf_blocks(Counter({"Q4_0": 13, "Q6_K": 1}), layers, [], "llama") is None  # a mixed file
    assert precision.gguf_blocks(q4, 3, [], "llama") is None  # not seven projections per layer
    assert precision.gguf_blocks(q4, layers, ["Q8_0"], "llama") is None  # a bias in blocks
    assert precision.gguf_blocks(q4, layers, [], "gemma2") is None  # transformers' Gemma processor changes tensors


@pytest.mark.default_model
def test_the_default_models_files_decide_as_its_loads_do(default_model_dir):
    """Without loading: the safetensors are over the size floor (int4 by the bar, measured at the first load:
    tests/engine/quant/test_auto_quant.py), and the GGUF's Q4_1 blocks are kept (test_gguf_quant.py)."""
    from engine.models import safety
    from engine.models.fetch import default_gguf
    from engine.quant.gguf_quant import GGUFFile, block_facts, blocks_precision

    params = safety.check_source(default_model_dir).param_count
    choice = choose_precision("auto", Machine.detect("cpu"), ModelWeights(params, "safetensors"))
    assert (choice.precision, choice.reason) == ("int4", Reason.QUALITY_UNMEASURED)
    gguf_file = default_gguf(default_model_dir)
    if gguf_file is not None:
        file = GGUFFile(gguf_file)
        assert blocks_precision(file) == "int4"
        choice = choose_precision("auto", Machine.detect("cpu"), ModelWeights(params, "gguf", block_facts(file)))
        assert (choice.precision, choice.reason) == ("int4", Reason.GGUF_BLOCKS)
