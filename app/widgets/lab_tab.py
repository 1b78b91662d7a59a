"""The Lab tab: pick one of the inference-lab experiments, run it on the loaded model, see and export it.

The experiment runs on the model's worker thread as a bridge task (``engine.lab``), so the GUI
never touches a tensor; progress comes back through a small relay QObject (a queued signal), and
Cancel sets that one task's cancel flag (``Bridge.stop`` would also stop a queued reply). The result
(a plain ``ExperimentResult``) is drawn with ``engine.lab.charts`` on a matplotlib canvas, listed in a
table with its key figures, flags and notes, and exported as CSV or PNG exactly as the headless
``python -m engine lab`` writes them. The precision A/B entry says up front that it loads other copies
of the model. When the window's model is on a server (``engine.remote``), the experiments that need the
model's internals (``ExperimentInfo.needs_local``) are disabled in the list, with a tooltip and a note
saying they need a model loaded on this computer; the others run through the server's API and their
results name it. A vision-language model runs "What an image costs" alone (``ExperimentInfo.needs_vision``: its task
gets the ``VisionModel``, ``Bridge.submit_task(vision=True)``), a text model all but that one. Owns display and the
run/cancel/export controls; measures nothing itself.
"""

from __future__ import annotations

import html
import threading
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_qtagg import FigureCanvasQTAgg
from matplotlib.figure import Figure
from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QComboBox, QFileDialog, QHBoxLayout, QLabel,
                               QProgressBar, QPushButton, QScrollArea, QSpinBox, QSplitter, QTableWidget,
                               QTableWidgetItem, QTextBrowser, QVBoxLayout, QWidget)

from app.state.model_vision import sees_images
from app.ui import theme
from app.ui import accessibility
from app.ui.engine_texts import engine_text
from app.ui.lab_names import human, humanize
from app.widgets.step_clock import StepClock
from engine.fmt import outside_text
from engine.lab import EXPERIMENTS, ExperimentResult, LabOptions, run_experiment
from engine.lab.charts import draw, save_png
from engine.lab.results import write_csv

MAX_TABLE_ROWS = 2000  # the attention table of a big model has layers × heads × 2 rows; the CSV has them all
CHART_HEIGHT = 300  # px: a line or bar chart
HEATMAP_HEIGHT = 420  # px per attention heatmap: room for ~40 token labels


class _ProgressRelay(QObject):
    """Carries progress from the worker thread to the GUI thread.

    Signals:
        progressed(float, str): fraction done (0..1) and what runs now.
    """

    progressed = Signal(float, str)

    def report(self, fraction: float, message: str) -> None:
        self.progressed.emit(float(fraction), message)


class _LabJob:
    """A ``fn(loaded, cancel)`` for ``submit_task`` that this tab can cancel on its own."""

    def __init__(self, key: str, options: LabOptions, relay: _ProgressRelay) -> None:
        self.key = key
        self.options = options
        self.relay = relay  # kept alive by the job while the worker may still report
        self._lock = threading.Lock()
        self._event: threading.Event | None = None
        self._cancelled = False

    def __call__(self, loaded: Any, cancel: threading.Event) -> ExperimentResult:
        with self._lock:
            self._event = cancel
            if self._cancelled:
                cancel.set()
        return run_experiment(self.key, loaded, cancel, self.options, self.relay.report)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._event is not None:
                self._event.set()


