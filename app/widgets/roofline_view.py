"""The performance panel's Roofline section: the reply's decode against what this device's memory allows, live.

Owns its rows — bytes read per token (weights + the KV cache at the current length, split), achieved bandwidth
(bytes × decode tok/s), the device's measured memory bandwidth with "Measure again", the ceiling tok/s it allows
and the verdict (bandwidth-bound, overhead-bound, machine busy), with when the bandwidth was measured and whether the
machine was busy then — and getting what they need: the weight bytes a
decode step reads and the stored bandwidth (measured once per device into the data folder, again on request) by
a bridge task on the worker, where the model is; other processes' CPU time during the reply from psutil
(``engine.bench.roofline.CpuWatch``, started when a reply starts). The arithmetic is ``engine.bench.roofline``'s;
this module shows it. A model on a server has no roofline here (its memory is not this machine's): "—".

The other processes' share is measured live only, so ``notes`` gives the verdict and that share for the reply's
stored record (``PerfRecord.roofline_verdict``, ``others_cpu_share``), and a record paged back or reopened shows
them as said live (issue 41: "machine busy" live, "overhead-bound" for the same reply reopened).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication, QDateTime, QObject, Qt, Slot
from PySide6.QtWidgets import QLabel, QPushButton, QVBoxLayout, QWidget

from app.ui import accessibility
from app.ui.metric_help import explain
from app.ui.metric_rows import add_metric_row, metric_form
from engine.bench import roofline as rl
from engine.errors import EngineError
from engine.fmt import format_bytes, format_rate

ROWS = (("roofline_bytes", QT_TRANSLATE_NOOP("RooflineView", "Bytes read per token")),
        ("roofline_achieved", QT_TRANSLATE_NOOP("RooflineView", "Achieved bandwidth")),
        ("roofline_bandwidth", QT_TRANSLATE_NOOP("RooflineView", "Memory bandwidth")),
        ("roofline_ceiling", QT_TRANSLATE_NOOP("RooflineView", "Ceiling")),
        ("roofline_verdict", QT_TRANSLATE_NOOP("RooflineView", "Verdict")))
VERDICT_TEXTS = {"bandwidth-bound": QT_TRANSLATE_NOOP("RooflineView", "bandwidth-bound"),
                 "overhead-bound": QT_TRANSLATE_NOOP("RooflineView", "overhead-bound"),
                 "machine busy": QT_TRANSLATE_NOOP("RooflineView", "machine busy")}


def _sources(loaded: Any, force: bool) -> tuple[int, dict[str, Any]] | None:
    """On the worker: the weight bytes one decode step reads and the device's bandwidth (measured when not stored
    or ``force``); None for a model on a server."""
    try:
        weights = rl.weights_read_per_token(loaded)
    except EngineError:  # a server's model: no weights here
        return None
    return weights, rl.measure_and_store(loaded.facts.device, force=force)


class RooflineView(QWidget):
    """The roofline rows; ``attach(bridge)`` lets it ask the worker, ``show_metrics`` follows the reply."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._bridge: QObject | None = None
        self._task: int | None = None
        self._weights: int | None = None
        self._bandwidth: float | None = None
        self._entry: dict[str, Any] | None = None  # the stored bandwidth: figure, when and under what load
        self._figures: rl.Roofline | None = None
        self._metrics: Any = None
        self._live = True
        self._watch = rl.CpuWatch()
        # (a Metrics, the share measured for it): the final one's share is read once, so the verdict shown live and
        # the one stored with the reply (``notes``) rest on the same figure whichever of the two asks first
        self._held: tuple[Any, float | None] | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        form = metric_form()
        self.values: dict[str, QLabel] = {}
        self.captions: dict[str, QLabel] = {}
        for key, caption in ROWS:
            self.captions[key], self.values[key] = add_metric_row(form, self.tr(caption), explain(key))
        layout.addLayout(form)
        self.measure_button = QPushButton(self.tr("Measure again"))
        self.measure_button.setToolTip(self.tr("Measure this device's memory bandwidth again (a few seconds; it "
                                               "waits for the reply being generated)"))
        self.measure_button.setEnabled(False)
        self.measure_button.clicked.connect(self.on_measure_clicked)
        layout.addWidget(self.measure_button, 0, Qt.AlignmentFlag.AlignLeft)
        self._name_rows()

    # -- public ---------------------------------------------------------------------------------------
    def attach(self, bridge: QObject) -> None:
        """Follow ``bridge``'s loads and run the measurements on its worker."""
        self._bridge = bridge
        bridge.model_loaded.connect(self.on_model_loaded)  # type: ignore[attr-defined]
        bridge.task_finished.connect(self.on_task_finished)  # type: ignore[attr-defined]
        bridge.task_failed.connect(self.on_task_failed)  # type: ignore[attr-defined]

    def start(self) -> None:
        """A reply starts: other processes' CPU time is counted from now."""
        self._watch.start()

    def reset(self) -> None:
        self._metrics = None
        self._figures = None
        self._watch.start()
        self._show()

    def show_metrics(self, metrics: Any, live: bool = True) -> None:
        """Follow ``metrics`` (live: the reply streaming now, so the CPU watch applies; else stored figures)."""
        self._metrics = metrics
        self._live = live
        self._show()

    def notes(self, metrics: Any) -> dict[str, Any]:
        """For a live reply's stored record: the verdict on its final ``metrics`` now, with the other processes' CPU
        share it rests on; {} where there is no verdict (a server's model, no bandwidth yet)."""
        if self._weights is None or getattr(metrics, "unknown", ()):
            return {}
        figures = rl.roofline(self._weights, metrics, self._entry, self._live_share(metrics))
        if figures.verdict is None:
            return {}
        return {"roofline_verdict": figures.verdict, "others_cpu_share": figures.others_cpu_share}

    def figures(self) -> rl.Roofline | None:
        """The roofline now shown (None before a local reply with a rate and a bandwidth)."""
        return self._figures

    def ceiling_tok_s(self) -> float | None:
        if self._figures is not None:
            return self._figures.ceiling_tok_s
        return self._bandwidth / self._weights if self._bandwidth and self._weights else None

    def busy(self) -> bool:
        """Whether a measurement is on its way (tests wait for it)."""
        return self._task is not None

    # -- slots ----------------------------------------------------------------------------------------
    @Slot(object)
    def on_model_loaded(self, _facts: Any) -> None:
        self._weights = self._bandwidth = self._entry = None
        self._request(force=False)

    @Slot()
    def on_measure_clicked(self) -> None:
        self._request(force=True)

    @Slot(int, object)
    def on_task_finished(self, task_id: int, result: object) -> None:
        if task_id != self._task:
            return
        self._task = None
        if isinstance(result, tuple):
            self._weights, entry = result
            self._bandwidth, self._entry = float(entry["read_bytes_s"]), entry
        self.measure_button.setEnabled(result is not None)
        self._show()

    @Slot(int, str)
    def on_task_failed(self, task_id: int, message: str) -> None:
        if task_id != self._task:
            return
        self._task = None
        self.measure_button.setEnabled(True)
        self.values["roofline_bandwidth"].setText(self.tr("not measured: {why}").format(why=message))

    # -- internals ------------------------------------------------------------------------------------
    def _request(self, force: bool) -> None:
        if self._bridge is None:
            return
        self.measure_button.setEnabled(False)
        self.values["roofline_bandwidth"].setText(self.tr("measuring…"))
        self._task = self._bridge.submit_task(lambda loaded, _cancel: _sources(loaded, force))  # type: ignore

    def _show(self) -> None:
        v = self.values
        local = self._weights is not None and not (self._metrics is not None and getattr(self._metrics, "unknown", ()))
        if self._task is None:
            v["roofline_bandwidth"].setText(self._bandwidth_text())
        if not local:
            self._figures = None
            for key in ("roofline_bytes", "roofline_achieved", "roofline_ceiling", "roofline_verdict"):
                v[key].setText("—")
            self._name_rows()
            return
        assert self._weights is not None
        stored = None if self._live else getattr(self._metrics, "roofline_verdict", None)  # as said live
        share = (self._live_share(self._metrics) if self._live else getattr(self._metrics, "others_cpu_share", None)
                 ) if self._metrics is not None else None
        figures = rl.roofline(self._weights, self._metrics, self._entry, share)
        self._figures = figures
        v["roofline_bytes"].setText(self.tr("{total} = weights {weights} + KV {kv}").format(
            total=format_bytes(figures.bytes_per_token), weights=format_bytes(figures.weights_bytes),
            kv=format_bytes(figures.kv_bytes)))
        share = figures.share
        v["roofline_achieved"].setText(format_rate(figures.achieved_bytes_s) + (
            self.tr(" ({share} % of measured)").format(share=f"{100 * share:.0f}") if share is not None else ""))
        ceiling = figures.ceiling_tok_s
        v["roofline_ceiling"].setText("—" if ceiling is None else f"{ceiling:.0f} tok/s")
        verdict = stored or figures.verdict
        text = "—" if verdict is None else QCoreApplication.translate("RooflineView", VERDICT_TEXTS[verdict])
        if verdict == "machine busy" and figures.others_cpu_share is not None:
            text += self.tr(" (other programs used {share} % of the processor)").format(
                share=f"{100 * figures.others_cpu_share:.0f}")
        v["roofline_verdict"].setText(text)
        self._name_rows()

    def _live_share(self, metrics: Any) -> float | None:
        """Other processes' CPU share during the reply, read once per ``metrics`` snapshot."""
        if self._held is None or self._held[0] is not metrics:
            self._held = (metrics, self._watch.others_share())
        return self._held[1]

    def _bandwidth_text(self) -> str:
        """The measured bandwidth, when it was measured and, if so, that the machine was busy then."""
        text = format_rate(self._bandwidth)
        entry = self._entry or {}
        at, share = entry.get("measured_at"), entry.get("others_cpu_share")
        if isinstance(at, (int, float)):
            when = QDateTime.fromSecsSinceEpoch(int(at)).toString("yyyy-MM-dd HH:mm")  # one form in every language
            text += self.tr(", measured {when}").format(when=when)
        if isinstance(share, (int, float)) and share >= rl.BUSY_SHARE:
            text += self.tr(" while other programs used {share} % of the processor").format(share=f"{100 * share:.0f}")
        return text

    def _name_rows(self) -> None:
        for key, caption in ROWS:
            accessibility.name(self.values[key], accessibility.figure(self.tr(caption), self.values[key].text()),
                               explain(key))
