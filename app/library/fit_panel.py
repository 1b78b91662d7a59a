"""The fit estimate of one model file at a context length the user picks: will it fit in this machine's memory?

For every precision the engine offers, a row with the weights bytes, the KV cache at the chosen context, the
total (weights + KV + working allowance) against the free memory, and the verdict (fits / tight / will not
fit); under the table the formulas behind the selected row, with its numbers. Every figure is
``engine.library.fit.estimate``'s for the ``Architecture`` it is given (read from ``config.json`` or a GGUF
header by ``engine.library.hub``): this widget computes nothing of its own, it only lays the numbers out.

The context starts at the engine's default (4,096 tokens, or the model's reach when smaller) and keeps the
user's choice from model to model; the KV cache is counted at the window's KV precision (``set_kv_precision``: int8
is 1 byte per element plus a scale per head and position). The free memory is measured once per model shown (``fit.machine_memory``;
"Measure again" re-reads it), so all rows are judged against the same figure. Owns display only: no network,
no threads (an estimate is arithmetic).
"""

from __future__ import annotations

import importlib.util

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QPushButton, QSpinBox, QTableWidgetItem,
                               QToolButton, QVBoxLayout, QWidget)

from app.library.tables import read_only_table
from app.ui import theme
from engine.errors import EngineError
from engine.fmt import format_bytes
from engine.library import fit
from engine.library.arch import Architecture, engine_precisions
from engine.library.fit import FitEstimate, Memory

BNB_PRECISIONS = ("bnb-int8", "nf4", "fp4")
MAX_CONTEXT = 1 << 20  # when a model does not say how far it reaches
COLUMNS = 6


def verdict_colour(verdict: str) -> QColor:
    current = theme.current()
    green = "#3fb950" if current.name == "dark" else "#1a7f37"
    return QColor({"fits": green, "tight": current.warning}.get(verdict, current.error))


