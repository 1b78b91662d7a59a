"""The performance panel's "Tools and constraints" view: what constrained decoding cost the reply per token (the
decode loop's wait for each mask, and the mask's build time, overlapped with the forward) and each tool call's time.

Owns this display only: the figures come from ``Metrics`` (``masked_tokens``, ``mask_wait_s``, ``mask_build_s``,
measured by ``engine.constrain.matcher``) and from the calls' records (``app.history.tool_record``: the time
around the MCP request). Hidden until a reply was constrained or called a tool.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.history.tool_record import ToolCallRecord
from app.ui.metric_rows import add_metric_row, metric_form


class ToolCostView(QWidget):
    """Mask time per token and the tool calls' times of the reply being written or the last one (no signals): two
    rows of the panel's figures (``app.ui.metric_rows``), each shown once it has something to say."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 6, 0, 0)
        layout.setSpacing(2)
        heading = QLabel(self.tr("Tools and constraints"))
        heading.setObjectName("sectionTitle")
        layout.addWidget(heading)
        self._form = metric_form()
        self._mask_caption, self.mask = add_metric_row(self._form, self.tr("Mask"), self.tr(
            "Constrained decoding (a JSON schema, a forced tool call): each step a mask allows only the tokens that "
            "keep the reply valid. 'Wait' is the decode loop's time per token waiting for the mask and applying it "
            "(its cost on the critical path); 'build' is llguidance computing it, overlapped with the forward. "
            "Measured with time.perf_counter around each step, summed over the reply."))
        self._calls_caption, self.calls = add_metric_row(self._form, self.tr("Tool calls"), self.tr(
            "Each tool call of the reply: the time from sending the request to the MCP server to its answer "
            "(or its failure), measured with time.perf_counter; a refused call took no time."))
        layout.addLayout(self._form)
        self._records: list[ToolCallRecord] = []
        self.reset()

    def reset(self) -> None:
        self._records = []
        for value in (self.mask, self.calls):
            value.setText("")
            self._form.setRowVisible(value, False)
        self.hide()

    @Slot(object)
    def show_metrics(self, metrics: Any) -> None:
        steps = getattr(metrics, "masked_tokens", 0) or 0
        wait, build = getattr(metrics, "mask_wait_s", None), getattr(metrics, "mask_build_s", None)
        if not steps or wait is None:
            return
        self.mask.setText(self.tr("{wait} ms/token wait · {build} ms/token build · {n} tokens").format(
            wait=f"{wait / steps * 1000:.3f}", build=f"{(build or 0.0) / steps * 1000:.3f}", n=steps))
        self._form.setRowVisible(self.mask, True)
        self.show()

    def add_call(self, record: ToolCallRecord) -> None:
        self._records.append(record)
        lines = [(f"{r.name}: {r.ms:g} ms" + ("" if r.ok else " ✗")) if r.name else f"⚠ {r.result[:80]}"
                 for r in self._records]
        self.calls.setText("\n".join(lines))
        self._form.setRowVisible(self.calls, True)
        self.show()

    def text(self) -> str:
        """The rows shown, "caption: value" each (the tests and the self-test read them)."""
        return "\n".join(f"{caption.text()}: {value.text()}"
                         for caption, value in ((self._mask_caption, self.mask), (self._calls_caption, self.calls))
                         if value.text())
