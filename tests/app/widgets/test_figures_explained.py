"""Issue 30: every figure explains itself (the panel's and the roofline's rows, Settings' sampling fields, the model
picker's sizes in MiB), the lab shows human names where its exports keep the raw keys, and the roofline is live in
the real window after a reply: bytes per token split, achieved and measured bandwidth, ceiling and verdict."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from PySide6.QtCore import QCoreApplication, QTranslator
from PySide6.QtWidgets import QFormLayout, QLabel

from app.ui import metric_help
from app.widgets.lab_tab import LabTab
from app.widgets.model_bar import ModelBar
from app.widgets.perf_panel import PerfPanel
from app.widgets.roofline_view import VERDICT_TEXTS
from app.widgets.settings_dialog import SettingsDialog
from engine.bench import roofline
from engine.fmt import format_rate as gb_s
from engine.fmt import format_bytes
from engine.lab.results import ExperimentResult, Series
from tests.app._gui_fixtures import make_window, send_and_wait, settings, store, styled  # noqa: F401 (fixtures)
from tests.app.ui.test_i18n import chinese, zh_translations  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints")]


class _Marking(QTranslator):
    """A translator that marks the texts of the given contexts: what it marks went through tr()/translate."""

    def __init__(self, contexts: tuple[str, ...]) -> None:
        super().__init__()
        self._contexts = contexts

    def translate(self, context, source, disambiguation=None, n=-1):  # noqa: D102 (Qt override)
        return f"【{source}】" if context in self._contexts else ""

    def isEmpty(self) -> bool:  # noqa: N802 (Qt override)
        return False


def _rows(panel: PerfPanel) -> list[tuple[QLabel, QLabel]]:
    """Every (caption, value) row of every form in the panel, the roofline's included."""
    rows = []
    for form in panel.findChildren(QFormLayout):
        for row in range(form.rowCount()):
            label = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
            field = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
            widget = field.widget() if field is not None else None
            value = widget if isinstance(widget, QLabel) else widget.findChild(QLabel) if widget else None
            if label is not None and value is not None:  # a waterfall row holds its figure above its bar
                rows.append((label.widget(), value))
    return rows


@pytest.fixture
def make_panel(qtbot):
    panels = []  # held until teardown: qtbot keeps only weak references, and a panel freed mid-test crashes its chart

    def make() -> PerfPanel:
        panel = PerfPanel()
        qtbot.addWidget(panel)
        panel.show()
        panels.append(panel)
        return panel

    yield make
    qtbot.wait(50)  # the chart's queued repaint runs while it exists (as tests/app/widgets/test_perf_panel.py's fixture)


def test_every_figure_of_the_panel_explains_itself_in_english(make_panel, styled):
    panel = make_panel()
    rows = _rows(panel)
    assert len(rows) >= len(PerfPanel.FIELDS) + 5 + 6  # the figures, the roofline's rows, the waterfall's, pressure
    for caption, value in rows:
        assert len(caption.toolTip()) > 40, caption.text()  # what it is, how it is measured, what is good
        assert caption.toolTip() in value.toolTip().replace("&#x27;", "'"), caption.text()
    captions = {caption.text(): caption.toolTip() for caption, _ in rows}
    assert "2 (keys and values) × L layers × kv" in captions["KV formula 2·L·kv·d·T·b"]
    assert "share of this device's memory" in captions["KV share of memory"]
    assert "last 8 tokens" in captions["Decode now"] and "(tokens − 1)" in captions["Decode average"]
    assert "reused for free" in captions["Prefill"] and "tokenisation" in captions["Time to first token"]
    assert "machine busy" in captions["Verdict"] and "measured once" in captions["Memory bandwidth"]
    assert panel._context_bar.toolTip() == metric_help.explain("context") != ""
    # every figure key of the panel has its explanation (a new row without one fails here)
    assert [key for _, key, _ in PerfPanel.FIELDS if not metric_help.explain(key)] == []


def test_every_figure_explains_itself_in_chinese(make_panel, styled, chinese):
    panel = make_panel()
    rows = _rows(panel)
    assert any(caption.text() == QCoreApplication.translate("PerfPanel", "Prefill") != "Prefill"
               for caption, _ in rows)  # the window is in Chinese
    assert all(caption.toolTip() and value.toolTip() for caption, value in rows)


def test_the_explanations_go_through_the_translator(make_panel, qapp, styled):
    marking = _Marking(("MetricHelp", "RooflineView", "TtftView"))
    qapp.installTranslator(marking)
    try:
        panel = make_panel()
        for caption, _value in _rows(panel):
            assert caption.toolTip().startswith("【") and caption.toolTip().endswith("】"), caption.text()
        assert panel.roofline.captions["roofline_verdict"].text() == "【Verdict】"
    finally:
        qapp.removeTranslator(marking)


