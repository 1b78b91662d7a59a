"""The panel's figure rows come from one helper (``app.ui.metric_rows``): in the speculation, TTFT, roofline and
tools-and-constraints views every value is a plain-text "metricValue" named after its caption for a screen reader,
with its caption's explanation as its tooltip, and starts unknown ("—") or empty."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QFormLayout, QLabel

from app.ui.metric_rows import UNKNOWN, add_metric_row, metric_form
from app.widgets.roofline_view import RooflineView
from app.widgets.speculation_view import SpeculationView
from app.widgets.tool_cost_view import ToolCostView
from app.widgets.ttft_view import TtftView


def test_a_row_is_a_caption_and_a_named_explained_value(qtbot):
    form = metric_form()
    caption, value = add_metric_row(form, "Time to first token", "From Send to the first token.")
    assert form.rowCount() == 1 and form.itemAt(0, QFormLayout.ItemRole.FieldRole).widget() is value
    assert caption.text() == "Time to first token"
    assert caption.toolTip() == value.toolTip() == "From Send to the first token."
    assert value.text() == UNKNOWN and value.objectName() == "metricValue" and value.accessibleName() == caption.text()
    assert value.wordWrap()


@pytest.mark.parametrize("view", [SpeculationView, TtftView, RooflineView, ToolCostView])
def test_every_figure_of_the_panels_views_has_that_shape(qtbot, view):
    widget = view()
    qtbot.addWidget(widget)
    forms = widget.findChildren(QFormLayout)
    assert forms
    for form in forms:
        for row in range(form.rowCount()):
            caption = form.itemAt(row, QFormLayout.ItemRole.LabelRole).widget()
            field = form.itemAt(row, QFormLayout.ItemRole.FieldRole).widget()
            value = field if isinstance(field, QLabel) else field.findChild(QLabel)  # a TTFT step: value, bar
            assert isinstance(caption, QLabel) and value.objectName() == "metricValue"
            # (the roofline names a figure with its value too: "Bytes read per token: —")
            assert value.accessibleName().startswith(caption.text()) and value.toolTip() == caption.toolTip() != ""
            assert value.text() in (UNKNOWN, "")
