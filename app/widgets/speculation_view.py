"""The performance panel's "Speculative decoding" rows: who drafted, how many drafted tokens the model accepted, how
many tokens each of its forward passes produced, and the speed-up over plain decoding.

Acceptance rate and tokens per target step are the engine's (``Metrics.acceptance_rate``, ``tokens_per_step``). The
speed-up is this reply's decode rate ÷ the baseline: the median decode rate of recent live replies decoded without
speculation under the same conditions — same model, precision and device (``app.state.rate_estimate``; a reply of
fewer than ``MIN_RATE_TOKENS`` tokens measures no rate). Only live replies teach it (``learn_plain``, called when a
reply finishes), never one paged back or reopened; without such a baseline the row shows "—" and its tooltip says
"no baseline yet" (issue 41: "speed-up 0.16×" against an unrelated earlier reply). Tokens per target step is its
ceiling: a step with drafts costs somewhat more than a plain one. Hidden while no reply speculated; computes nothing
beyond that ratio.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QT_TRANSLATE_NOOP
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.state.rate_estimate import RateEstimate, RateKey, RecentRates
from app.ui.metric_rows import add_metric_row, metric_form

ROWS = (("drafter", QT_TRANSLATE_NOOP("SpeculationView", "Drafter")),
        ("acceptance", QT_TRANSLATE_NOOP("SpeculationView", "Acceptance rate")),
        ("per_step", QT_TRANSLATE_NOOP("SpeculationView", "Tokens per target step")),
        ("speedup", QT_TRANSLATE_NOOP("SpeculationView", "Speed-up")))
HELP = {
    "drafter": QT_TRANSLATE_NOOP("SpeculationView", "Who proposed the tokens the model checked: prompt lookup (the "
                                                    "conversation's own words, no model), the model's int4 copy "
                                                    "(self), or a smaller draft model with the same vocabulary."),
    "acceptance": QT_TRANSLATE_NOOP("SpeculationView", "Drafted tokens the model agreed with ÷ drafted tokens. Greedy "
                                                       "keeps a draft only where it equals the model's own choice, so "
                                                       "the reply is the one plain decoding writes."),
    "per_step": QT_TRANSLATE_NOOP("SpeculationView", "Tokens written per forward pass of the model while decoding "
                                                     "(1.0 without speculation): accepted drafts come without one. "
                                                     "The speed-up's ceiling, since checking drafts costs a little "
                                                     "more than one plain step."),
    "speedup": QT_TRANSLATE_NOOP("SpeculationView", "This reply's decode rate ÷ the median decode rate of recent "
                                                    "replies without speculation on the same model, precision and "
                                                    "device in this session (turn speculation off for a reply or two "
                                                    "to measure it). Both rates are tokens after the first ÷ their "
                                                    "time, on a machine that may be busy with other work."),
}
BASELINE_TIP = QT_TRANSLATE_NOOP("SpeculationView", "Baseline: median {median} tok/s of {samples} plain replies "
                                                    "(from {low} to {high}) on {model}, {precision}, {device}.")
NO_BASELINE_TIP = QT_TRANSLATE_NOOP("SpeculationView", "No baseline yet: no reply without speculation on {model}, "
                                                       "{precision}, {device} has been measured in this session.")
DRAFTERS = {"prompt-lookup": QT_TRANSLATE_NOOP("SpeculationView", "prompt lookup"),
            "self": QT_TRANSLATE_NOOP("SpeculationView", "self (int4 copy)")}


def metrics_key(model: str, m: Any) -> RateKey:
    """The conditions ``m`` (``engine.events.Metrics``) was measured under: the model's name, its precision and
    device as the engine reported them for that very reply."""
    return RateKey(model, str(getattr(m, "precision", "") or ""), str(getattr(m, "device", "") or ""))


class SpeculationView(QWidget):
    """The rows; ``show_metrics(metrics)`` fills them, ``learn_plain(metrics)`` adds a finished live plain reply's
    decode rate to the baseline. No signals."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plain_rates = RecentRates()  # decode rates of live plain replies, per model, precision and device
        self._model = ""  # the loaded model's name: with a reply's precision and device, the baseline's key
        self._remote = False  # a server's model: its rates are not this machine's
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        heading = QLabel(self.tr("Speculative decoding"))
        heading.setObjectName("sectionTitle")
        layout.addWidget(heading)
        form = metric_form()
        self.values: dict[str, QLabel] = {}
        for key, caption in ROWS:
            self.values[key] = add_metric_row(form, self.tr(caption), self.tr(HELP[key]))[1]
        layout.addLayout(form)
        self.setVisible(False)

    def set_model_facts(self, facts: Any) -> None:
        """Another model loaded: baselines are looked up under its name (those of other models are kept)."""
        self._model = str(getattr(facts, "name", "") or "")
        self._remote = bool(getattr(facts, "remote", False))
        self.reset()

    def reset(self) -> None:
        for value in self.values.values():
            value.setText("—")

    def learn_plain(self, m: Any) -> bool:
        """A live reply finished: if it decoded without speculation, on this machine, its decode rate joins the
        baseline of its model, precision and device; whether it did."""
        if getattr(m, "speculation", "") or getattr(m, "unknown", ()) or self._remote or not self._model:
            return False
        return self.plain_rates.add(metrics_key(self._model, m), getattr(m, "decode_tok_s", None),
                                    getattr(m, "generated_tokens", None))

    def baseline(self, m: Any) -> RateEstimate | None:
        """The plain decode rate measured under ``m``'s conditions (None: none yet)."""
        return None if self._remote or not self._model else self.plain_rates.estimate(metrics_key(self._model, m))

    def show_metrics(self, m: Any, final: bool = False) -> None:
        """Fill the rows from ``m`` (``engine.events.Metrics``); ``final`` changes nothing here (see ``learn_plain``)."""
        drafter = getattr(m, "speculation", "") or ""
        rate = getattr(m, "decode_tok_s", None)
        if not drafter:
            self.setVisible(False)
            return
        self.setVisible(True)
        v = self.values
        name = DRAFTERS.get(drafter)
        v["drafter"].setText(self.tr(name) if name else drafter.removeprefix("draft:"))
        acceptance = getattr(m, "acceptance_rate", None)
        v["acceptance"].setText("—" if acceptance is None else self.tr("{rate} ({accepted} of {drafted})").format(
            rate=f"{acceptance:.0%}", accepted=m.accepted_tokens, drafted=m.draft_tokens))
        per_step = getattr(m, "tokens_per_step", None)
        v["per_step"].setText("—" if per_step is None else f"{per_step:.2f}")
        key = metrics_key(self._model, m)
        where = {"model": key.model or "—", "precision": key.precision or "—", "device": key.device or "—"}
        base = self.baseline(m)
        if rate and base is not None:
            v["speedup"].setText(self.tr("{ratio}× ({rate} vs {plain} tok/s)").format(
                ratio=f"{rate / base.median:.2f}", rate=f"{rate:.1f}", plain=f"{base.median:.1f}"))
            tip = self.tr(BASELINE_TIP).format(median=f"{base.median:.1f}", samples=base.samples,
                                               low=f"{base.low:.1f}", high=f"{base.high:.1f}", **where)
        else:
            v["speedup"].setText("—")
            tip = self.tr(NO_BASELINE_TIP).format(**where)
        v["speedup"].setToolTip(tip + "\n\n" + self.tr(HELP["speedup"]))

    def shown(self) -> dict[str, str]:
        return {key: value.text() for key, value in self.values.items()}