def test_settings_explain_the_sampling_fields(qtbot, settings, styled):
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    tips = {name: getattr(dialog, name).toolTip() for name in ("temperature", "top_p", "top_k", "repetition_penalty",
                                                               "max_new_tokens")}
    assert all(len(tip) > 40 for tip in tips.values()), tips
    assert "greedy" in tips["temperature"] and "add up" in tips["top_p"] and "k most likely" in tips["top_k"]
    assert "already in the conversation" in tips["repetition_penalty"]
    assert dialog.top_p.accessibleDescription() == tips["top_p"]  # a screen reader says it too


def test_the_model_picker_gives_sizes_in_mib(qtbot, settings, home, tiny_model_dir, styled):
    shutil.copytree(tiny_model_dir, home / "models" / "tiny-llama")
    size = sum(p.stat().st_size for p in (home / "models" / "tiny-llama").glob("*.safetensors"))
    bar = ModelBar(settings)
    qtbot.addWidget(bar)
    labels = [bar.model_combo.itemText(i) for i in range(bar.model_combo.count())]
    assert f"tiny-llama ({format_bytes(size)})" in labels and not any(" MB" in label for label in labels)
    assert "MiB" in bar.model_combo.toolTip() and bar.device_combo.toolTip()


KV_RESULT = ExperimentResult(
    key="kv_cache", title="KV cache on vs off", columns=("position", "kv_on_ms", "kv_off_ms", "ratio"),
    rows=((1, 1.0, 2.0, 2.0), (2, 1.1, 3.0, 2.7)),
    series=(Series("KV cache on", (1, 2), (1.0, 1.1), "token position", "ms per token"),
            Series("repetition_rate_3", (1, 2), (0.1, 0.2), "token position", "kv_on_ms")),
    summary={"kv_on_early_ms": 1.0, "ttft_s_median": 0.1, "int4_decode_tok_s": 30.0,
             "repetition_rate_3 (greedy)": 0.1, "e2e_off_s": 2.0}, model="tiny fp32")


def test_the_lab_shows_human_names_and_exports_raw_keys(qtbot, home, styled, tmp_path):
    from app.runtime.bridge import Bridge

    bridge = Bridge()
    tab = LabTab(bridge)
    qtbot.addWidget(tab)
    try:
        tab.show_result(KV_RESULT)
        headers = [tab.table.horizontalHeaderItem(c).text() for c in range(tab.table.columnCount())]
        assert headers == ["Token position", "KV cache on (ms per token)", "KV cache off (ms per token)", "Off ÷ on"]
        findings = tab.findings.toPlainText()
        for raw in ("kv_on_early_ms", "ttft_s_median", "int4_decode_tok_s", "repetition_rate_3", "e2e_off_s"):
            assert raw not in findings
        for shown in ("KV cache on, early tokens (ms per token)", "Time to first token (s), median",
                      "int4: Decode speed (tok/s)", "Repeated 3-grams (share) (greedy)", "End to end, KV cache off (s)"):
            assert shown in findings
        legends = [t.get_text() for ax in tab.figure.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert "Repeated 3-grams (share)" in legends and "repetition_rate_3" not in legends
        with open(tab.export_csv(tmp_path / "kv.csv"), newline="", encoding="utf-8-sig") as f:
            assert next(csv.reader(f)) == list(KV_RESULT.columns)  # exports keep the raw keys
    finally:
        assert bridge.shutdown(5000) is True


def test_the_roofline_is_live_in_the_window_and_re_measurable(make_window, qtbot, home, styled):
    window = make_window(max_new_tokens=12)
    view = window.perf_panel.roofline
    qtbot.waitUntil(lambda: not view.busy(), timeout=120_000)
    stored = json.loads((home / roofline.BANDWIDTH_FILE).read_text(encoding="utf-8"))["cpu"]
    assert stored["read_bytes_s"] > 0  # measured once for this device, kept in the data folder
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=120_000) as blocker:
        send_and_wait(qtbot, window, "Hello there")
    final = blocker.args[0].metrics
    figures = view.figures()
    assert figures is not None and figures.kv_bytes == roofline.kv_read_per_token(final) > 0
    assert figures.tok_s == final.decode_tok_s and figures.bandwidth_bytes_s == stored["read_bytes_s"]
    shown = {key: label.text() for key, label in view.values.items()}
    assert shown["roofline_bytes"] == (f"{format_bytes(figures.bytes_per_token)} = weights "
                                       f"{format_bytes(figures.weights_bytes)} + KV {format_bytes(figures.kv_bytes)}")
    assert shown["roofline_achieved"].startswith(f"{gb_s(figures.achieved_bytes_s)} (") and "GB/s" in gb_s(1e8)
    # the figure, and when it was measured (under load: that too)
    assert shown["roofline_bandwidth"].startswith(gb_s(stored["read_bytes_s"]) + ", measured ")
    assert figures.bandwidth_measured_at == stored["measured_at"]
    assert ("other programs used" in shown["roofline_bandwidth"]) == (stored["others_cpu_share"] is not None
                                                                      and stored["others_cpu_share"] >= roofline.BUSY_SHARE)
    assert shown["roofline_ceiling"] == f"{figures.ceiling_tok_s:.0f} tok/s"
    assert shown["roofline_verdict"].split(" (")[0] in VERDICT_TEXTS.values()
    decode_tip = window.perf_panel._values["decode_avg"].toolTip()
    assert f"at most {figures.ceiling_tok_s:.0f} tok/s" in decode_tip  # good on this device: its ceiling
    # Measure again: a fresh measurement replaces the stored one
    view.measure_button.click()
    qtbot.waitUntil(lambda: not view.busy(), timeout=120_000)
    again = json.loads((home / roofline.BANDWIDTH_FILE).read_text(encoding="utf-8"))["cpu"]
    assert again["measured_at"] > stored["measured_at"] and view.measure_button.isEnabled()


