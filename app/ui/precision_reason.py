"""Why ``auto`` loaded a model in the precision it did, in the user's language: the model bar's and card's line.

Reads ``ModelFacts.auto_choice`` (engine/quant/auto_quant.py: the fastest of int4/int8 whose teacher-forced
agreement with the float model meets its bar). Owns the wording only; the rule and the figures are the engine's.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QCoreApplication

_FLOAT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def _percent(share: float) -> str:
    return f"{share * 100:.1f}%"


def auto_reason(facts: Any) -> str | None:
    """One or two sentences on ``auto``'s choice for this load, or None when ``auto`` did not weigh candidates."""
    choice = getattr(facts, "auto_choice", None)
    if choice is None:
        return None
    translate = QCoreApplication.translate  # literal calls, so that lupdate finds every text
    missed = ", ".join(translate("PrecisionReason", "{precision} agreed on {agreement}").format(
        precision=name, agreement=_percent(share)) for name, share in choice.rejected)
    if choice.agreement is None:
        return translate("PrecisionReason", "auto kept {reference}: the quantized candidates fell short of the "
                                            "quality bar ({missed}).").format(reference=choice.reference, missed=missed)
    float_bytes = facts.params * _FLOAT_BYTES.get(choice.reference, 2)
    text = translate("PrecisionReason", "auto chose {precision}: its next-token choices agree with {reference} on "
                                        "{agreement} of a fixed text (bar {bar}), and it reads {ratio:.2f}× the bytes "
                                        "per token, so it decodes faster.").format(
        precision=choice.precision, reference=choice.reference, agreement=_percent(choice.agreement),
        bar=_percent(choice.bar), ratio=facts.weights_bytes / float_bytes if float_bytes else 0.0)
    if missed:
        text += " " + translate("PrecisionReason", "Faster candidates fell short: {missed}.").format(missed=missed)
    text += " " + (translate("PrecisionReason", "Measured at this load; later loads reuse the verdict.")
                   if choice.measured_now else translate("PrecisionReason", "Measured at an earlier load of this model."))
    return text


__all__ = ["auto_reason"]
