"""The native library's build and loading: ``python -m engine.native.library`` (run by ``make install``) compiles
every source of ``engine/native/`` into one library, ``miaohui_native``, in ``engine/native/build/``; ``int4_sym``,
``q8act_isa`` and ``decode_ops`` load it and say which of its ops run here (engine/native/__init__.py's table says
what each op computes and which test checks it).

Why C++ at all (issue 25): a Q4_0 GGUF's blocks are 4-bit codes and one scale per 32 weights, no zero point.
torch's only x86 int4 kernel, ``aten._weight_int4pack_mm_for_cpu``, takes a bf16 scale *and* zero per group, so a
Q4_0 weight costs it 5 bits per weight instead of 4.5, and it spends two fused multiply-adds per weight (dequantize,
accumulate). No well-kept library offers the symmetric case as a torch op on x86: torchao's CPU int4 path is a
prototype over the same aten op (docs/BENCHMARK.md), and llama.cpp's kernels quantize the activations to int8, which
would change every logit. ``int4_sym.cpp`` reads aten's own packed codes and bf16 scales only, one fused multiply-add
per weight, its products exact in fp32 and summed in aten's order, so its output equals aten's with every zero 0
bit for bit. ``q8act.cpp`` holds a different contract on purpose: int4 and int8 weights times activations quantized
to int8 per block of 32 with integer dot products (AVX512-VNNI, else AVX2), as llama.cpp computes Q4_0/Q4_1/Q8_0
(at equal bytes the fp32 product spent 1.5-2x llama.cpp's cycles per weight); not bit-exact against aten, its
quality measured (docs/BENCHMARK.md); torch has no x86 int8-activation int4 GEMV. ``decode_step.cpp`` is the
int8/int4 decode step in one call (``engine.executor.native_step`` says why), ``kv_int8.cpp`` the 8-bit KV cache's
quantization and attention it shares with the Python step (``engine.executor.kv_cache``), ``prefill_attention.cpp``
a prompt chunk's causal attention (torch's CPU SDPA computes a later chunk against every key; its header says why).

Where the library is not built (no compiler), cannot load, or ``MIAOHUI_NATIVE=0`` is set, every op here reads None
or False and the engine runs aten's kernels, saying why once in the log; where the CPU lacks AVX-512 only
``int4_sym()`` is None, and where it lacks AVX2 ``q8act_isa()`` and ``prefill_attention_isa()`` too
(``MIAOHUI_NATIVE_ISA=avx2`` forces AVX2).
Only the library of this name, in this folder, is ever loaded: the one an older tree built as
``engine/quant/build/miaohui_int4.so`` is never looked at (it registered the same ``miaohui`` ops, and two libraries
registering them in one process would fail). A packaged app carries the built library (packaging/miaohui.spec).

Owns the build and the loading, not the ops' callers: ``engine.quant.quant.Int4SymLinear`` (int4_sym),
``engine.quant.tiled`` (the int8-activation modules), ``engine.executor.native_step`` and ``engine.executor.verify``
(the decode step).
"""

from __future__ import annotations

import logging
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

log = logging.getLogger(__name__)

NAME = "miaohui_native"
HERE = Path(__file__).parent
# One library: the ops' sources and register.cpp, the one TORCH_LIBRARY block naming them all (ops.h, the headers).
SOURCES = tuple(HERE / name for name in ("register.cpp", "int4_sym.cpp", "q8act.cpp", "decode_step.cpp",
                                          "kv_int8.cpp", "prefill_attention.cpp"))


def build_folder() -> Path:
    """Where the library is built: beside the sources (``engine/native/build/``), or in a frozen app's bundle."""
    bundled = getattr(sys, "_MEIPASS", None)
    return Path(bundled) / "engine" / "native" / "build" if bundled else HERE / "build"


def library_path() -> Path:
    """The built library's one path; nothing else is loaded."""
    return build_folder() / f"{NAME}.so"


def build(verbose: bool = False) -> Path:
    """Compile the sources (again only when one changed, the headers included) and load the library; returns its
    path. Raises whatever the compiler or torch raises."""
    from torch.utils.cpp_extension import load

    folder = build_folder()
    folder.mkdir(parents=True, exist_ok=True)
    # No -march: the kernels' functions name their instruction sets, so the library loads on any x86-64 CPU
    # and the ops say so (cpu_features.h) where an instruction set is missing. -fopenmp: at::parallel_for runs its
    # loop on torch's threads only when the including file is compiled with OpenMP, else serially (the kernels ran on
    # one core of two until 2026-12-03); only compiled, not linked: GOMP_* resolve to the libgomp torch already loaded,
    # so there is one OpenMP thread pool, not two (miaohui::q8act_threads says how many threads the ops get).
    load(name=NAME, sources=[str(path) for path in SOURCES], build_directory=str(folder), is_python_module=False,
         extra_cflags=["-O3", "-fopenmp", "-ffp-contract=off"], verbose=verbose)
    return library_path()


@lru_cache(maxsize=1)
def int4_sym() -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor] | None:
    """The op ``(rows, codes, scales, group) -> out``, or None where it cannot run here (logged once, why)."""
    reason = _unavailable()
    if reason:
        log.info("int4: aten kernel for symmetric weights (%s)", reason)
        return None
    return torch.ops.miaohui.int4_sym_mm.default


