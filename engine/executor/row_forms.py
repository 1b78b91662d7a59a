"""The form each dense projection of the eager decode step takes for its one row, chosen once per weight shape by
measuring: ``one_row(weight, bias)``.

Why (issue 45): a one-row bf16 ``F.linear`` on a CPU hands the weight to oneDNN, which re-lays it out on every call
(``engine.executor.row_products``); measured with one thread on this project's 2-core AVX-512 CPU under load, the
default model's one-row products took about twice as long that way as through ``torch.mv`` on the weight as stored or
through a copy packed once, so bf16 decode ran at ~15 tok/s where int4 ran at ~70. Which form is fastest depends on
the CPU, its ISA, torch's build and the shape, so it is measured here, never assumed from the CPU's name.

Exactness first: a form is a candidate only where it gives, on random rows spread over many magnitudes
(``engine.executor.verify``'s probes), exactly the bits of one-row ``F.linear``; so the step's logits stay what
transformers' operations give, and speculation's verify and the batched step (which compare against ``F.linear``
and against the step plan's own projection) keep their promises. Several rows at once (a verify, a probe) always go
through ``F.linear``: only the one-row call changes.

Candidates: ``F.linear`` (the reference, always exact), ``torch.mv`` (``torch.addmv`` with a bias) on the weight as
stored (no copy), and the oneDNN-packed copy (``engine.executor.row_products.packed_rows``, a copy the size of the
weight: offered only while every packed copy of the model fits ``PACKED_SHARE`` of the available memory). Each
candidate is timed ``TIMING_CALLS`` times, interleaved with the others (so a busy machine slows all alike), and the
best time wins; the choice is cached per (shape, dtype, strides, bias). ``MIAOHUI_ROW_FORM=linear`` keeps
``F.linear`` (to compare: ``engine bench``'s before and after in one run).

Owns the choice and its cache; not the step (``engine.executor.llama_fused.step_plan`` binds what this returns).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F

from engine.executor.row_products import Projection, forget_packed, packed_rows

FORM_ENV = "MIAOHUI_ROW_FORM"
TIMING_CALLS = 5  # calls of each exact form timed (their best) when choosing
PROBE_TRIALS = 3  # random rows a form must match F.linear on, bit for bit
PACKED_SHARE = 0.15  # packed copies offered only while the model's dense weights fit this share of free memory
_FORMS: dict[tuple[Any, ...], str] = {}
_LOCK = threading.Lock()


def _key(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[Any, ...]:
    return (tuple(weight.shape), tuple(weight.stride()), weight.dtype, None if bias is None else bias.dtype)


def _probe_rows(columns: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """One-row inputs spread over many binary magnitudes: two summation orders then round differently somewhere
    almost surely (plain normal values often round alike by chance)."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(PROBE_TRIALS):
        spread = torch.exp2(torch.randint(-12, 13, (1, columns), generator=generator).float())
        rows.append((torch.randn((1, columns), generator=generator) * spread).to(dtype))
    return rows


def _candidates(weight: torch.Tensor, bias: torch.Tensor | None, packed_ok: bool) -> dict[str, Projection]:
    """The one-row forms to try (each x (1, in) -> (1, out)); F.linear first."""
    forms: dict[str, Projection] = {"linear": lambda x: F.linear(x, weight, bias)}
    if bias is None:
        forms["mv"] = lambda x: torch.mv(weight, x[0]).unsqueeze(0)
    elif bias.dtype == weight.dtype:
        forms["mv"] = lambda x: torch.addmv(bias, weight, x[0]).unsqueeze(0)
    packed = packed_rows(weight, bias) if packed_ok else None
    if packed is not None:
        forms["packed"] = packed
    return forms


def _fastest(forms: dict[str, Projection], probes: list[torch.Tensor], clock: Callable[[], float]) -> str:
    """The exact form (bits of ``forms['linear']`` on every probe) with the best of ``TIMING_CALLS`` timed calls."""
    exact = {}
    for name, form in forms.items():
        try:
            if name == "linear" or all(torch.equal(form(p), forms["linear"](p)) for p in probes):
                exact[name] = form
        except RuntimeError:  # a form this torch or this weight does not take: not a candidate
            continue
    if len(exact) == 1:
        return "linear"
    best = {name: float("inf") for name in exact}
    x = probes[0]
    for name, form in exact.items():
        form(x)  # warm: first-call allocations and the packed copy's first use
    for _ in range(TIMING_CALLS):
        for name, form in exact.items():  # interleaved: load on the machine slows every form alike
            t0 = clock()
            form(x)
            best[name] = min(best[name], clock() - t0)
    return min(best, key=lambda name: (best[name], name != "linear"))  # a tie keeps F.linear


def packed_affordable(weights: Iterable[Any]) -> bool:
    """Whether packed copies of the dense CPU ``weights`` (a model's) fit ``PACKED_SHARE`` of the available memory."""
    dense = sum(t.numel() * t.element_size() for t in {id(t): t for t in weights}.values()
                if isinstance(t, torch.Tensor) and t.device.type == "cpu")
    if not dense:
        return False
    try:
        import psutil

        return dense <= PACKED_SHARE * psutil.virtual_memory().available
    except (ImportError, OSError):
        return False


@torch.inference_mode()
def one_row(weight: Any, bias: torch.Tensor | None = None, packed_ok: bool = False,
            clock: Callable[[], float] = time.perf_counter) -> Projection:
    """``F.linear(x, weight, bias)`` as the decode step calls it, its one-row calls in the fastest exact form measured
    for this weight's shape (rows > 1: ``F.linear`` itself). ``packed_ok``: whether a packed copy may be made
    (``packed_affordable``). A weight that is not a dense floating CPU tensor, or ``MIAOHUI_ROW_FORM=linear``: plain
    ``F.linear``."""
    def linear(x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight, bias)

    if not isinstance(weight, torch.Tensor) or weight.device.type != "cpu" or not weight.is_floating_point() \
            or weight.dim() != 2 or os.environ.get(FORM_ENV, "").strip().lower() == "linear":
        return linear
    key = _key(weight, bias) + (packed_ok,)
    with _LOCK:
        name = _FORMS.get(key)
        if name is None:
            forms = _candidates(weight, bias, packed_ok)
            name = _FORMS[key] = _fastest(forms, _probe_rows(weight.shape[1], weight.dtype, 0), clock)
            if name != "packed" and "packed" in forms:
                forget_packed(weight)  # tried, not chosen: its copy need not stay
    if name == "linear":
        return linear
    form = _candidates(weight, bias, name == "packed")[name]
    return lambda x: form(x) if x.shape[0] == 1 else F.linear(x, weight, bias)


def chosen() -> dict[str, int]:
    """How many weight shapes took each form so far (``engine bench`` reports it)."""
    counts: dict[str, int] = {}
    for name in _FORMS.values():
        counts[name] = counts.get(name, 0) + 1
    return counts


__all__ = ["FORM_ENV", "chosen", "one_row", "packed_affordable"]
