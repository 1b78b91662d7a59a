"""The performance panel: live figures of the reply being generated, kept after it ends.

Owns the display of one reply's ``Metrics`` (TTFT, prefill, decode now/average, tokens, e2e, the
per-token latency chart, KV cache measured vs formula and its memory share, weights, peak memory,
device, precision, context usage and dropped turns) and a note when the reply had to prefill its whole
conversation because its KV cache was evicted. For a model on a server: the figures measured here from the
stream ("—" for those it cannot know, ``Metrics.unknown``) and, from the server's ``/metrics``, its KV-cache usage
and its own TTFT, or "not reported by this server" (``show_server``). Chart redraws are throttled; labels are cheap
and follow every coalesced stats update. Reads Metrics/ModelFacts attributes only; computes nothing
the engine measured (the "now" decode rate is the inverse mean of the last few measured gaps).
Every figure's accessible name says what it is and its value ("Time to first token: 86 ms"), the chart's
description its latest and slowest gap; the chart takes the theme's colours again when it changes (``app.ui.theme``).
"""

from __future__ import annotations

import html
from typing import Any

import psutil
import pyqtgraph as pg
from PySide6.QtCore import QT_TRANSLATE_NOOP, Qt, Slot
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QFormLayout, QLabel, QProgressBar, QScrollArea, QSizePolicy, QVBoxLayout,
                               QWidget)

from app.history.perf import PerfRecord
from engine.core.sessions import MAX_SESSION_KV_BYTES, MAX_SESSIONS
from app.ui import theme as themes
from app.ui import accessibility
from app.ui.metric_help import explain
from app.ui.throttle import Throttle
from app.widgets.roofline_view import RooflineView
from app.widgets.ttft_view import TtftView
from engine.fmt import format_bytes, outside_text

RECENT_GAPS = 8  # "decode now" averages this many inter-token gaps: steady, yet follows a slowdown quickly
# Nobody reads a figure that changes 30 times a second; each update repaints the panel on the GUI thread,
# which competes with the engine for the CPU and the GIL (measured: the panel was a third of the GUI's time).
LABELS_UPDATE_MS = 200
# A redraw costs ~4 ms, of Python holding the GIL the engine's decode loop needs too: twice a second reads as live.
CHART_REDRAW_MS = 500
KV_EVICTED_NOTE = QT_TRANSLATE_NOOP("PerfPanel", "⚠ KV cache was evicted: prefilled the whole conversation again")


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"


def fmt_rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} tok/s"


def _get(obj: Any, name: str) -> Any:
    return getattr(obj, name, None) if obj is not None else None


class _Value(QLabel):
    """A figure's value: wraps within the panel's width and keeps its whole text as a tooltip; its accessible
    name is its caption with the value ("Decode average: 41.8 tok/s"). Plain text, tooltip included: a value may be
    a server's model name (its "precision"), which is never markup here."""

    def __init__(self, text: str, caption: str, help_text: str = "") -> None:
        super().__init__("")
        self._caption = caption
        self._help = help_text  # what the figure is (app.ui.metric_help), under the value in its tooltip
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(True)
        # Ignored: the label never asks for more width than the form gives it; it wraps instead.
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        super().setText(text)
        # A tooltip has no plain-text mode: escaped, it reads as the text.
        self.setToolTip(f"<p>{html.escape(text)}</p><p>{html.escape(self._help)}</p>" if self._help
                        else html.escape(text))
        self.setAccessibleName(accessibility.figure(self._caption, text))
        if self._help:
            self.setAccessibleDescription(self._help)

    def set_help(self, help_text: str) -> None:
        self._help = help_text
        self.setText(self.text())


