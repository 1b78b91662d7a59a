"""Which form a quantized prompt chunk's products take on this machine, chosen by timing both (issue 45).

A prefill chunk's product of n rows by a tiled int4 or int8 weight (``engine.quant.tiled.Int4Q8Linear``,
``Int8Q8Linear``) can run two ways:
- **kernel**: ``miaohui::q4_q8_mm`` / ``q8_q8_mm``, int8 activations times the int4 codes or int8 weights with integer
  dot products (VNNI or AVX2), several rows sharing each weight load;
- **dense**: the weight dequantized once per chunk (``miaohui::q4_dense``) into the model's dtype, then torch's
  dense GEMM (oneDNN: AMX tiles where the CPU has them, AVX-512 BF16 or AVX2 otherwise).
Which is faster depends on the CPU, not on its instruction-set names: on this session's 2-core Xeon with AMX, a
Llama-3.2-1B-shaped gate_up of 1024 rows took 400 ms on the kernel against 180 ms dense; a 2-core EPYC without AMX
(2026-12-03) had found the kernel ~2× faster than the dense form with the old torch dequantization. So before the first
chunk long enough to matter computes anything, the model's first ``PROBE_PRODUCTS`` tiled weights (its first layer's
four products) are run both ways on random rows of that chunk's length, alternating which goes first, and the total
of each form decides for every tiled weight of the model (``kernel_rows``: all rows on the kernel, or dense above
the class's threshold). The first chunk timed is the first longer than that threshold (int4 96 rows, int8 24,
engine/quant/linears.py), so no chunk goes dense unmeasured: on an AVX2-only EPYC (no native bf16: dense is oneDNN's
emulated bf16) int4's 97-127-row chunks and every int8 chunk past 24 rows did, 2-4x slower than on the kernel.
Random rows, not the prompt's: the forms round differently, and a prompt whose first products
took one form and the rest another gave a reply that no later prompt reproduced (the int4 prompt lookup bench's
"same text" said NO on a fresh model). Timing does not depend on the values: both forms do the same work for any.
Both forms are products a prefill has always used (the kernel on VNNI, dense on AVX2 before), so the choice changes
speed, not what is computed: logits within a product's rounding.

A choice measured in one busy moment could stand for the process's life, so it is measured again: after
``RECHECK_AFTER`` more long tiled products, then after twice as many each time (the probe's extra cost, the slower
form of ``PROBE_PRODUCTS`` products, stays a few percent of the chunks between and shrinks). A recheck times the
prompt's own products, and each returns the chosen form's result, so a prompt's numbers change only when the decision
does, and a recheck changes it only when the other form took at most ``SWITCH_SHARE`` of the chosen one's time.

``MIAOHUI_PREFILL_FORM=kernel|dense`` fixes the form (to compare, and for the bench); unset or ``auto`` measures.
Owns the choice and its record; not the forms themselves (``engine.quant.tiled``, the runner's ``_prefill_linear``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from engine.quant.tiled import Int4Q8Linear, Int8Q8Linear

log = logging.getLogger(__name__)

PREFILL_FORM_ENV = "MIAOHUI_PREFILL_FORM"
FORMS = ("kernel", "dense")
PROBE_PRODUCTS = 4  # a layer's four products: q|k|v, o, gate|up, down
TILED = (Int4Q8Linear, Int8Q8Linear)  # the modules whose prompt products have two forms


def probe_rows(weight: Any) -> int:
    """The shortest chunk timed for ``weight``: the first its class would send dense (more than its ``kernel_rows``).
    It was 128 rows, int4 alone: a first prompt of 97-127 tokens then went dense, and every such prompt until a longer
    one came (the default model's 122-token prompt took 355 ms against 125 on the kernel on an AVX2-only EPYC, and
    `engine serve`'s 8 clients, whose prompts were that long, gained 1.4x over one instead of ~1.6x)."""
    return type(weight).kernel_rows + 1


# Long tiled products after a decision before it is measured again (4 chunks of a 16-layer model); doubled each time.
RECHECK_AFTER = 256
# A recheck switches forms only when the other took at most this share of the chosen one's time. The two forms round
# differently, so a switch changes the next prompts' numbers (a greedy reply can change): forms within noise of each
# other must not take turns (measured: the default model's int4 prompt lookup bench gave different texts in one run).
SWITCH_SHARE = 0.75


@dataclass(frozen=True)
class PrefillFormChoice:
    """What was chosen and why: the seconds each form took over the same probed products (None: fixed by the env)."""

    form: str
    kernel_s: float | None = None
    dense_s: float | None = None
    rows: int = 0
    measured: int = 0  # how many times the forms were timed for this choice (0: fixed by the env; 2+: rechecked)


class PrefillForms:
    """The choice for one model's tiled int4/int8 weights; one per ``FusedWeights``, shared by its runners (one engine
    thread runs them, the lock only guards a second thread's first prefill)."""

    def __init__(self, modules: Iterable[Any], clock: Callable[[], float] = time.perf_counter) -> None:
        self._modules = [m for m in modules if isinstance(m, TILED)]
        self._clock = clock
        self._lock = threading.Lock()
        self._spent = {form: 0.0 for form in FORMS}
        self._probed = 0
        self._fixed = False
        self._rechecking = False
        self._since = 0  # long tiled products since the last decision
        self._recheck_at = RECHECK_AFTER
        self.choice: PrefillFormChoice | None = None
        fixed = os.environ.get(PREFILL_FORM_ENV, "auto")
        if fixed in FORMS:
            self._fixed = True
            self._decide(PrefillFormChoice(fixed))
        elif fixed != "auto":
            log.warning("%s=%r: expected kernel, dense or auto; measuring", PREFILL_FORM_ENV, fixed)
        if not self._modules:
            self.choice = self.choice or PrefillFormChoice("kernel")

    @property
    def tiled(self) -> bool:
        """Whether the model has tiled weights, so that its prompt products have two forms to choose from."""
        return bool(self._modules)

    def wants_probe(self, weight: Any, rows: int) -> bool:
        """Whether this product is one to time: the first long chunk's first (``settle`` then chooses before it
        computes anything), or a recheck's (``probe``); counts the long tiled products between rechecks."""
        if self._fixed or not isinstance(weight, TILED) or rows < probe_rows(weight):
            return False
        if weight.kernel_rows != self._rows_set(weight):
            return False  # inside decode_products (every row on the kernel on purpose): not a prompt chunk
        if self.choice is None or self._rechecking:
            return True
        self._since += 1
        if self._since < self._recheck_at:
            return False
        self._rechecking, self._probed, self._spent = True, 0, {form: 0.0 for form in FORMS}
        return True

    def _rows_set(self, weight: Any) -> int:
        """The ``kernel_rows`` this object leaves on ``weight``: the class's until a choice, all rows for the kernel."""
        return sys.maxsize if self.choice is not None and self.choice.form == "kernel" else type(weight).kernel_rows

    def settle(self, rows: int, dtype: torch.dtype,
               dense: Callable[[torch.Tensor, Any], torch.Tensor]) -> PrefillFormChoice:
        """The first choice, before any prompt's product: the first ``PROBE_PRODUCTS`` tiled weights timed both ways on
        ``rows`` random rows in ``dtype``, ``dense(x, module)`` being the runner's dense form. Idempotent."""
        with self._lock:
            if self.choice is None:
                generator = torch.Generator().manual_seed(0)
                for module in self._modules[:PROBE_PRODUCTS]:
                    x = torch.randn(rows, module.in_features, generator=generator).to(dtype)
                    self._time(lambda: module.kernel(x), lambda: dense(x, module), rows)
            assert self.choice is not None
            return self.choice

    def probe(self, kernel: Callable[[], torch.Tensor], dense: Callable[[], torch.Tensor], rows: int) -> torch.Tensor:
        """A recheck's product, run both ways (alternating which runs first) and timed; returns the chosen form's
        result. Decides after ``PROBE_PRODUCTS`` products: the other form only when clearly faster."""
        with self._lock:
            if self.choice is None:
                raise RuntimeError("PrefillForms.probe before settle: the first choice is made on random rows")
            return self._time(kernel, dense, rows)

    def _time(self, kernel: Callable[[], torch.Tensor], dense: Callable[[], torch.Tensor], rows: int) -> torch.Tensor:
        order = (("kernel", kernel), ("dense", dense))
        if self._probed % 2:
            order = order[::-1]
        results = {}
        for form, run in order:
            start = self._clock()
            results[form] = run()
            self._spent[form] += self._clock() - start
        self._probed += 1
        returned = results[self.choice.form] if self.choice is not None else results["kernel"]
        if self._probed >= PROBE_PRODUCTS or (self.choice is None and self._probed >= len(self._modules)):
            ahead = min(FORMS, key=lambda form: self._spent[form])
            if self.choice is not None:  # a recheck: the other form must be clearly faster to take over
                chosen, other = self.choice.form, "dense" if self.choice.form == "kernel" else "kernel"
                ahead = other if self._spent[other] <= SWITCH_SHARE * self._spent[chosen] else chosen
            self._decide(PrefillFormChoice(ahead, self._spent["kernel"], self._spent["dense"], rows,
                                           (self.choice.measured if self.choice else 0) + 1))
        return returned

    def _decide(self, choice: PrefillFormChoice) -> None:
        if self._rechecking:
            self._rechecking, self._since, self._recheck_at = False, 0, 2 * self._recheck_at
        before, self.choice = self.choice, choice
        for module in self._modules:
            if choice.form == "kernel":
                module.kernel_rows = sys.maxsize
            elif "kernel_rows" in module.__dict__:
                del module.kernel_rows  # the class's threshold: a few rows stay on the kernel
        if choice.kernel_s is not None and (before is None or before.form != choice.form):
            log.info("prefill products: %s (kernel %.3f s, dense %.3f s over %d products of %d rows; timing %d)",
                     choice.form, choice.kernel_s, choice.dense_s, PROBE_PRODUCTS, choice.rows, choice.measured)


# One choice per model object, as its fused weights are one per model (engine/executor/llama_fused.py's _WEIGHTS).
_FORMS: "weakref.WeakKeyDictionary[Any, PrefillForms]" = weakref.WeakKeyDictionary()
_FORMS_LOCK = threading.Lock()


def chosen(model: Any) -> PrefillFormChoice | None:
    """The form ``model``'s prompt products take now, or None: no prompt chunk long enough chose one yet, or the model
    has no tiled weights (what a server's ``/metrics`` shows: engine/serve/metrics.py)."""
    with _FORMS_LOCK:
        forms = _FORMS.get(model)
    return forms.choice if forms is not None and forms.tiled else None


def forms_for(model: Any, weights: Any) -> PrefillForms:
    """The model's ``PrefillForms`` over its fused ``weights``' projections, made on first use."""
    with _FORMS_LOCK:
        forms = _FORMS.get(model)
        if forms is None:
            forms = _FORMS[model] = PrefillForms(
                p for layer in weights.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down))
        return forms


__all__ = ["chosen", "forms_for", "FORMS", "PREFILL_FORM_ENV", "PROBE_PRODUCTS", "RECHECK_AFTER", "PrefillFormChoice",
           "PrefillForms", "SWITCH_SHARE", "TILED", "probe_rows"]