def test_a_reopened_conversation_shows_its_stored_figures(make_window, qtbot, styled):
    from tests.app._gui_fixtures import greedy

    window = make_window(max_new_tokens=6)
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=120_000) as first:
        send_and_wait(qtbot, window, "First chat")
    cid = window.current_conversation()
    a = first.args[0].metrics
    window.on_new_chat_triggered()
    assert window.perf_panel.displayed()["tokens"] == "—"  # a new chat has no figures yet
    window.apply_settings(greedy(10))
    send_and_wait(qtbot, window, "Second chat")
    assert window.perf_panel.displayed()["tokens"] == "10"
    window.open_conversation(cid)
    shown = window.perf_panel.displayed()
    assert shown["tokens"] == str(a.generated_tokens) == "6"  # its own figures, not the other chat's nor "—"
    assert shown["ttft"] == f"{a.ttft_s * 1000:.0f} ms" and shown["decode_avg"] == f"{a.decode_tok_s:.1f} tok/s"
    assert shown["kv"] == format_bytes(a.kv_cache_bytes) and shown["kv_formula"] == format_bytes(
        a.kv_cache_bytes_formula)
    assert shown["prefill"].startswith(f"{a.prefill_tokens} tok · ") and shown["e2e"] != "—"
    assert shown["context"].startswith(f"{a.context_tokens} / {a.context_max} tokens")
    assert window.perf_panel.roofline.values["roofline_bytes"].text() != "—"


def test_why_this_ttft_and_the_context_pressure_after_each_reply(make_window, qtbot, styled):
    window = make_window(max_new_tokens=8)
    view = window.perf_panel.ttft_view
    qtbot.waitUntil(lambda: not window.perf_panel.roofline.busy(), timeout=120_000)
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=120_000) as first:
        send_and_wait(qtbot, window, "Hello there")
    m = first.args[0].metrics
    shown = view.shown()
    assert shown["before"] == f"{(m.ttft_s - m.prefill_s) * 1000:.0f} ms" and shown["reused"] == "0 tokens, free"
    assert shown["prefill"] == (f"{m.prefill_tokens} tokens ÷ {m.prefill_tok_s:.0f} tok/s = "
                                f"{m.prefill_s * 1000:.0f} ms")
    assert view.bars["prefill"].value() == int(1000 * m.prefill_s / m.ttft_s)  # its share of the TTFT
    facts = window.bridge.facts
    per_1000 = 2 * facts.layers * facts.kv_heads * facts.head_dim * facts.kv_dtype_bytes * 1000
    assert shown["kv_1000"] == format_bytes(per_1000)
    figures = window.perf_panel.roofline.figures()
    share = 100 * per_1000 / figures.bytes_per_token
    assert shown["slowdown_1000"] == f"+{share:.1f} % time per token"
    assert shown["truncation"].startswith(f"{m.context_max - m.context_tokens} tokens left, then ~")
    with qtbot.waitSignal(window.bridge.generation_finished, timeout=120_000) as second:
        send_and_wait(qtbot, window, "And again")
    again = second.args[0].metrics
    assert again.reused_tokens > 0 and view.shown()["reused"] == f"{again.reused_tokens} tokens, free"
