"""The one C++ kernel of the engine: ``miaohui::int4_sym_mm``, a symmetric int4 GEMV for AVX-512 CPUs, and its
build (``python -m engine.quant.native``, run by ``make install``) and loading (``int4_sym``).

Why a C++ extension (issue 25): a Q4_0 GGUF's blocks are 4-bit codes and one scale per 32 weights, no zero
point. torch's only x86 int4 kernel, ``aten._weight_int4pack_mm_for_cpu``, takes a bf16 scale *and* zero per
group, so a Q4_0 weight costs it 5 bits per weight instead of 4.5, and it spends two fused multiply-adds per
weight (dequantize, accumulate). No well-kept library offers the symmetric case as a torch op on x86: torchao's
CPU int4 path is a prototype over the same aten op (docs/BENCHMARK.md), and llama.cpp's kernels quantize the
activations to int8, which would change every logit. ``int4_sym.cpp`` reads aten's own packed codes (the same
buffer its kernel takes) and bf16 scales only, with one fused multiply-add per weight; the products it sums are
exact in fp32 and summed in aten's order, so its output equals aten's with every zero 0 bit for bit
(tests/engine/quant/test_native.py), and the greedy tokens of every exactness test stay what they were.

The third source, ``decode_step.cpp``, is the int8/int4 decode step in one call and its row operations
(``engine.executor.native_step`` says why; ``decode_ops()`` whether they are loaded).

The second source, ``q8act.cpp`` (``miaohui::q4_q8_mm``, ``q8_q8_mm``), holds a different exactness contract: int4
and int8 weights times activations quantized to int8 per block of 32 (d = max|x|/127, nearest even), summed with
integer dot products (AVX512-VNNI ``vpdpbusd``, or AVX2 ``vpmaddubsw``/``vpmaddwd``) and combined in fp32, as
llama.cpp computes Q4_0/Q4_1/Q8_0 (issue 25: at equal bytes, the fp32 product above spent 1.5-2× llama.cpp's
cycles per weight). Not bit-exact against aten: its integer sums are exact and tested as such, and its quality
is measured (teacher-forced agreement and perplexity, docs/BENCHMARK.md); bf16 weights stay exact. torch has no
x86 int8-activation int4 GEMV as an op, hence C++ again. ``q8act_isa()`` says which path runs here (VNNI, else
AVX2, ``MIAOHUI_NATIVE_ISA=avx2`` forces AVX2), or None: then int4 and int8 run as above.

Built with ``torch.utils.cpp_extension`` (needs a C++ compiler and ninja) into ``engine/quant/build/``, loaded
from there with ``torch.ops.load_library``; a packaged app carries the built library (packaging/miaohui.spec).
Where it is not built (no compiler), the CPU lacks AVX-512, aten packs for another CPU (its 32-row AVX2
layout) or ``MIAOHUI_NATIVE=0`` is set, ``int4_sym()`` is None and int4 runs on the aten kernel as before,
saying why once in the log. Owns the build and the loading; the module that calls the op is
``engine.quant.quant.Int4SymLinear``.
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

NAME = "miaohui_int4"
SOURCE = Path(__file__).with_name("int4_sym.cpp")
SOURCES = (SOURCE, SOURCE.with_name("q8act.cpp"), SOURCE.with_name("decode_step.cpp"))  # one library


def build_folder() -> Path:
    """Where the library is built: beside the source (``engine/quant/build/``), or in a frozen app's bundle."""
    bundled = getattr(sys, "_MEIPASS", None)
    return Path(bundled) / "engine" / "quant" / "build" if bundled else SOURCE.parent / "build"


def library_path() -> Path:
    return build_folder() / f"{NAME}.so"


def build(verbose: bool = False) -> Path:
    """Compile ``int4_sym.cpp`` (again only when it changed) and load it; returns the library's path.
    Raises whatever the compiler or torch raises."""
    from torch.utils.cpp_extension import load

    folder = build_folder()
    folder.mkdir(parents=True, exist_ok=True)
    # No -march: the kernel's functions name their instruction sets, so the library loads on any x86-64 CPU
    # and the op says so (``int4_sym_available``) where AVX-512 is missing. -fopenmp: at::parallel_for runs its
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


def load(path: Path) -> str | None:
    """Load the built library at ``path`` into ``torch.ops``; None, or why it could not be."""
    if not path.is_file():
        return f"native kernel not built: `make install` builds it ({path.name})"
    try:
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as exc:
        return f"native kernel failed to load: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return None


ISAS = {"avx2": 1, "avx512vnni": 2}  # q8act.cpp's instruction-set argument


@lru_cache(maxsize=1)
def q8act_isa() -> int | None:
    """The instruction set the int8-activation ops use here (``ISAS``' values), or None (logged once, why)."""
    reason = _not_loaded()
    best = 0 if reason else int(torch.ops.miaohui.q8act_isa())
    if not reason and best == 0:
        reason = "this CPU lacks AVX2, FMA or F16C"
    if reason:
        log.info("int4/int8: aten kernels with bf16 activations (%s)", reason)
        return None
    forced = os.environ.get("MIAOHUI_NATIVE_ISA", "")
    return min(best, ISAS[forced]) if forced in ISAS else best


@lru_cache(maxsize=1)
def decode_ops() -> bool:
    """Whether decode_step.cpp's row operations and ``DecodeStep`` are loaded (with the int8-activation kernels, which
    need AVX2): a library built before it lacks them, and the engine then keeps its torch operations."""
    return q8act_isa() is not None and hasattr(torch.ops.miaohui, "rms_norm_rows")


def _not_loaded() -> str | None:
    if os.environ.get("MIAOHUI_NATIVE", "1") == "0":
        return "MIAOHUI_NATIVE=0"
    if not hasattr(torch.ops.miaohui, "q8act_isa") and (reason := load(library_path())):
        return reason
    if not hasattr(torch.ops.miaohui, "q8act_isa"):
        return "native library predates q8act.cpp: `make install` rebuilds it"
    return None


def _unavailable() -> str | None:
    if reason := _not_loaded():
        return reason
    if not torch.ops.miaohui.int4_sym_available():
        return "this CPU lacks AVX-512"
    return None


def main() -> int:
    """``python -m engine.quant.native``: build the kernel; a failure is one line and exit 0 (aten is used)."""
    try:
        path = build(verbose="-v" in sys.argv[1:])
    except Exception as exc:  # no compiler, no ninja, a compile error: the engine falls back to aten
        print(f"native int4 kernel not built ({type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}); "
              "int4 uses the aten kernel", file=sys.stderr)
        return 0
    print(f"native int4 kernel: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
