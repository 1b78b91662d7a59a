"""Accessible names and descriptions: what a screen reader says for a control or a figure.

Owns the small helpers the widgets use so that every interactive control and every figure has a translated
accessible name (what it is, and for a figure its value) and, where the tooltip explains more, a description.
Owns no widget and no text of its own beyond the "name: value" pattern.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QAbstractButton, QFormLayout, QLabel, QWidget


def name(widget: QWidget, accessible_name: str, description: str | None = None) -> QWidget:
    """Give ``widget`` its accessible name and a description (its tooltip when none is given); returns it."""
    widget.setAccessibleName(accessible_name)
    text = widget.toolTip() if description is None else description
    if text:
        widget.setAccessibleDescription(text)
    return widget


def figure(caption: str, value: str) -> str:
    """A figure as a screen reader says it: "Time to first token: 86 ms"."""
    return QCoreApplication.translate("Accessibility", "{figure}: {value}").format(figure=caption, value=value)


def name_form_fields(form: QFormLayout) -> None:
    """Each field of ``form`` named after its row's label (its tooltip as the description); a button or check box
    keeps its own text as its name."""
    for row in range(form.rowCount()):
        label = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
        field = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
        if label is None or field is None or not isinstance(label.widget(), QLabel) or field.widget() is None:
            continue
        widget = field.widget()
        if isinstance(widget, QAbstractButton) and widget.text():
            widget.setAccessibleDescription(widget.toolTip())
            continue
        name(widget, label.widget().text().replace("&", ""))


def tab_order(*widgets: QWidget) -> None:
    """Tab visits ``widgets`` in this order, each with its own controls in theirs (compound widgets move whole:
    Qt ≥ 6.6)."""
    for first, second in zip(widgets, widgets[1:]):
        QWidget.setTabOrder(first, second)