class PerfPanel(QWidget):
    """Figures for the current (or last) reply. Call ``show_metrics`` with each Metrics snapshot."""

    FIELDS = (  # (section, key, label: shown translated)
        ("speed", "ttft", QT_TRANSLATE_NOOP("PerfPanel", "Time to first token")),
        ("speed", "ttft_thought", QT_TRANSLATE_NOOP("PerfPanel", "Time to first thought")),  # a reasoning reply's
        ("speed", "ttft_answer", QT_TRANSLATE_NOOP("PerfPanel", "Time to first answer token")),
        ("speed", "prefill", QT_TRANSLATE_NOOP("PerfPanel", "Prefill")),
        ("speed", "decode_now", QT_TRANSLATE_NOOP("PerfPanel", "Decode now")),
        ("speed", "decode_avg", QT_TRANSLATE_NOOP("PerfPanel", "Decode average")),
        ("speed", "tokens", QT_TRANSLATE_NOOP("PerfPanel", "Tokens generated")),
        ("speed", "tpot", QT_TRANSLATE_NOOP("PerfPanel", "Time per output token")),
        ("speed", "e2e", QT_TRANSLATE_NOOP("PerfPanel", "End to end")),
        ("speed", "server_ttft", QT_TRANSLATE_NOOP("PerfPanel", "Server's TTFT")),  # shown for a server's model only
        ("memory", "kv", QT_TRANSLATE_NOOP("PerfPanel", "KV cache (measured)")),
        ("memory", "server_kv", QT_TRANSLATE_NOOP("PerfPanel", "Server's KV cache")),  # a server's model only
        ("memory", "kv_formula", QT_TRANSLATE_NOOP("PerfPanel", "KV formula 2·L·kv·d·T·b")),
        ("memory", "kv_no_gqa", QT_TRANSLATE_NOOP("PerfPanel", "Without GQA 2·L·d·T·b")),
        ("memory", "kv_share", QT_TRANSLATE_NOOP("PerfPanel", "KV share of memory")),
        ("memory", "weights", QT_TRANSLATE_NOOP("PerfPanel", "Weights")),
        ("memory", "peak", QT_TRANSLATE_NOOP("PerfPanel", "Peak memory")),
        ("model", "device", QT_TRANSLATE_NOOP("PerfPanel", "Device")),
        ("model", "precision", QT_TRANSLATE_NOOP("PerfPanel", "Precision")),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._values: dict[str, _Value] = {}
        self._server_rows: list[tuple[QFormLayout, QLabel]] = []  # what only a server's model shows
        self._facts: Any = None
        self._metrics: Any = None
        inner = QWidget()
        layout = QVBoxLayout(inner)
        layout.setContentsMargins(12, 8, 12, 12)
        layout.setSpacing(4)
        forms: dict[str, QFormLayout] = {}
        for section, title in (("speed", self.tr("Speed")), ("chart", self.tr("Per-token latency")),
                               ("roofline", self.tr("Roofline")), ("memory", self.tr("Memory")), ("context", self.tr("Context")),
                               ("model", self.tr("Model"))):
            heading = QLabel(title)
            heading.setObjectName("sectionTitle")
            layout.addWidget(heading)
            if section == "chart":
                layout.addWidget(self._build_chart())
            elif section == "roofline":  # app.widgets.roofline_view: decode against the memory's ceiling
                self.roofline = RooflineView()
                layout.addWidget(self.roofline)
                self.ttft_view = TtftView()  # app.widgets.ttft_view: why this TTFT, and the context's pressure
                layout.addWidget(self.ttft_view)
            elif section == "context":
                self._context_bar = QProgressBar()
                self._context_bar.setTextVisible(True)
                self._context_bar.setFormat("—")
                self._context_bar.setRange(0, 1)
                self._context_bar.setValue(0)
                self._context_bar.setToolTip(explain("context"))
                self._name_context()
                layout.addWidget(self._context_bar)
                self._dropped = QLabel("")
                self._dropped.setObjectName("notice")
                self._dropped.setWordWrap(True)
                self._dropped.hide()
                layout.addWidget(self._dropped)
                self._kv_note = QLabel(self.tr(KV_EVICTED_NOTE))
                self._kv_note.setObjectName("notice")
                self._kv_note.setWordWrap(True)
                self._kv_note.setToolTip(self.tr("Only the {n} most recent chats keep their KV cache between replies "
                                                 "(at most {bytes} together).").format(
                    n=MAX_SESSIONS, bytes=format_bytes(MAX_SESSION_KV_BYTES)))
                self._kv_note.hide()
                layout.addWidget(self._kv_note)
            else:
                form = QFormLayout()
                form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
                form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
                form.setHorizontalSpacing(16)
                form.setVerticalSpacing(3)
                forms[section] = form
                self._forms = forms
                layout.addLayout(form)
        for section, key, label in self.FIELDS:
            value = _Value("—", self.tr(label), explain(key))
            value.setObjectName("metricValue")
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            caption = QLabel(self.tr(label))
            caption.setToolTip(explain(key))  # every figure says what it is, how it is measured, what is good
            forms[section].addRow(caption, value)
            self._values[key] = value
            if key.startswith("server_"):
                self._server_rows.append((forms[section], value))
                forms[section].setRowVisible(value, False)
        for key in ("ttft_thought", "ttft_answer"):  # shown once a reply thinks
            forms["speed"].setRowVisible(self._values[key], False)
        layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        # Values wrap instead of widening the panel: a sideways scroll bar hid them (seen at 1440×900).
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        accessibility.name(scroll, self.tr("Performance figures"),
                           self.tr("The figures of the reply being generated, or of the last one"))
        self.scroll_area = scroll
        scroll.setWidget(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        self._redraw = Throttle(self._draw_chart, CHART_REDRAW_MS, self)
        self._update = Throttle(self._apply_metrics, LABELS_UPDATE_MS, self)
        self.setMinimumWidth(300)
        themes.watcher().theme_changed.connect(self.on_theme_changed)

    def _build_chart(self) -> QWidget:
        # pyqtgraph, not matplotlib, for the live chart: a new point costs ~3-5 ms to set and paint here,
        # where a matplotlib blit measured ~30 ms and a full redraw (each time an axis grew) ~50 ms, the
        # GUI thread's worst stalls while a reply streamed. The lab's static charts stay on matplotlib.
        self._plot = pg.PlotWidget()
        self._plot.setObjectName("latencyChart")
        self._plot.setAccessibleName(self.tr("Per-token latency chart"))
        self._plot.viewport().setAccessibleName(self._plot.accessibleName())
        item = self._plot.getPlotItem()
        item.setMouseEnabled(x=False, y=False)
        item.setMenuEnabled(False)
        item.hideButtons()
        tick_font = QFont()
        tick_font.setPointSize(7)
        for side in ("bottom", "left"):
            item.getAxis(side).setStyle(tickFont=tick_font)
        item.disableAutoRange()
        self._limits = (0.0, 0.0)
        self._set_limits(16.0, 1.0)
        self._curve = item.plot([], [])
        self._plot.setFixedHeight(170)  # room for the memory and context sections below on a laptop screen
        self._points: tuple[list[int], list[float]] = ([], [])
        self._style_chart(themes.current())
        self._describe_chart()
        return self._plot

    def _style_chart(self, theme: themes.Theme) -> None:
        """The chart in ``theme``'s colours: background, axes, their captions and the curve."""
        self._plot.setBackground(theme.surface)
        item = self._plot.getPlotItem()
        for side, label in (("bottom", self.tr("token")), ("left", "ms")):
            axis = item.getAxis(side)
            axis.setPen(pg.mkPen(theme.border))
            axis.setTextPen(pg.mkPen(theme.muted))
            axis.setLabel(label, color=theme.muted, **{"font-size": "7pt"})
        self._curve.setPen(pg.mkPen(theme.accent, width=1.2))

    def chart_colours(self) -> dict[str, str]:
        """The chart's colours as drawn now, ``#rrggbb`` (tests read these)."""
        axis = self._plot.getPlotItem().getAxis("left")
        return {"background": self._plot.backgroundBrush().color().name(),
                "curve": self._curve.opts["pen"].color().name(), "axis": axis.pen().color().name(),
                "text": axis.textPen().color().name()}

    @Slot(object)
    def on_theme_changed(self, theme: themes.Theme) -> None:
        self._style_chart(theme)

    def _describe_chart(self) -> None:
        """The chart's accessible description: what it holds now, for whoever cannot see it."""
        xs, ys = self._points
        text = (self.tr("{n} gaps between tokens; the latest {last} ms, the slowest {max} ms").format(
            n=len(ys), last=f"{ys[-1]:.1f}", max=f"{max(ys):.1f}") if ys else self.tr("No tokens yet"))
        self._plot.setAccessibleDescription(text)
        self._plot.viewport().setAccessibleDescription(text)

    def _name_context(self) -> None:
        accessibility.name(self._context_bar, accessibility.figure(self.tr("Context"), self._context_bar.format()), "")

    # -- public ---------------------------------------------------------------------------------------
    def set_model_facts(self, facts: Any) -> None:
        self._facts = facts
        self._values["device"].setText(outside_text(_get(facts, "device") or "—"))  # a server's: its host and name
        self._values["precision"].setText(outside_text(_get(facts, "precision") or "—"))
        self._values["weights"].setText(format_bytes(_get(facts, "weights_bytes")))
        self.roofline.reset()
        self.ttft_view.set_model_facts(facts)
        context = _get(facts, "context_length")
        if context:
            self._context_bar.setRange(0, int(context))
            self._context_bar.setValue(0)
            self._context_bar.setFormat(self.tr("0 / {max} tokens").format(max=context))
            self._name_context()
        else:  # a server that does not say its context: no bar left over from the model before
            self.show_context(None, 0)

    def show_context(self, used: int | None, limit: int, image_tokens: int = 0) -> None:
        """The context bar: ``used`` of ``limit`` tokens (a reply's figure, or the open conversation's measured), of
        which ``image_tokens`` are its pictures' (a part of their own); "—" when either is unknown (a server that does
        not say, a model with no tokenizer here)."""
        known = used is not None and limit > 0
        share = f"{100.0 * used / limit:.1f}" if used is not None and known else ""
        text = self.tr("{used} / {max} tokens ({share} %)").format(used=used, max=limit, share=share) if known else "—"
        if known and image_tokens:
            text += self.tr(" · images: {n} tokens").format(n=image_tokens)
        if text != self._context_bar.format():  # each change is a synchronous repaint of the bar
            self._context_bar.setRange(0, int(limit) if known else 1)
            self._context_bar.setValue(min(int(used or 0), int(limit)) if known else 0)
            self._context_bar.setFormat(text)
            self._name_context()

    def reset(self) -> None:
        """A new reply begins: clear the reply's figures, keep the model's."""
        self._metrics = None
        for key in ("ttft", "prefill", "decode_now", "decode_avg", "tokens", "tpot", "e2e", "kv", "kv_formula",
                    "kv_no_gqa", "kv_share", "peak"):
            self._values[key].setText("—")
        self._dropped.hide()
        self._kv_note.hide()
        self.roofline.reset()
        self.ttft_view.reset()
        self._redraw.cancel()
        self._update.cancel()
        self._points = ([], [])
        self._draw_chart()

    def show_started(self, started: Any) -> None:
        """A reply's prompt is about to be computed: say so when its conversation's KV cache had been evicted."""
        self._kv_note.setVisible(bool(_get(started, "kv_evicted")))
        self.roofline.start()
        self.ttft_view.show_started(started)  # where the prompt stopped matching the cache, if it did

    def show_stored(self, messages: Any) -> None:
        """A conversation was shown: the figures stored with its last reply (``PerfRecord``), "—" where none were."""
        record = next((m.perf for m in reversed(list(messages)) if getattr(m, "perf", None) is not None), None)
        self.reset()
        self.show_metrics(record, final=True)
        if record is not None:  # and where its prompt parted from the cache (the record keeps the break)
            self.ttft_view.show_started(record)

    def show_metrics(self, metrics: Any, final: bool = False) -> None:
        """Show a Metrics snapshot (live, coalesced further to ~5 per second) or the final one, at once."""
        if metrics is None:
            return
        self._update(metrics)
        if final:
            self._update.flush()
            self._redraw.flush()

    def _apply_metrics(self, metrics: Any) -> None:
        self._metrics = metrics
        unknown = _get(metrics, "unknown") or ()  # figures the engine that answered cannot know: shown as "—"
        m = lambda name: None if name in unknown else _get(metrics, name)  # noqa: E731 (short local accessor)
        v = self._values
        v["ttft"].setText(fmt_seconds(m("ttft_s")))
        for key in ("ttft_thought", "ttft_answer"):  # a reasoning model's reply: its TTFT split in two
            v[key].setText(fmt_seconds(m(key + "_s")))
            self._forms["speed"].setRowVisible(v[key], bool(m("thinking_tokens")))
        prefill_tokens = m("prefill_tokens")
        reused = m("reused_tokens") or 0
        if prefill_tokens is not None:
            text = f"{prefill_tokens} tok · {fmt_rate(m('prefill_tok_s'))}"
            v["prefill"].setText(text + (self.tr(" · {n} reused").format(n=reused) if reused else ""))
        itl = list(m("itl_s") or [])
        recent = [gap for gap in itl[-RECENT_GAPS:] if gap and gap > 0]
        v["decode_now"].setText(fmt_rate(len(recent) / sum(recent)) if recent else "—")
        v["decode_avg"].setText(fmt_rate(m("decode_tok_s")))
        if m("generated_tokens") is not None:
            v["tokens"].setText(str(m("generated_tokens")))
        v["tpot"].setText(fmt_seconds(m("tpot_s")))
        v["e2e"].setText(fmt_seconds(m("e2e_s")))
        kv = m("kv_cache_bytes")
        allocated = m("kv_cache_bytes_allocated")
        kv_text = format_bytes(kv)
        if allocated and kv is not None and allocated > kv:
            kv_text += self.tr(" (allocated {bytes})").format(bytes=format_bytes(allocated))
        v["kv"].setText(kv_text)
        v["kv_formula"].setText(format_bytes(m("kv_cache_bytes_formula")))
        v["kv_no_gqa"].setText(format_bytes(m("kv_cache_bytes_formula_no_gqa")))
        total = self._memory_total(m("device"))
        if kv is not None and total:
            v["kv_share"].setText(self.tr("{share} % of {total}").format(share=f"{100.0 * kv / total:.3f}",
                                                                          total=format_bytes(total)))
        if m("weights_bytes"):
            v["weights"].setText(format_bytes(m("weights_bytes")))
        v["peak"].setText(format_bytes(m("peak_memory_bytes")))
        if m("device"):
            v["device"].setText(outside_text(m("device")))
        if m("precision"):
            v["precision"].setText(outside_text(m("precision")))
        used, limit = m("context_tokens"), m("context_max")
        if used is not None and limit:  # a vision turn's context holds its pictures: their part said (issue 44)
            self.show_context(used, limit, sum(m("image_tokens") or ()))
        dropped = m("dropped_turns") or 0
        self._dropped.setVisible(bool(dropped))
        if dropped:
            self._dropped.setText((self.tr("⚠ {n} oldest message dropped to fit the context window (system prompt "
                                           "kept)") if dropped == 1 else self.tr(
                "⚠ {n} oldest messages dropped to fit the context window (system prompt kept)")).format(n=dropped))
        self.roofline.show_metrics(metrics, live=not isinstance(metrics, PerfRecord))  # stored: no CPU watch
        figures = self.roofline.figures()
        self.ttft_view.show_metrics(metrics, figures.bytes_per_token if figures is not None else None)
        ceiling = self.roofline.ceiling_tok_s()  # the decode rates' tooltips say this device's ceiling
        for key in ("decode_now", "decode_avg"):
            v[key].set_help(explain(key, ceiling))
        self._points = (list(range(2, len(itl) + 2)), [gap * 1000 for gap in itl])
        self._redraw()

    def show_server(self, figures: Any, remote: bool = True) -> None:
        """A server's own figures (``engine.remote.server_metrics.ServerFigures``, None when it has no ``/metrics``)
        beside the ones measured here; ``remote=False`` (a local model) hides those rows."""
        for form, value in self._server_rows:
            form.setRowVisible(value, remote)
        if not remote:
            return
        missing = self.tr("not reported by this server")
        usage = _get(figures, "kv_cache_usage")
        self._values["server_kv"].setText(missing if usage is None else self.tr("{share} % in use ({source})").format(
            share=f"{100.0 * usage:.1f}", source=figures.source))
        if usage is not None:  # the series' full name on hover (too long for the column)
            self._values["server_kv"].setToolTip(self.tr("{metric} on the server's /metrics: the share of its KV cache "
                                                         "in use, by every request it serves").format(
                metric=figures.kv_cache_metric))
        ttft = _get(figures, "ttft")  # engine.remote.server_metrics: finite or None, never NaN
        count = int(_get(ttft, "count") or 0)
        self._values["server_ttft"].setText(missing if ttft is None else "—" if not count else self.tr(
            "{ttft} (mean of {n} request(s))").format(ttft=fmt_seconds(ttft.mean), n=count))
        self._values["server_ttft"].setToolTip(self.tr(
            "The server's own time to first token, from its /metrics: the requests it finished since the previous "
            "reading (the first reading: since it started). The TTFT above is measured here, network included."))

    def displayed(self) -> dict[str, str]:
        """What the panel shows now, label by label (the self-test and tests read this)."""
        shown = {key: label.text() for key, label in self._values.items()}
        shown["context"] = self._context_bar.text()
        shown["kv_note"] = self._kv_note.text() if not self._kv_note.isHidden() else ""
        drawn_x, _drawn_y = self._curve.getData()
        shown["chart_points"] = str(0 if drawn_x is None else len(drawn_x))
        return shown

    # -- internals ------------------------------------------------------------------------------------
    def _memory_total(self, device: Any) -> int | None:
        """System RAM for CPU runs; the GPU's memory when the model facts carry it (else system RAM)."""
        facts_total = _get(self._facts, "device_memory_bytes")
        if device and str(device).startswith("cuda") and facts_total:
            return int(facts_total)
        return int(psutil.virtual_memory().total)

    def _draw_chart(self) -> None:
        xs, ys = self._points
        # Axis ranges grow in steps (each doubles past the new peak) rather than following every point: the
        # axes' tick pictures are cached until their range changes, and regenerating them was half the
        # chart's cost. A new reply keeps the last ranges.
        x_max, y_max = self._limits
        need_x = float(xs[-1]) if xs else 0.0
        need_y = max(ys) if ys else 0.0
        self._set_limits(x_max if need_x <= x_max else max(need_x, 2 * x_max),
                         y_max if need_y <= y_max else need_y * 2.0)
        self._curve.setData(xs, ys)  # Qt paints it at its next frame
        self._describe_chart()

    def _set_limits(self, x_max: float, y_max: float) -> None:
        if (x_max, y_max) != self._limits:
            self._limits = (x_max, y_max)
            self._plot.getPlotItem().setRange(xRange=(1, x_max), yRange=(0, y_max), padding=0)
