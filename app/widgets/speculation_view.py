"""The performance panel's "Speculative decoding" rows: who drafted, how many drafted tokens the model accepted, how
many tokens each of its forward passes produced, and the speed-up over plain decoding.

Acceptance rate and tokens per target step are the engine's (``Metrics.acceptance_rate``, ``tokens_per_step``). The
speed-up is this reply's decode rate ÷ the plain decode rate measured on the same model in this session (the last
reply decoded without speculation, on the same model: its ``decode_tok_s``); "—" until such a reply exists. Tokens
per target step is its ceiling: a step with drafts costs somewhat more than a plain one. Hidden while no reply
speculated; computes nothing beyond that ratio.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QT_TRANSLATE_NOOP
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

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
    "speedup": QT_TRANSLATE_NOOP("SpeculationView", "This reply's decode rate ÷ the decode rate of the last reply "
                                                    "without speculation on this model in this session (turn "
                                                    "speculation off for one reply to measure it). Both rates are "
                                                    "tokens after the first ÷ their time, on a machine that may be "
                                                    "busy with other work."),
}
DRAFTERS = {"prompt-lookup": QT_TRANSLATE_NOOP("SpeculationView", "prompt lookup"),
            "self": QT_TRANSLATE_NOOP("SpeculationView", "self (int4 copy)")}


class SpeculationView(QWidget):
    """The rows; ``show_metrics(metrics)`` fills them (and learns the plain rate), ``set_model_facts`` forgets it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plain_tok_s: float | None = None  # the last plain reply's decode rate on this model, this session
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

    def set_model_facts(self, _facts: Any) -> None:
        """Another model: its plain rate is not known yet."""
        self.plain_tok_s = None
        self.reset()

    def reset(self) -> None:
        for value in self.values.values():
            value.setText("—")

    def show_metrics(self, m: Any, final: bool = False) -> None:
        """Fill the rows from ``m`` (``engine.events.Metrics``); a final plain reply's rate becomes the reference."""
        drafter = getattr(m, "speculation", "") or ""
        rate = getattr(m, "decode_tok_s", None)
        if not drafter:
            if final and rate and not getattr(m, "unknown", ()):
                self.plain_tok_s = float(rate)
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
        if rate and self.plain_tok_s:
            v["speedup"].setText(self.tr("{ratio}× ({rate} vs {plain} tok/s)").format(
                ratio=f"{rate / self.plain_tok_s:.2f}", rate=f"{rate:.1f}", plain=f"{self.plain_tok_s:.1f}"))
        else:
            v["speedup"].setText(self.tr("— (no plain reply on this model yet)"))

    def shown(self) -> dict[str, str]:
        return {key: value.text() for key, value in self.values.items()}
