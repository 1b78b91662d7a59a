"""Which precision a load uses: the one policy, ``choose_precision``, asked once per load by the loader
(engine/models/loader.py) and, without reading a weight, by the fit estimate (engine/library/fit.py).

An explicit precision is used as asked. ``auto``:

- on a CUDA GPU: its float type (bf16, or fp16 where bf16 is not native) when 16-bit weights plus a fifth (for
  activations, KV cache and allocator slack) fit its free memory, else nf4 (bitsandbytes);
- on a CPU, a GGUF: its blocks kept when every projection's maps exactly onto an int kernel (Q4_0/Q4_1/Q4_K →
  int4, Q8_0 → int8) in a layout the block loader knows (``gguf_blocks`` over the header's ``GGUFBlocks``), else the
  CPU's float type (transformers dequantizes);
- on a CPU, safetensors of at least ``MIN_PARAMS`` parameters, with torch's CPU int4 kernel: the fastest of
  int4/int8 whose teacher-forced top-1 agreement with the float model meets its bar (``QUALITY_BARS``), else
  the float type. Smaller models stay float: their weights fit in the CPU's caches, so fewer bytes buy nothing.
  The verdict needs the float weights in memory (engine/quant/auto_quant.py measures it once per model and
  remembers it): the loader passes ``quality``; without it (a fit estimate) the choice is the fastest
  candidate, unmeasured, and says so;
- on a CPU otherwise: bf16 where the CPU computes it natively (engine/cpu.py), else fp32.

Owns these rules, ``PrecisionChoice`` (the precision, a typed ``Reason``, the values it rests on, the quality
verdict), ``AutoChoice`` (that verdict, which a loaded model's facts carry) and the GGUF block rule. Not measuring
quality (engine/quant/auto_quant.py), quantizing (engine/quant/quant.py, gguf_quant.py) nor loading. Imports no
torch: the machine's facts come in ``Machine`` (``Machine.detect`` asks torch, lazily).
"""

from __future__ import annotations

import enum
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable

QUALITY_BARS = {"int4": 0.90, "int8": 0.98}  # the least top-1 agreement with the float model, fastest first
MIN_PARAMS = 50_000_000
# int4/int8 decode products quantize their activations to int8 per block of 32 (llama.cpp's contract), where the
# native kernels run (engine/quant/tiled.py); bf16/fp32 stay exact. On by default: on the default model its
# teacher-forced agreement with bf16-activation int4 and its perplexity hold (docs/BENCHMARK.md).
INT8_ACTIVATIONS = True
CUDA_HEADROOM = 1.2  # 16-bit weights plus a fifth must fit a GPU's free memory for its float type
INT4_BLOCKS = frozenset({"Q4_0", "Q4_1", "Q4_K"})  # kept as int4, codes unchanged (engine/quant/gguf_quant.py)
INT8_BLOCKS = frozenset({"Q8_0"})  # kept as int8, re-scaled per row
GGUF_PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
_FLOAT_TYPES = frozenset({"F32", "F16", "BF16"})


class Reason(enum.Enum):
    """Why a load uses its precision."""

    ASKED = "asked"  # an explicit precision
    DEVICE_FLOAT = "device float"  # auto: the device's float type (no rule below applied)
    SMALL_GPU = "small gpu"  # auto on CUDA: 16-bit weights would not fit its free memory, so nf4
    GGUF_BLOCKS = "gguf blocks"  # auto on a CPU: a GGUF's Q4/Q8 blocks kept as they are
    QUALITY_MET = "quality met"  # auto on a CPU: the fastest of int4/int8 meeting its agreement bar
    QUALITY_MISSED = "quality missed"  # auto on a CPU: no candidate met its bar (or none could be quantized)
    QUALITY_UNMEASURED = "quality unmeasured"  # a fit estimate: the fastest candidate, its bar not measured yet


@dataclass(frozen=True)
class AutoChoice:
    """Why ``auto`` picked a quantized precision on a CPU (engine/quant/auto_quant.py).

    ``agreement`` is the teacher-forced top-1 agreement with the float model on the fixed quality text,
    ``bar`` the least ``precision`` had to reach; ``rejected`` the faster candidates that missed their bar,
    as (precision, agreement). ``measured_now`` is False when the verdict was remembered from an earlier load.
    """

    precision: str  # int4 | int8 | the float type when every candidate missed its bar
    reference: str  # the float type it was compared with: bf16 | fp32
    agreement: float | None  # None when no candidate met its bar
    bar: float | None
    rejected: tuple[tuple[str, float], ...] = ()
    measured_now: bool = False