class FitPanel(QWidget):
    """Shows ``set_architecture``'s model; ``estimates`` (precision → ``FitEstimate``) are the numbers shown."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.arch: Architecture | None = None
        self.memory: Memory | None = None
        self.estimates: dict[str, FitEstimate] = {}
        self.auto_precision = ""
        self.label = ""  # the model shown: repo, and the GGUF file when one
        self._download_bytes: int | None = None
        self._context_chosen = False  # the user set the context: keep it from model to model
        self.kv_precision = "auto"  # the KV cache's precision the estimates count (the window's choice)
        self._has_bnb = importlib.util.find_spec("bitsandbytes") is not None
        theme.watcher().theme_changed.connect(self.on_theme_changed)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        title = QLabel(self.tr("Will it fit? (estimated before downloading, from the config alone)"))
        title.setObjectName("sectionTitle")
        layout.addWidget(title)
        self.placeholder = QLabel(self.tr("Select a model to see whether it fits in this machine's memory."))
        self.placeholder.setWordWrap(True)
        self.placeholder.setObjectName("footer")
        layout.addWidget(self.placeholder)
        self.body = QWidget()
        body = QVBoxLayout(self.body)
        body.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel(self.tr("Context length")))
        self.context = QSpinBox()
        self.context.setRange(1, MAX_CONTEXT)
        self.context.setSingleStep(512)
        self.context.setGroupSeparatorShown(True)
        self.context.setSuffix(self.tr(" tokens"))
        self.context.setAccessibleName(self.tr("Context length"))
        self.context.setKeyboardTracking(False)  # recompute when typing ends, not per digit
        self.context.setToolTip(self.tr("How many tokens of conversation the KV cache must hold"))
        # the app's stylesheet pads spin boxes without sizing their arrows, which then draw as a sliver
        self.context.setStyleSheet("QSpinBox { padding-right: 20px; } "
                                   "QSpinBox::up-button, QSpinBox::down-button { width: 18px; }")
        self.context.setMinimumWidth(self.context.fontMetrics().horizontalAdvance("1,048,576 tokens") + 44)
        self.context.valueChanged.connect(self.on_context_changed)
        row.addWidget(self.context)
        self.halve_button = QToolButton()
        self.halve_button.setText("÷2")
        self.halve_button.setToolTip(self.tr("Half the context"))
        self.halve_button.clicked.connect(self.on_halve_clicked)
        row.addWidget(self.halve_button)
        self.double_button = QToolButton()
        self.double_button.setText("×2")
        self.double_button.setToolTip(self.tr("Twice the context (up to the model's limit)"))
        self.double_button.clicked.connect(self.on_double_clicked)
        row.addWidget(self.double_button)
        row.addSpacing(12)
        self.memory_label = QLabel()
        self.memory_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.memory_label, 1)
        self.measure_button = QPushButton(self.tr("Measure again"))
        self.measure_button.setToolTip(self.tr("Read this machine's free memory again"))
        self.measure_button.clicked.connect(self.on_measure_clicked)
        row.addWidget(self.measure_button)
        body.addLayout(row)
        self.table = read_only_table([self.tr("Precision"), self.tr("Weights"), self.tr("KV cache"),
                                      self.tr("Total needed"), self.tr("Free memory"), self.tr("Verdict")],
                                     stretch=COLUMNS - 1, accessible_name=self.tr("Memory needed per precision"))
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.itemSelectionChanged.connect(self.on_row_selected)
        body.addWidget(self.table)
        self.formulas = QLabel()
        self.formulas.setWordWrap(True)
        self.formulas.setTextFormat(Qt.TextFormat.PlainText)
        self.formulas.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        small = self.formulas.font()
        small.setPointSizeF(small.pointSizeF() * 0.92)
        self.formulas.setFont(small)
        body.addWidget(self.formulas)
        layout.addWidget(self.body)
        self.body.hide()

    # -- what is shown --------------------------------------------------------------------------
    def clear(self, message: str = "") -> None:
        """No estimate; ``message`` says why (reading the config, a refusal, an error)."""
        self.arch, self.estimates, self.auto_precision = None, {}, ""
        self.placeholder.setText(message or self.tr("Select a model to see whether it fits in this machine's memory."))
        self.placeholder.show()
        self.body.hide()

    def set_architecture(self, arch: Architecture, label: str, download_bytes: int | None = None,
                         memory: Memory | None = None) -> None:
        """Estimate ``arch`` (called ``label``) at every precision; the context starts at the engine's default."""
        self.arch, self.label, self._download_bytes = arch, label, download_bytes
        try:
            self.memory = memory or fit.machine_memory()
        except EngineError as exc:
            self.clear(str(exc))
            return
        limit = arch.context_length or MAX_CONTEXT
        wanted = self.context.value() if self._context_chosen else fit.DEFAULT_CONTEXT
        self.context.blockSignals(True)
        self.context.setRange(1, limit)
        self.context.setValue(min(wanted, limit))
        self.context.blockSignals(False)
        self.placeholder.hide()
        self.body.show()
        self.recompute()

    def set_kv_precision(self, kv_precision: str) -> None:
        """Count the KV cache at ``kv_precision`` (``engine.inputs.KV_PRECISIONS``) from now on."""
        if kv_precision != self.kv_precision:
            self.kv_precision = kv_precision
            self.recompute()

    @Slot(object)
    def on_theme_changed(self, _theme: object) -> None:
        self.recompute()  # the verdicts' colours and the muted rows follow light/dark

    def recompute(self) -> None:
        if self.arch is None or self.memory is None:
            return
        context = self.context.value()
        try:
            auto = fit.estimate(self.arch, model=self.label, context=context, precision="auto", memory=self.memory,
                                download_bytes=self._download_bytes, kv_precision=self.kv_precision)
            self.estimates = {p: fit.estimate(self.arch, model=self.label, context=context, precision=p,
                                              memory=self.memory, download_bytes=self._download_bytes,
                                              kv_precision=self.kv_precision)
                              for p in engine_precisions()}
        except EngineError as exc:
            self.clear(str(exc))
            return
        self.auto_precision = auto.precision
        self.memory_label.setText(self.tr("{free} free on {device}").format(
            free=format_bytes(self.memory.free_bytes), device=self.memory.device))
        self.memory_label.setToolTip(self.memory.source)
        header = (self.tr("int8 KV cache at {n} tokens") if self.kv_precision == "int8"
                  else self.tr("KV cache at {n} tokens"))
        self.table.setHorizontalHeaderItem(2, QTableWidgetItem(header.format(n=f"{context:,}")))
        selected = self._selected_precision() or self.auto_precision
        self.table.blockSignals(True)
        self.table.setRowCount(len(self.estimates))
        for row, (precision, est) in enumerate(self.estimates.items()):
            self._fill_row(row, precision, est, auto.per_precision[row])
        self.table.blockSignals(False)
        self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height() + 2 * self.table.frameWidth()
                                  + sum(self.table.rowHeight(r) for r in range(self.table.rowCount())))
        self._select(selected)

    def _fill_row(self, row: int, precision: str, est: FitEstimate, per: fit.PrecisionFit) -> None:
        note = per.note if not per.usable else ""
        if not note and precision in BNB_PRECISIONS and not self._has_bnb:
            note = self.tr("needs bitsandbytes, which is not installed")
        name = precision + (self.tr("  (auto)") if precision == self.auto_precision else "")
        cells = [name, format_bytes(est.weights_bytes), format_bytes(est.kv_bytes), format_bytes(est.total_bytes),
                 format_bytes(est.memory.free_bytes), self._verdict_text(est.verdict)]
        exact = ["", f"{est.weights_bytes:,} B", self.tr("{kv} B ({per} B per token)").format(
                     kv=f"{est.kv_bytes:,}", per=f"{est.kv_bytes_per_token:,}"),
                 f"{est.total_bytes:,} B", f"{est.memory.free_bytes:,} B", est.verdict_rule]
        if note:
            cells[-1] = self.tr("cannot load: {why}").format(why=note)
        for column, (text, tip) in enumerate(zip(cells, exact)):
            item = QTableWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, precision)
            if tip:
                item.setToolTip(tip)
            if column:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if note:
                item.setForeground(QColor(theme.current().muted))
            elif column == COLUMNS - 1:
                item.setForeground(verdict_colour(est.verdict))
                font = QFont(item.font())
                font.setBold(True)
                item.setFont(font)
                item.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(row, column, item)

    def _verdict_text(self, verdict: str) -> str:
        return {"fits": self.tr("fits"), "tight": self.tr("tight"), "will not fit": self.tr("will not fit")}.get(
            verdict, verdict)

    def _selected_precision(self) -> str | None:
        items = self.table.selectedItems()
        return items[0].data(Qt.ItemDataRole.UserRole) if items else None

    def _select(self, precision: str) -> None:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).data(Qt.ItemDataRole.UserRole) == precision:
                self.table.selectRow(row)
                break
        self.on_row_selected()

    def formula_text(self, est: FitEstimate) -> str:
        lines = [
            self.tr("Parameters: {formula}. The seeds' estimate V·d + 12·L·d² gives {estimate}.").format(
                formula=est.params_formula, estimate=f"{est.params_estimate:,}"),
            self.tr("KV cache in {precision}: {formula}. Without GQA (2 · L · context · d · bytes): "
                    "{no_gqa}.").format(
                precision=est.precision, formula=est.kv_formula, no_gqa=format_bytes(est.kv_bytes_no_gqa)),
            self.tr("Total: {weights} weights + {kv} KV + {working} working = {total} against {free} free "
                    "({device}): {verdict}.").format(
                weights=format_bytes(est.weights_bytes), kv=format_bytes(est.kv_bytes),
                working=format_bytes(est.working_bytes), total=format_bytes(est.total_bytes),
                free=format_bytes(est.memory.free_bytes), device=est.memory.device,
                verdict=self._verdict_text(est.verdict)),
            self.tr("Rule: {rule}.").format(rule=est.verdict_rule),
        ]
        if est.download_bytes is not None:
            lines.append(self.tr("Download: {size}.").format(size=format_bytes(est.download_bytes)))
        return "\n".join(lines)

    # -- slots ----------------------------------------------------------------------------------
    @Slot(int)
    def on_context_changed(self, _value: int) -> None:
        self._context_chosen = True
        self.recompute()

    @Slot()
    def on_halve_clicked(self) -> None:
        self.context.setValue(max(1, self.context.value() // 2))

    @Slot()
    def on_double_clicked(self) -> None:
        self.context.setValue(min(self.context.maximum(), self.context.value() * 2))

    @Slot()
    def on_measure_clicked(self) -> None:
        if self.arch is not None:
            self.set_architecture(self.arch, self.label, self._download_bytes)

    @Slot()
    def on_row_selected(self) -> None:
        est = self.estimates.get(self._selected_precision() or self.auto_precision)
        self.formulas.setText(self.formula_text(est) if est is not None else "")