class LabTab(QWidget):
    """Run an experiment, watch its progress, read its chart and table, export it.

    Signals:
        result_shown(object): an ``ExperimentResult`` was drawn and listed.
        run_failed(str): the experiment failed or was cancelled; one line.
    """

    result_shown = Signal(object)
    run_failed = Signal(str)

    def __init__(self, bridge: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._job: _LabJob | None = None
        self._task_id = 0
        self._result: ExperimentResult | None = None
        self._has_model = getattr(bridge, "facts", None) is not None
        self._remote = bool(getattr(getattr(bridge, "facts", None), "remote", False))
        self._vision = sees_images(getattr(bridge, "facts", None))  # runs the vision experiment, and it alone

        self.experiment_box = QComboBox()
        for item in EXPERIMENTS:
            self.experiment_box.addItem(engine_text(item.title), item.key)
        self.quick_box = QCheckBox(self.tr("quick"))
        self.quick_box.setChecked(True)
        self.quick_box.setToolTip(self.tr("fewer repetitions, lengths and tokens: seconds to a few minutes on a CPU"))
        self.layer_spin = QSpinBox()
        self.layer_spin.setPrefix(self.tr("layer "))
        self.head_spin = QSpinBox()
        self.head_spin.setPrefix(self.tr("head "))
        self.run_button = QPushButton(self.tr("Run"))
        self.cancel_button = QPushButton(self.tr("Cancel"))
        self.cancel_button.setEnabled(False)
        self.description = QLabel("")
        self.description.setWordWrap(True)
        self.warning = QLabel("")
        self.warning.setObjectName("notice")
        self.warning.setWordWrap(True)
        self.source_note = QLabel("")  # on a server: what runs there and what needs a local model
        self.source_note.setTextFormat(Qt.TextFormat.PlainText)  # it names the server's model: never markup
        self.source_note.setObjectName("notice")
        self.source_note.setWordWrap(True)
        self.source_note.setVisible(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setValue(0)
        self.status_label = QLabel(self.tr("Load a model to run an experiment.") if not self._has_model else "")
        self.status_label.setWordWrap(True)
        self._clock = StepClock(self.status_label, self)  # a step's seconds: some report no progress while they run
        self.figure = Figure(figsize=(6.0, 4.0))
        self.figure.set_facecolor(theme.current().surface)  # before any result too: not a white box in dark
        self.canvas = FigureCanvasQTAgg(self.figure)
        self.canvas.setMinimumHeight(CHART_HEIGHT)
        self.chart_scroll = QScrollArea()  # stacked heatmaps need more height than the dock has
        self.chart_scroll.setWidgetResizable(True)
        self.chart_scroll.setWidget(self.canvas)
        self.table = QTableWidget(0, 0)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.findings = QTextBrowser()
        self.findings.setMaximumHeight(150)
        self.export_csv_button = QPushButton(self.tr("Export CSV…"))
        self.export_png_button = QPushButton(self.tr("Export PNG…"))
        for button in (self.export_csv_button, self.export_png_button):
            button.setEnabled(False)

        accessibility.name(self.experiment_box, self.tr("Experiment"), self.tr("The lab experiment to run"))
        accessibility.name(self.layer_spin, self.tr("Layer"), self.tr("The attention layer to draw"))
        accessibility.name(self.head_spin, self.tr("Head"), self.tr("The attention head to draw"))
        accessibility.name(self.chart_scroll, self.tr("Experiment chart"))
        accessibility.name(self.table, self.tr("Experiment results"), self.tr("The measured rows of the last run"))
        accessibility.name(self.findings, self.tr("Findings"), self.tr("What the last run shows, and its flags"))
        theme.watcher().theme_changed.connect(self.on_theme_changed)  # the chart follows light/dark

        # Two rows: the tab usually lives in a ~380 px side dock.
        controls = QHBoxLayout()
        controls.addWidget(self.quick_box)
        controls.addWidget(self.layer_spin)
        controls.addWidget(self.head_spin)
        controls.addStretch(1)
        controls.addWidget(self.run_button)
        controls.addWidget(self.cancel_button)
        exports = QHBoxLayout()
        exports.addStretch(1)
        exports.addWidget(self.export_csv_button)
        exports.addWidget(self.export_png_button)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.chart_scroll)
        split.addWidget(self.table)
        split.addWidget(self.findings)
        layout = QVBoxLayout(self)
        layout.addWidget(self.source_note)
        layout.addWidget(self.experiment_box)
        layout.addLayout(controls)
        layout.addWidget(self.description)
        layout.addWidget(self.warning)
        layout.addWidget(self.progress)
        layout.addWidget(self.status_label)
        layout.addWidget(split, 1)
        layout.addLayout(exports)

        self.experiment_box.currentIndexChanged.connect(self.on_experiment_box_changed)
        self.run_button.clicked.connect(self.on_run_clicked)
        self.cancel_button.clicked.connect(self.on_cancel_clicked)
        self.export_csv_button.clicked.connect(self.on_export_csv_clicked)
        self.export_png_button.clicked.connect(self.on_export_png_clicked)
        bridge.task_finished.connect(self.on_bridge_task_finished)
        bridge.task_failed.connect(self.on_bridge_task_failed)
        bridge.model_loaded.connect(self.on_bridge_model_loaded)
        facts = getattr(bridge, "facts", None)
        if facts is not None:
            self._set_ranges(facts)
        self._apply_source(facts)
        self.on_experiment_box_changed(self.experiment_box.currentIndex())
        self._update_buttons()

    # -- public -------------------------------------------------------------------------------------
    @property
    def result(self) -> ExperimentResult | None:
        return self._result

    def select(self, key: str) -> None:
        index = self.experiment_box.findData(key)
        if index < 0:
            raise ValueError(f"unknown experiment {key!r}")
        self.experiment_box.setCurrentIndex(index)

    def can_run(self, key: str) -> bool:
        """Whether ``key`` can run on the model now loaded (one that needs internals cannot on a server; the one for
        vision-language models on those alone, and only it on them: ``engine.lab.experiments.check_runnable``)."""
        info = self._info(key)
        return not (self._remote and info.needs_local) and info.needs_vision == self._vision

    def run(self) -> int:
        """Submit the selected experiment; returns the task id (0 when it cannot run now)."""
        key = self.experiment_box.currentData()
        if self._job is not None or not self._has_model or not self.can_run(key):
            return 0
        options = LabOptions(quick=self.quick_box.isChecked(), layer=self.layer_spin.value(),
                             head=self.head_spin.value())
        relay = _ProgressRelay()
        relay.progressed.connect(self.on_relay_progressed)
        self._job = _LabJob(key, options, relay)
        self._task_id = self._bridge.submit_task(self._job, vision=self._info(key).needs_vision)
        if not self._task_id:
            self._job = None
            self.status_label.setText(self.tr("the engine is shutting down"))
            return 0
        self.progress.setValue(0)
        self._clock.step(self.tr("running {name}…").format(name=self.experiment_box.currentText()))
        self._update_buttons()
        return self._task_id

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()
            self._clock.step(self.tr("cancelling…"))

    def export_csv(self, path: str | Path) -> Path:
        if self._result is None:
            raise ValueError("nothing to export yet")
        return write_csv(self._result, Path(path))

    def export_png(self, path: str | Path) -> Path:
        if self._result is None:
            raise ValueError("nothing to export yet")
        return save_png(self._result, Path(path))

    def _cell_text(self, value: Any, missing: str) -> str:
        """A figure as words: yes/no for a flag, ``missing`` for none (never Python's True/None), 4 digits."""
        if isinstance(value, bool):
            return self.tr("yes") if value else self.tr("no")
        return missing if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)

    def show_result(self, result: ExperimentResult) -> None:
        """Draw, list and summarise ``result``."""
        self._result = result
        self.canvas.setMinimumHeight(HEATMAP_HEIGHT * len(result.heatmaps) + CHART_HEIGHT if result.heatmaps
                                     else CHART_HEIGHT)
        self._draw()
        self.table.clear()
        self.table.setColumnCount(len(result.columns))
        self.table.setHorizontalHeaderLabels([human(c) for c in result.columns])
        for c, column in enumerate(result.columns):  # the raw key on hover: the CSV's and JSON's column name
            self.table.horizontalHeaderItem(c).setToolTip(column)
        rows = result.rows[:MAX_TABLE_ROWS]
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, cell in enumerate(row):
                text = self._cell_text(cell, "")
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()  # whole headers: the default width cut their words (a scroll bar is fine)
        parts = [f"<b>{html.escape(result.title)}</b> — {html.escape(result.model)}, {result.elapsed_s:.1f} s"]
        if len(result.rows) > MAX_TABLE_ROWS:
            parts.append("<i>" + self.tr("table shows the first {shown} of {total} rows; the CSV has all").format(
                shown=MAX_TABLE_ROWS, total=len(result.rows)) + "</i>")
        parts += [f"<span style='color:#b54708'>⚠ {html.escape(flag)}</span>" for flag in result.flags]
        parts.append("<br>".join(f"{html.escape(human(k))}: <b>{html.escape(self._cell_text(v, '—'))}</b>"
                                 for k, v in result.summary.items()))
        parts += [f"<small>{html.escape(note)}</small>" for note in result.notes]
        self.findings.setHtml("<br>".join(parts))
        self._update_buttons()
        self.result_shown.emit(result)

    # -- slots --------------------------------------------------------------------------------------
    @Slot(int)
    def on_experiment_box_changed(self, _index: int) -> None:
        key = self.experiment_box.currentData()
        item = self._info(key)
        self.description.setText(engine_text(item.description))
        if not self.can_run(key):
            self.warning.setText(self._why_not(item))
        else:
            self.warning.setText(self.tr("This experiment temporarily loads other precisions of the model, one at a "
                                         "time; it needs extra memory and takes longer.") if item.loads_models else "")
        self.warning.setVisible(bool(self.warning.text()))
        attention = key == "attention"
        self.layer_spin.setVisible(attention)
        self.head_spin.setVisible(attention)
        self._update_buttons()

    @Slot()
    def on_run_clicked(self) -> None:
        self.run()

    @Slot()
    def on_cancel_clicked(self) -> None:
        self.cancel()

    @Slot()
    def on_export_csv_clicked(self) -> None:
        self._export(self.tr("CSV files (*.csv)"), ".csv", self.export_csv)

    @Slot()
    def on_export_png_clicked(self) -> None:
        self._export(self.tr("PNG images (*.png)"), ".png", self.export_png)

    @Slot(float, str)
    def on_relay_progressed(self, fraction: float, message: str) -> None:
        if self._job is not None:
            self.progress.setValue(int(round(fraction * 100)))
            self._clock.step(message)

    @Slot(object)
    def on_bridge_model_loaded(self, facts: object) -> None:
        self._has_model = True
        self._set_ranges(facts)
        self._apply_source(facts)
        self.status_label.setText("")
        self._update_buttons()

    @Slot(int, object)
    def on_bridge_task_finished(self, task_id: int, result: object) -> None:
        if task_id != self._task_id or self._job is None:
            return
        self._job = None
        self._clock.stop()
        self.progress.setValue(100)
        self.status_label.setText(self.tr("done"))
        if isinstance(result, ExperimentResult):
            self.show_result(result)
        self._update_buttons()

    @Slot(int, str)
    def on_bridge_task_failed(self, task_id: int, message: str) -> None:
        if task_id != self._task_id or self._job is None:
            return
        self._job = None
        self._clock.stop()
        self.progress.setValue(0)
        self.status_label.setText(engine_text(message))
        self._update_buttons()
        self.run_failed.emit(message)

    @Slot(object)
    def on_theme_changed(self, _theme: object) -> None:
        if self._result is not None:
            self._draw()
        else:
            self.figure.set_facecolor(theme.current().surface)
            self.canvas.draw_idle()

    # -- internals ----------------------------------------------------------------------------------
    def _draw(self) -> None:
        """The result's chart in the window's theme (exports keep matplotlib's own light style)."""
        assert self._result is not None
        current = theme.current()
        with matplotlib.rc_context(theme.matplotlib_rc(current)):
            self.figure.set_facecolor(current.surface)
            draw(humanize(self._result), self.figure)
        self.canvas.draw_idle()

    @staticmethod
    def _info(key: str) -> Any:
        return next(e for e in EXPERIMENTS if e.key == key)

    def _needs_local_text(self) -> str:
        return self.tr("Needs a model loaded on this computer: it uses the model's internals (its KV cache, "
                       "attention weights or weights), which a server's API does not share.")

    def _why_not(self, info: Any) -> str:
        """Why ``info``'s experiment cannot run on the model loaded now."""
        if info.needs_vision and not self._vision:
            return self.tr("Needs a vision-language model (LLaVA, SmolVLM, Qwen2.5-VL, Gemma 3…): load one to see "
                           "what an image costs.")
        if self._vision and not info.needs_vision:
            return self.tr("Runs on a text model: a vision-language model runs “What an image costs”.")
        return self._needs_local_text()

    def _apply_source(self, facts: Any) -> None:
        """Enable what the loaded model can run: everything here, only the API's experiments on a server."""
        self._remote = bool(getattr(facts, "remote", False))
        self._vision = sees_images(facts)
        items = self.experiment_box.model()
        for i, info in enumerate(EXPERIMENTS):
            allowed = self.can_run(info.key)
            items.item(i).setEnabled(allowed)
            why = self._why_not(info)
            self.experiment_box.setItemData(i, None if allowed else why, Qt.ItemDataRole.ToolTipRole)
        if self._remote:
            self.source_note.setText(self.tr("On the server {url} ({model}): timing and sampling run through its API "
                                             "and are measured here, network included; the others need a model "
                                             "loaded on this computer.").format(url=facts.source,
                                                                                model=outside_text(facts.name)))
        self.source_note.setVisible(self._remote)
        if not self.can_run(self.experiment_box.currentData()):
            first = next(i for i, info in enumerate(EXPERIMENTS) if self.can_run(info.key))
            self.experiment_box.setCurrentIndex(first)
        else:
            self.on_experiment_box_changed(self.experiment_box.currentIndex())

    def _set_ranges(self, facts: Any) -> None:
        layers, heads = int(getattr(facts, "layers", 1)), int(getattr(facts, "heads", 1))
        self.layer_spin.setRange(0, max(0, layers - 1))
        self.layer_spin.setValue(layers // 2)  # middle layers tend to show the most structured heads
        self.head_spin.setRange(0, max(0, heads - 1))

    def _update_buttons(self) -> None:
        running = self._job is not None
        self.run_button.setEnabled(self._has_model and not running and self.can_run(self.experiment_box.currentData()))
        self.cancel_button.setEnabled(running)
        self.experiment_box.setEnabled(not running)
        has_result = self._result is not None
        self.export_csv_button.setEnabled(has_result)
        self.export_png_button.setEnabled(has_result)

    def _export(self, filter_text: str, suffix: str, write) -> None:
        if self._result is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, self.tr("Export"), f"{self._result.key}{suffix}", filter_text)
        if not path:
            return
        try:
            written = write(path)
        except OSError as exc:
            why = exc.strerror or exc
            self.status_label.setText(self.tr("could not write {path}: {why}").format(path=path, why=why))
            return
        self.status_label.setText(self.tr("saved {path}").format(path=written))