@dataclass(frozen=True)
class Machine:
    """What the policy needs to know of the device a model is loaded on."""

    device: str  # "cpu" | "cuda"
    float_name: str  # the type it computes fastest: bf16 | fp16 | fp32
    free_bytes: int | None = None  # CUDA: free memory now (None on a CPU)
    int4_kernel: bool = True  # torch has the CPU int4 kernel (``aten._weight_int4pack_mm_for_cpu``)

    @classmethod
    def detect(cls, device: str, free_bytes: int | None = None) -> Machine:
        """This machine's ``device`` as torch sees it (imports torch). ``free_bytes`` overrides the GPU's."""
        import torch  # lazy: the fit estimate uses the policy without torch

        if device == "cuda" and free_bytes is None:
            free_bytes = int(torch.cuda.mem_get_info()[0])
        return cls(device, device_float_name(device), free_bytes if device == "cuda" else None,
                   hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"))

    @classmethod
    def assumed(cls, device: str, free_bytes: int | None = None) -> Machine:
        """``detect`` when this process already has torch, else a CPU's (or GPU's) bf16 with the int4 kernel
        (what the torch Miaohui installs has): what the fit estimate judges without importing torch, or for a GPU
        this process has none of."""
        torch = sys.modules.get("torch")
        # A GPU this process cannot see (a fit judged for another machine's memory) is judged as a typical one.
        if torch is not None and (device != "cuda" or torch.cuda.is_available()):
            return cls.detect(device, free_bytes)
        return cls(device, "bf16", free_bytes if device == "cuda" else None, True)


@dataclass(frozen=True)
class ModelWeights:
    """What the policy needs to know of a model's files, none of its weights read."""

    params: int  # the parameter count (or estimate)
    format: str  # "safetensors" | "gguf" | "other"
    gguf: GGUFBlocks | None = None  # a GGUF's projection blocks as its header lists them; the rule decides here


@dataclass(frozen=True)
class GGUFBlocks:
    """What a GGUF's header says of its decoder projections, read and not judged: the callers (the loader from the
    file, the fit estimate from its ``Architecture``) pass these, and only ``choose_precision`` applies the block rule
    (``gguf_blocks``), so what ``auto`` keeps for a GGUF is decided in one place."""

    projection_types: tuple[tuple[str, int], ...]  # type name → count over every layer's seven projections
    layers: object  # the header's block count, as read (the rule checks it)
    block_biases: tuple[str, ...]  # the types of the ``blk.*`` projection biases
    architecture: str

    def kept(self) -> str | None:
        """The int kernel these blocks map onto as they are (int4 | int8), or None: ``gguf_blocks``."""
        return gguf_blocks(Counter(dict(self.projection_types)), self.layers, self.block_biases, self.architecture)


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a load uses and why; ``verdict`` is ``auto``'s quality verdict when it was weighed."""

    precision: str
    reason: Reason
    float_name: str  # the float type the weights are read in (and quantized from, or compared with)
    verdict: AutoChoice | None = None
    needed_bytes: int | None = None  # CUDA auto: 16-bit weights plus a fifth
    free_bytes: int | None = None  # CUDA auto: the GPU's free memory
    bar: float | None = None  # QUALITY_UNMEASURED: the agreement the candidate must reach at the first load

    def describe(self) -> str:
        """One line for people: the precision and why."""
        if self.reason is Reason.ASKED:
            return f"{self.precision}: asked for"
        if self.reason is Reason.SMALL_GPU:
            return (f"nf4: 16-bit weights and a fifth ({self.needed_bytes:,} bytes) exceed the GPU's "
                    f"{self.free_bytes:,} free")
        if self.reason is Reason.GGUF_BLOCKS:
            return f"{self.precision}: auto keeps the GGUF's blocks as they are"
        if self.reason is Reason.QUALITY_UNMEASURED:
            return (f"{self.precision}: what auto loads on this CPU when its top-1 agreement with {self.float_name} "
                    f"reaches {self.bar:.0%} (measured at the first load; else int8 or {self.float_name})")
        if self.reason is Reason.QUALITY_MET and self.verdict is not None and self.verdict.agreement is not None:
            return (f"{self.precision}: auto's top-1 agreement with {self.float_name} "
                    f"{self.verdict.agreement:.1%} ≥ {self.verdict.bar:.0%}")
        if self.reason is Reason.QUALITY_MISSED and self.verdict is not None and not self.verdict.rejected:
            return f"{self.precision}: the int kernels cannot take this model's shapes"
        if self.reason is Reason.QUALITY_MISSED:
            return f"{self.precision}: no quantized candidate met its quality bar"
        return f"{self.precision}: auto's float type for this device"


Quality = Callable[[str], AutoChoice]  # the float type → auto's verdict, measured on the loaded float weights


def choose_precision(asked: str, machine: Machine, weights: ModelWeights, quality: Quality | None = None
                     ) -> PrecisionChoice:
    """The precision a load of ``weights`` on ``machine`` uses when ``asked`` (see the module docstring).

    ``quality`` is called at most once, only where ``auto``'s bar applies: it loads the float weights, measures
    the candidates and returns the verdict (the loader's). Without it the bar's first candidate is assumed."""
    float_name = machine.float_name
    if asked != "auto":
        return PrecisionChoice(asked, Reason.ASKED, float_name)
    if machine.device == "cuda":
        needed = int(weights.params * 2 * CUDA_HEADROOM)
        free = machine.free_bytes if machine.free_bytes is not None else 0
        if needed <= free:
            return PrecisionChoice(float_name, Reason.DEVICE_FLOAT, float_name, needed_bytes=needed, free_bytes=free)
        return PrecisionChoice("nf4", Reason.SMALL_GPU, float_name, needed_bytes=needed, free_bytes=free)
    if machine.device != "cpu":
        return PrecisionChoice(float_name, Reason.DEVICE_FLOAT, float_name)
    if weights.format == "gguf":
        kept = weights.gguf.kept() if weights.gguf is not None else None
        if kept is not None:
            return PrecisionChoice(kept, Reason.GGUF_BLOCKS, float_name)
        return PrecisionChoice(float_name, Reason.DEVICE_FLOAT, float_name)
    if not quality_applies(machine, weights):
        return PrecisionChoice(float_name, Reason.DEVICE_FLOAT, float_name)
    if quality is None:
        first, bar = next(iter(QUALITY_BARS.items()))
        return PrecisionChoice(first, Reason.QUALITY_UNMEASURED, float_name, bar=bar)
    verdict = quality(float_name)
    reason = Reason.QUALITY_MISSED if verdict.precision == verdict.reference else Reason.QUALITY_MET
    return PrecisionChoice(verdict.precision, reason, float_name, verdict)


def quality_applies(machine: Machine, weights: ModelWeights) -> bool:
    """Whether ``auto`` weighs int4/int8 by their quality: a CPU with the int4 kernel, plain safetensors, at least
    ``MIN_PARAMS`` parameters."""
    return (machine.device == "cpu" and machine.int4_kernel and weights.format == "safetensors"
            and weights.params >= MIN_PARAMS)


def gguf_blocks(projection_types: Counter, layers: object, block_biases: Iterable[str], architecture: str
                ) -> str | None:
    """The int kernel a GGUF's projection blocks map onto as they are, or None: int4 when every projection
    (``projection_types``: type name → count over every layer's seven) is Q4_0/Q4_1/Q4_K, int8 when every one
    is Q8_0. Only for the layout the block loader and the fast path know: seven projections in each of
    ``layers``, their biases (``block_biases``: the types of the ``blk.*`` projection biases) in a float type,
    and a transformers tensor processor that at most reorders rows."""
    types = set(projection_types)
    if not (isinstance(layers, int) and layers > 0 and sum(projection_types.values()) == len(GGUF_PROJECTIONS) * layers
            and set(block_biases) <= _FLOAT_TYPES and types):
        return None
    kept = "int4" if types <= INT4_BLOCKS else "int8" if types <= INT8_BLOCKS else None
    return kept if kept is not None and _rows_only_processor(architecture) else None


def _rows_only_processor(architecture: str) -> bool:
    # transformers' GGUF tensor processors: only the default and Llama's (q/k rows permuted) keep a block's
    # rows as they are. Asked only for a file whose every projection is Q4/Q8 (this imports torch).
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, LlamaTensorProcessor, TensorProcessor

    return TENSOR_PROCESSORS.get(architecture, TensorProcessor) in (TensorProcessor, LlamaTensorProcessor)


def device_float_name(device: str) -> str:
    """The float type ``device`` computes fastest in: bf16 where native, else fp32 on a CPU (engine/cpu.py) and
    fp16 on a GPU without bf16 (imports torch)."""
    import torch  # lazy: see the module docstring

    if device == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    from engine import cpu

    return "bf16" if cpu.native_bf16() else "fp32"


__all__ = ["QUALITY_BARS", "MIN_PARAMS", "INT8_ACTIVATIONS", "Reason", "Machine", "ModelWeights", "PrecisionChoice", "choose_precision",
           "quality_applies", "gguf_blocks", "GGUFBlocks", "AutoChoice", "device_float_name"]
