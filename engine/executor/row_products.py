"""One-row matrix products through a weight packed once: what runs row by row when several rows must each give
exactly their one-row bits (a batched decode step, ``engine.executor.batched``; a speculative verify,
``engine.executor.verify``), and the eager decode step's own one-row products where measured fastest
(``engine.executor.row_forms``).

On a CPU, ``F.linear`` of one bf16 row hands the weight to oneDNN, which re-lays it out on every call: about half of
a 576 x 1536 product's time on this project's AVX-512 CPU. A weight packed once
(``torch.ops.mkldnn._reorder_linear_weight``) and multiplied with ``torch.ops.mkldnn._linear_pointwise`` runs the
same kernel without the re-layout. torch has no public API for a prepacked dense linear on a CPU (torch.ao's and
torchao's are for quantized weights), hence these private ops, behind a guard: where they are missing or fail,
``packed_rows`` says None and the caller keeps ``F.linear``. Whether the packed product's bits equal the one-row
``F.linear``'s is for the caller to probe, never assumed here.

Owns the packed copies: one per weight, shared by every caller, kept while the weight lives (the default model's
down projections: ~53 MB in bf16). Does not decide which projections go row by row.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import torch

Projection = Callable[[torch.Tensor], torch.Tensor]
_PACKED: dict[int, tuple["weakref.ref[torch.Tensor]", torch.Tensor | None]] = {}
_LOCK = threading.Lock()


def packed_weight(weight: Any) -> torch.Tensor | None:
    """``weight`` packed for oneDNN (made once per weight), or None where that is not available (a quantized module,
    not a CPU tensor, a torch without oneDNN, a layout the op refuses)."""
    if not isinstance(weight, torch.Tensor) or weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return None
    known = _PACKED.get(id(weight))  # a dict read: safe without the lock, and on every batched step's call
    if known is not None and known[0]() is weight:
        return known[1]
    try:
        packed: torch.Tensor | None = torch.ops.mkldnn._reorder_linear_weight(weight)
    except Exception:  # noqa: BLE001  (an optimisation: row by row through F.linear is exact anyway)
        packed = None
    with _LOCK:
        for key in [k for k, (ref, _) in _PACKED.items() if ref() is None]:  # weights gone with their model
            del _PACKED[key]
        _PACKED[id(weight)] = (weakref.ref(weight), packed)
    return packed


def packed_rows(weight: Any, bias: torch.Tensor | None) -> Projection | None:
    """``F.linear(x, weight, bias)`` through ``weight``'s packed copy, or None where there is none."""
    packed = packed_weight(weight)
    if packed is None:
        return None
    return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def forget_packed(weight: Any) -> None:
    """Drop ``weight``'s packed copy (one tried and not used: ``engine.executor.row_forms``); a later caller packs
    it again."""
    with _LOCK:
        _PACKED.pop(id(weight), None)


__all__ = ["Projection", "forget_packed", "packed_rows", "packed_weight"]
