"""The performance panel's label/value rows: one look and one accessible shape for every figure.

A section of figures is a ``metric_form()``; each figure a row of a caption and a value (``add_metric_row``), both
with the figure's explanation as their tooltip, the value named after its caption for a screen reader, in plain
text, wrapping within the panel's width (never widening it), "—" until it is known. A view that puts more than the
value in the field (a bar under it) makes the two with ``metric_caption`` / ``metric_value`` and adds the row itself.
Used by the speculation, TTFT, roofline and tools-and-constraints views (``app/widgets/``). Owns no text of its own.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QLabel, QSizePolicy

UNKNOWN = "—"


def metric_form() -> QFormLayout:
    """A form for figures: fields take the width left, captions aligned left, the panel's spacing."""
    form = QFormLayout()
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
    form.setHorizontalSpacing(16)
    form.setVerticalSpacing(3)
    return form


def metric_caption(caption: str, explanation: str) -> QLabel:
    """A figure's caption (already translated), its explanation as the tooltip."""
    label = QLabel(caption)
    label.setToolTip(explanation)
    return label


def metric_value(caption: str, explanation: str) -> QLabel:
    """A figure's value, "—" until set: plain text, wrapping, named ``caption`` for a screen reader."""
    value = QLabel(UNKNOWN)
    value.setObjectName("metricValue")
    value.setTextFormat(Qt.TextFormat.PlainText)
    value.setWordWrap(True)
    value.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never wider than the form
    value.setToolTip(explanation)
    value.setAccessibleName(caption)
    return value


def add_metric_row(form: QFormLayout, caption: str, explanation: str) -> tuple[QLabel, QLabel]:
    """A caption and its value added to ``form``; returns both."""
    label, value = metric_caption(caption, explanation), metric_value(caption, explanation)
    form.addRow(label, value)
    return label, value