def older_sources(path: Path, folder: Path = HERE) -> list[str]:
    """The sources and headers in ``folder`` changed after the library at ``path`` was built (none where it is not
    there, or in a packaged app, which carries no sources)."""
    if not path.is_file():
        return []
    built = path.stat().st_mtime
    return sorted(p.name for p in (*folder.glob("*.cpp"), *folder.glob("*.h")) if p.stat().st_mtime > built)


def load(path: Path) -> str | None:
    """Load the built library at ``path`` into ``torch.ops``; None, or why it could not be. A library older than one
    of its sources still loads, with a warning: run straight from ``python`` (not ``make``), it would otherwise measure
    code that is no longer the tree's (issue 45: a stale build's GLU still ran on one thread)."""
    if not path.is_file():
        return f"native library not built: `make install` builds it ({path.name})"
    if changed := older_sources(path):
        log.warning("native library older than %s: `make install` (or `python -m engine.native.library`) rebuilds it",
                    ", ".join(changed))
    try:
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as exc:
        return f"native library failed to load: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return None


ISAS = {"avx2": 1, "avx512vnni": 2}  # q8act.cpp's instruction-set argument


@lru_cache(maxsize=1)
def q8act_isa() -> int | None:
    """The instruction set the int8-activation ops use here (``ISAS``' values), or None (logged once, why)."""
    best = _best_isa("q8act_isa", "int4/int8: aten kernels with bf16 activations")
    if best is None:
        return None
    forced = os.environ.get("MIAOHUI_NATIVE_ISA", "")
    return min(best, ISAS[forced]) if forced in ISAS else best


@lru_cache(maxsize=1)
def decode_ops() -> bool:
    """Whether decode_step.cpp's row operations and ``DecodeStep`` run here: they call the int8-activation kernels, so
    where those do not (``q8act_isa()`` None) the engine keeps its torch operations."""
    return q8act_isa() is not None


NATIVE_KV_ENV = "MIAOHUI_NATIVE_KV"  # "0": the 8-bit KV cache's torch operations, not kv_int8.cpp's (to compare)


def int8_kv_ops() -> bool:
    """Whether the loaded library has kv_int8.cpp's ops (the 8-bit KV cache's quantization and attention) and
    ``DecodeStep.step_q8``/``verify_q8``/``batch_q8`` (they came in one change, so a library built before has none of
    them), and ``MIAOHUI_NATIVE_KV`` is not 0 (read per call). Call after ``decode_ops()`` said the library runs here."""
    return hasattr(torch.ops.miaohui, "attend_one_q8") and os.environ.get(NATIVE_KV_ENV, "1") != "0"


PREFILL_ATTENTION_ENV = "MIAOHUI_PREFILL_ATTENTION"  # "sdpa": torch's SDPA for prompt chunks (to compare)
ATTENTION_ISAS = {"avx2": 1, "avx512bf16": 2}  # prefill_attention.cpp's instruction-set argument


def prefill_attention_isa() -> int | None:
    """The instruction set prefill_attention.cpp's causal attention runs with here (``ATTENTION_ISAS``' values), or
    None: the library not loaded or built before it, a CPU without AVX2, ``MIAOHUI_NATIVE=0`` or
    ``MIAOHUI_PREFILL_ATTENTION=sdpa`` (both read per call). ``MIAOHUI_NATIVE_ISA=avx2`` caps it at AVX2, as it caps
    the int8-activation kernels."""
    if os.environ.get("MIAOHUI_NATIVE", "1") == "0" or os.environ.get(PREFILL_ATTENTION_ENV, "native") == "sdpa":
        return None
    best = _prefill_attention_best()
    if best is None:
        return None
    return min(best, ATTENTION_ISAS["avx2"]) if os.environ.get("MIAOHUI_NATIVE_ISA", "") == "avx2" else best


@lru_cache(maxsize=1)
def _prefill_attention_best() -> int | None:
    return _best_isa("prefill_attention_isa", "prompt attention: torch's SDPA")


def _best_isa(op: str, fallback: str) -> int | None:
    """The best instruction set the library's ``op`` (an ``..._isa()`` op: 0 none, else a level) reports here, or None
    with one log line saying ``fallback`` and why (not loaded, a library built before the op, a CPU without AVX2)."""
    reason = _not_loaded()
    if not reason and not hasattr(torch.ops.miaohui, op):
        reason = f"the native library predates {op}: `make install`"
    best = 0 if reason else int(getattr(torch.ops.miaohui, op)())
    if not reason and best == 0:
        reason = "this CPU lacks AVX2, FMA or F16C"
    if reason:
        log.info("%s (%s)", fallback, reason)
        return None
    return best


def _not_loaded() -> str | None:
    if os.environ.get("MIAOHUI_NATIVE", "1") == "0":
        return "MIAOHUI_NATIVE=0"
    if not hasattr(torch.ops.miaohui, "q8act_isa") and (reason := load(library_path())):
        return reason
    return None


def _unavailable() -> str | None:
    if reason := _not_loaded():
        return reason
    if not torch.ops.miaohui.int4_sym_available():
        return "this CPU lacks AVX-512"
    return None


def main() -> int:
    """``python -m engine.native.library``: build the library; a failure is one line and exit 0 (aten is used)."""
    try:
        path = build(verbose="-v" in sys.argv[1:])
    except Exception as exc:  # no compiler, no ninja, a compile error: the engine falls back to aten
        print(f"native library not built ({type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}); "
              "int4 and int8 use aten's kernels", file=sys.stderr)
        return 0
    print(f"native library: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
