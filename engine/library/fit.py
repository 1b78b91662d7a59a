"""Will a model fit? Weights at each precision plus the KV cache at a chosen context, against this machine's
free memory, from the config alone: before a download, or for an installed model before it is loaded.

``estimate(arch, ...)`` returns a ``FitEstimate``: the parameter count and the formula that gave it
(``engine.shapes.shape``, through ``engine.library.arch``), the weights bytes at every precision the engine offers, the KV cache at ``context``
tokens by ``2 · layers · context · kv_heads · head_dim · bytes`` (GQA aware; the seeds' no-GQA form beside
it; an int8 KV cache, ``kv_precision="int8"``: 1 byte per element plus a 2-byte scale per KV head and position), a
working-memory allowance, and the verdict against the free memory:

- total = weights + KV + 10 % of both + 256 MiB (activations, logits, the runtime's own allocations);
- fits when total ≤ 80 % of the free memory, tight when total ≤ the free memory, else will not fit.

Free memory is ``psutil.virtual_memory().available`` for the CPU, or ``torch.cuda.mem_get_info()``'s free bytes
when torch is already imported and a CUDA GPU is there (this module never imports torch itself, so the window
and the CLI can use it without loading torch). Precision ``auto`` is judged in what the loader's ``auto`` loads
on this machine, by the loader's own policy (``engine.quant.precision.choose_precision``, no weight read): on a
GPU its float type, or nf4 when 16-bit weights would not fit; on a CPU a GGUF's Q4/Q8 blocks kept, int4 for
safetensors over the quality bar's size floor (the verdict itself is measured at the first load: int8 or the
float type when int4 misses its bar), else the CPU's float type (bf16 where native, asked of ``engine/cpu.py``
only when torch is loaded; bf16 assumed otherwise). ``precision_reason`` says which and why. While it loads,
an int4/int8 model briefly holds its float weights too (read, then quantized); the estimate is the model
as it runs.
``architecture_of(path)`` reads an installed model's numbers from its ``config.json`` or its GGUF header.
Owns the verdict and its numbers; the measured figures after a load are ``engine.models.model.ModelFacts``'.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from engine.errors import BadInputError, ModelNotFoundError
from engine.fmt import format_bytes
from engine.inputs import BNB_QUANTIZED, KV_SCALE_BYTES, PRECISIONS, check_kv_precision
from engine.library import arch as arch_mod
from engine.library.arch import Architecture
from engine.models import safety
from engine.quant import precision as policy
from engine.shapes.gguf_header import read_file_header
from engine.shapes.shape import engine_precisions

DEFAULT_CONTEXT = 4096
WORKING_FRACTION = 0.10
RUNTIME_BYTES = 256 << 20
FITS_FRACTION = 0.80
VERDICTS = ("fits", "tight", "will not fit")
VERDICT_RULE = (f"total = weights + KV cache + {WORKING_FRACTION:.0%} of both + {format_bytes(RUNTIME_BYTES, 0)} "
                f"runtime; fits ≤ {FITS_FRACTION:.0%} of free memory, tight ≤ 100% of it, else will not fit")


@dataclass(frozen=True)
class Memory:
    """The memory a model would be loaded into, free now."""

    device: str  # "cpu" | "cuda"
    free_bytes: int
    source: str  # where the number came from

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PrecisionFit:
    """Weights and KV bytes per token at one precision."""

    precision: str
    weights_bytes: int
    kv_bytes_per_token: int
    usable: bool
    note: str = ""  # why the engine cannot load it so, when not usable


@dataclass(frozen=True)
class FitEstimate:
    """Everything the fit verdict rests on, with the formulas as text."""

    model: str
    arch: Architecture
    params: int
    params_estimate: int  # the seeds' V·d + 12·L·d², always given
    params_formula: str
    precision: str  # the precision judged (auto resolved)
    context: int
    weights_bytes: int
    kv_bytes_per_token: int
    kv_bytes: int
    kv_formula: str
    kv_bytes_no_gqa: int  # the seeds' 2 · layers · context · d_model · bytes: the cache without GQA
    working_bytes: int
    total_bytes: int
    memory: Memory
    verdict: str  # one of VERDICTS
    verdict_rule: str
    per_precision: tuple[PrecisionFit, ...]
    download_bytes: int | None = None  # what a download of it would transfer, when known
    precision_rule: str = ""  # why this precision: engine.quant.precision.Reason's value ("asked", "gguf blocks"…)
    precision_reason: str = ""  # the same as one line for people

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["arch"] = asdict(self.arch)
        data["per_precision"] = [asdict(p) for p in self.per_precision]
        return data

    def summary(self) -> str:
        """One line: the verdict and its numbers."""
        return (f"{self.verdict}: {format_bytes(self.total_bytes)} needed ({format_bytes(self.weights_bytes)} weights "
                f"in {self.precision} + {format_bytes(self.kv_bytes)} KV at {self.context:,} tokens + "
                f"{format_bytes(self.working_bytes)} working), {format_bytes(self.memory.free_bytes)} free "
                f"({self.memory.device})")


def verdict(total_bytes: int, free_bytes: int) -> str:
    """fits / tight / will not fit by ``VERDICT_RULE``."""
    if total_bytes <= FITS_FRACTION * free_bytes:
        return "fits"
    return "tight" if total_bytes <= free_bytes else "will not fit"


def machine_memory(device: str = "auto") -> Memory:
    """Free memory of ``device``: "cpu", "cuda" (torch must already be imported) or "auto" (the GPU when there is one)."""
    if device not in ("auto", "cpu", "cuda"):
        raise BadInputError(f"unknown device {device!r}: choose auto, cpu or cuda")
    torch = sys.modules.get("torch")  # never imported here: only asked when the process already has it
    has_cuda = torch is not None and torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise BadInputError("no CUDA GPU is available to this process (or torch is not loaded): judge against "
                            "the CPU's memory instead")
    if has_cuda and device != "cpu":
        free, _total = torch.cuda.mem_get_info()
        return Memory("cuda", int(free), "torch.cuda.mem_get_info() free bytes")
    return Memory("cpu", int(psutil.virtual_memory().available), "psutil.virtual_memory().available")


def choose(arch: Architecture, precision: str, memory: Memory) -> policy.PrecisionChoice:
    """The precision a load of ``arch``'s model asked in ``precision`` would use on ``memory``'s device: the
    loader's policy, fed from the config or GGUF header (``auto``'s quality verdict is not measured here)."""
    machine = policy.Machine.assumed(memory.device, memory.free_bytes if memory.device == "cuda" else None)
    if arch.source != "GGUF header":
        return policy.choose_precision(precision, machine, policy.ModelWeights(arch.params, "safetensors"))
    blocks = policy.GGUFBlocks(arch.projection_types, arch.layers, arch.block_biases, arch.model_type)
    return policy.choose_precision(precision, machine, policy.ModelWeights(arch.params, "gguf", blocks))


def _float_bytes(precision: str, bnb_float_bytes: int) -> int:
    if precision == "fp32":
        return 4
    return bnb_float_bytes if precision in BNB_QUANTIZED else 2


def estimate(arch: Architecture, *, model: str, context: int | None = None, precision: str = "auto",
             memory: Memory | None = None, download_bytes: int | None = None, bnb_float_bytes: int = 2,
             kv_precision: str = "auto") -> FitEstimate:
    """The fit of ``arch`` at ``context`` tokens (default: 4096 or the model's context, the smaller) in ``precision``.

    ``memory`` defaults to ``machine_memory()``; ``bnb_float_bytes`` is the bitsandbytes precisions' activation
    dtype size (2: bf16; 4 on a CPU without native bf16). ``kv_precision`` (``engine.inputs.KV_PRECISIONS``): "int8"
    counts the KV cache (every precision's) at 1 byte per element plus a 2-byte scale per KV head and position.
    """
    check_kv_precision(kv_precision)
    if precision not in PRECISIONS:
        raise BadInputError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    limit = arch.context_length or None
    if context is None:
        context = min(DEFAULT_CONTEXT, limit) if limit else DEFAULT_CONTEXT
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise BadInputError(f"context must be a whole number of tokens ≥ 1 (got {context!r})")
    if limit and context > limit:
        raise BadInputError(f"context {context:,} is beyond the model's {limit:,} positions")
    memory = memory or machine_memory()
    choice = choose(arch, precision, memory)
    chosen = choice.precision
    per_precision = tuple(
        PrecisionFit(p, arch.weights_bytes(p, bnb_float_bytes),
                     arch.kv_bytes_per_token(_float_bytes(p, bnb_float_bytes), kv_precision),
                     arch.precision_problem(p) is None, arch.precision_problem(p) or "")
        for p in engine_precisions())
    element = _float_bytes(chosen, bnb_float_bytes)
    weights = arch.weights_bytes(chosen, bnb_float_bytes)
    per_token = arch.kv_bytes_per_token(element, kv_precision)
    kv = per_token * context
    working = int(WORKING_FRACTION * (weights + kv)) + RUNTIME_BYTES
    total = weights + kv + working
    attention = (f"GQA: {arch.heads} query heads share {arch.kv_heads} KV heads" if arch.kv_heads < arch.heads
                 else "MHA: one KV head per query head")
    kv_formula = (f"2 · {arch.layers} layers · {context:,} tokens · {arch.kv_heads} KV heads · {arch.head_dim} head dim "
                  f"· {element} bytes = {kv:,} bytes ({per_token:,} per token; {attention})")
    if kv_precision == "int8":
        kv_formula = (f"2 · {arch.layers} layers · {context:,} tokens · {arch.kv_heads} KV heads · "
                      f"({arch.head_dim} head dim · 1 byte + {KV_SCALE_BYTES}-byte scale) = {kv:,} bytes "
                      f"({per_token:,} per token, int8 KV; {attention})")
        element = 1  # the no-GQA form below: one byte per element (its scales left out)
    return FitEstimate(
        model=model, arch=arch, params=arch.params, params_estimate=arch.param_estimate,
        params_formula=arch.params_formula(), precision=chosen, context=context, weights_bytes=weights,
        kv_bytes_per_token=per_token, kv_bytes=kv, kv_formula=kv_formula,
        kv_bytes_no_gqa=arch.kv_bytes_per_token_no_gqa(element) * context, working_bytes=working,
        total_bytes=total, memory=memory, verdict=verdict(total, memory.free_bytes), verdict_rule=VERDICT_RULE,
        per_precision=per_precision, download_bytes=download_bytes, precision_rule=choice.reason.value,
        precision_reason=choice.describe())


def architecture_of(path: Path) -> Architecture:
    """The architecture of a local model: a folder's ``config.json``, or a ``.gguf`` file's header (a folder
    whose only model is one GGUF file counts as that file). Reads no weights."""
    path = Path(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        safety.require_regular_file(path)
        return arch_mod.from_gguf(read_file_header(path), str(path))
    if path.is_dir():
        config = path / "config.json"
        if config.is_file():
            safety.require_regular_file(config)
            return arch_mod.from_config(safety.read_json(config), str(config))
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return architecture_of(ggufs[0])
        if ggufs:
            raise BadInputError(f"{path} holds {len(ggufs)} .gguf files: name one of them (e.g. {ggufs[0]})")
    raise ModelNotFoundError(f"no model at {path}: give a model folder with config.json or a .gguf file")
