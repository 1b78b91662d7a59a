"""The Lab tab on the real bridge and tiny model: run an experiment, see its chart and table, export, cancel."""

from __future__ import annotations

import contextlib
import csv
import re
from typing import Iterator

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app.runtime.bridge import Bridge
from app.widgets.lab_tab import LabTab
from app.widgets.step_clock import StepClock
from tests.app._gui_fixtures import loaded_bridge  # noqa: F401 (fixture)

pytestmark = pytest.mark.qt_log_ignore("propagateSizeHints")

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def tab(qtbot, loaded_bridge):
    widget = LabTab(loaded_bridge)
    qtbot.addWidget(widget)
    widget.resize(700, 900)
    widget.show()
    yield widget
    # matplotlib queues an idle redraw; let it run while the canvas exists (not at interpreter shutdown).
    qtbot.wait(50)


def test_attention_heatmap_is_drawn_and_listed(qtbot, tab, tmp_path):
    tab.select("attention")
    assert tab.layer_spin.isVisible() and tab.layer_spin.maximum() == 1 and tab.head_spin.maximum() == 3
    tab.layer_spin.setValue(0)
    tab.head_spin.setValue(3)
    with qtbot.waitSignal(tab.result_shown, timeout=RUN_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    result = blocker.args[0]
    assert result.key == "attention" and result.summary["layer"] == 0 and result.summary["head"] == 3
    heatmap_axes = [ax for ax in tab.figure.axes if ax.images]
    assert len(heatmap_axes) == 2  # the Chinese and the English sentence
    image = heatmap_axes[0].images[0].get_array()
    assert image.shape == (result.summary["zh_tokens"],) * 2
    assert tab.table.rowCount() == len(result.rows) == 2 * 2 * 4
    # human names shown, the raw keys (the CSV's columns) on hover (issue 30)
    assert [tab.table.horizontalHeaderItem(c).toolTip() for c in range(tab.table.columnCount())] == list(result.columns)
    assert "collapse" in tab.findings.toPlainText()
    assert tab.progress.value() == 100 and tab.run_button.isEnabled() and not tab.cancel_button.isEnabled()

    csv_path = tab.export_csv(tmp_path / "attention.csv")
    with csv_path.open(encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == list(result.columns) and len(rows) == len(result.rows) + 1
    png = tab.export_png(tmp_path / "attention.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_the_table_shows_whole_headers_and_the_summary_words_not_python_values(qtbot, tab):
    # Issue 41 point 9: the headers were cut, and the summary showed Python's True/None.
    tab.select("kv_cache")
    with qtbot.waitSignal(tab.result_shown, timeout=RUN_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    result = blocker.args[0]
    assert isinstance(result.summary["texts_identical"], bool) and "first_divergence" in result.summary
    header = tab.table.horizontalHeader()
    assert all(tab.table.columnWidth(c) >= header.sectionSizeHint(c) for c in range(tab.table.columnCount()))
    findings = tab.findings.toPlainText()
    assert not re.search(r"\b(True|False|None)\b", findings), findings
    assert re.search(r": (yes|no)\b", findings), findings


def test_sampling_experiment_runs_with_progress(qtbot, tab):
    tab.select("sampling")
    assert not tab.layer_spin.isVisibleTo(tab)
    seen: list[float] = []
    with qtbot.waitSignal(tab.result_shown, timeout=RUN_TIMEOUT_MS) as blocker:
        assert tab.run() > 0
        assert not tab.run_button.isEnabled() and tab.cancel_button.isEnabled()
        assert tab.run() == 0  # one experiment at a time
        tab.progress.valueChanged.connect(seen.append)
    result = blocker.args[0]
    assert result.key == "sampling" and tab.table.rowCount() == 4
    assert [ax for ax in tab.figure.axes if ax.patches]  # the bar chart of the measures
    assert seen and seen[-1] == 100


def test_cancel_stops_the_running_experiment(qtbot, tab):
    tab.select("kv_cache")
    tab.quick_box.setChecked(False)
    with qtbot.waitSignal(tab.run_failed, timeout=RUN_TIMEOUT_MS) as blocker:
        assert tab.run() > 0
        tab.cancel()
    assert "cancelled" in blocker.args[0]
    assert tab.status_label.text() == blocker.args[0]
    assert tab.run_button.isEnabled() and not tab.cancel_button.isEnabled() and tab.result is None


def test_precision_ab_warns_before_it_runs(qtbot, tab):
    tab.select("precision_ab")
    assert tab.warning.isVisibleTo(tab) and "temporarily loads other precisions" in tab.warning.text()
    tab.select("greedy20")
    assert not tab.warning.isVisibleTo(tab)


def test_without_a_model_run_is_disabled(qtbot, home):
    bridge = Bridge()
    try:
        widget = LabTab(bridge)
        qtbot.addWidget(widget)
        assert not widget.run_button.isEnabled() and widget.run() == 0
        assert not widget.export_csv_button.isEnabled()
        with pytest.raises(ValueError):
            widget.export_png("x.png")
    finally:
        assert bridge.shutdown(5000) is True


# ------------------------------------------------------------------ a model on a server


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    """A real ``engine serve`` (the tiny model behind uvicorn on 127.0.0.1), as the serve tests start it."""
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model
    from tests.engine.serve.conftest import start_server

    served, stop = start_server(load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu")))
    yield served
    stop()


@contextlib.contextmanager
def _tab_on(qtbot, spec: object) -> Iterator[LabTab]:
    """A shown Lab tab on a new Bridge that loads ``spec`` (the tab made first, as in the window: it follows
    model_loaded); the Bridge is shut down after."""
    bridge = Bridge()
    widget = LabTab(bridge)
    qtbot.addWidget(widget)
    widget.resize(700, 900)
    widget.show()
    with qtbot.waitSignal(bridge.model_loaded, timeout=RUN_TIMEOUT_MS):
        bridge.load(spec)
    yield widget
    qtbot.wait(50)
    assert bridge.shutdown(5000) is True


@pytest.fixture
def remote_tab(qtbot, home, server):
    from engine.remote import RemoteSpec

    with _tab_on(qtbot, RemoteSpec(server.url, "default", server.key)) as widget:
        yield widget


def test_on_a_server_internals_are_disabled_up_front_with_the_reason(qtbot, remote_tab, server):
    tab = remote_tab
    assert tab.source_note.isVisibleTo(tab) and server.url in tab.source_note.text()
    items = tab.experiment_box.model()
    disabled = {tab.experiment_box.itemData(i) for i in range(tab.experiment_box.count())
                if not items.item(i).isEnabled()}
    # docs reads the KV cache; image_cost runs on a (local) vision-language model
    assert disabled == {"kv_cache", "attention", "precision_ab", "speculation", "docs", "image_cost"}
    for i in range(tab.experiment_box.count()):
        tip = tab.experiment_box.itemData(i, Qt.ItemDataRole.ToolTipRole)
        key = tab.experiment_box.itemData(i)
        assert (tip is not None and "Needs a model loaded on this computer" in tip) == (
            key in disabled and key != "image_cost")
        assert (tip is not None and "Needs a vision-language model" in tip) == (key == "image_cost")
    tab.select("attention")  # chosen from code: still refused, and the reason is shown
    assert not tab.run_button.isEnabled() and tab.run() == 0
    assert tab.warning.isVisibleTo(tab) and "Needs a model loaded on this computer" in tab.warning.text()
    tab.select("greedy20")
    assert tab.run_button.isEnabled() and not tab.warning.isVisibleTo(tab)


def test_ttft_against_length_runs_on_the_server_and_names_it(qtbot, remote_tab, server):
    tab = remote_tab
    tab.select("ttft_length")
    with qtbot.waitSignal(tab.result_shown, timeout=RUN_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    result = blocker.args[0]
    assert result.key == "ttft_length" and server.url in result.model
    assert server.url in tab.findings.toPlainText() and server.url in tab.figure.texts[0].get_text()
    prefill = result.columns.index("prefill_tok_s")
    assert all(row[prefill] is None for row in result.rows)
    assert all(tab.table.item(r, prefill).text() == "" for r in range(tab.table.rowCount()))  # not reported
    assert all(row[result.columns.index("ttft_s")] > 0 for row in result.rows)


def test_the_chart_follows_the_theme_and_the_tab_is_named_for_screen_readers(qtbot, tab, qapp):
    from matplotlib.colors import to_hex
    from PySide6.QtCore import Qt as QtNs

    from app.ui import theme
    from engine.lab.results import ExperimentResult, Series

    result = ExperimentResult(key="ttft_length", title="TTFT vs prompt length", columns=("tokens", "ttft_s"),
                              rows=((16, 0.01), (64, 0.03)),
                              series=(Series("ttft", (16.0, 64.0), (0.01, 0.03), "prompt tokens", "TTFT (s)"),))
    watcher, before = theme.watcher(), (qapp.styleSheet(), qapp.palette())
    try:
        watcher.on_color_scheme_changed(QtNs.ColorScheme.Light)
        tab.show_result(result)
        assert to_hex(tab.figure.get_facecolor()) == theme.LIGHT.surface
        watcher.on_color_scheme_changed(QtNs.ColorScheme.Dark)
        assert to_hex(tab.figure.get_facecolor()) == theme.DARK.surface
        assert to_hex(tab.figure.axes[0].get_facecolor()) == theme.DARK.surface
    finally:
        watcher.on_color_scheme_changed(QtNs.ColorScheme.Light)
        qapp.setStyleSheet(before[0])
        qapp.setPalette(before[1])
    for widget in (tab.experiment_box, tab.layer_spin, tab.head_spin, tab.chart_scroll, tab.table, tab.findings):
        assert widget.accessibleName()


def test_a_step_without_progress_of_its_own_says_how_long_it_has_run(qtbot, tab):
    # Issue 41 point 6: the A/B experiment's loading of a precision reports nothing while it runs; the text says the
    # step and its seconds, "… (N s)", counted by a timer until the run ends.
    tab.select("precision_ab")
    seen: list[str] = []
    with qtbot.waitSignal(tab.result_shown, timeout=RUN_TIMEOUT_MS):
        assert tab.run() > 0
        assert re.fullmatch(r"running .+… \(0 s\)", tab.status_label.text())
        qtbot.waitUntil(lambda: seen.append(tab.status_label.text()) or "loading" in seen[-1], timeout=RUN_TIMEOUT_MS)
    assert re.fullmatch(r"precision A/B: loading \S+ \(\d+ s\)", next(t for t in seen if "loading" in t))
    assert tab.status_label.text() == "done" and not tab._clock.running()  # no clock left after the run


def test_the_step_clock_counts_the_seconds_of_the_step_running(qtbot):
    """StepClock's own mechanism, apart from how fast a machine runs the Lab's steps (a step may end within a second):
    the seconds count on while one step runs, start again at a new step, and nothing ticks after stop."""
    label = QLabel()
    qtbot.addWidget(label)
    clock = StepClock(label)
    clock.step("loading int8")
    assert label.text() == "loading int8 (0 s)" and clock.running()
    qtbot.waitUntil(lambda: label.text() == "loading int8 (1 s)", timeout=5000)
    clock.step("loading int8")  # the same step again: its seconds go on
    assert label.text() == "loading int8 (1 s)"
    clock.step("measuring")
    assert label.text() == "measuring (0 s)"
    clock.stop()
    label.setText("done")
    qtbot.wait(1200)
    assert label.text() == "done" and not clock.running()


def test_the_image_experiment_is_listed_and_says_it_needs_a_vision_model(qtbot, tab):
    tab.select("image_cost")  # the window's model is a text model: listed, not runnable, and why
    assert not tab.run_button.isEnabled() and tab.run() == 0
    assert tab.warning.isVisibleTo(tab) and "Needs a vision-language model" in tab.warning.text()
    tab.select("greedy20")
    assert tab.run_button.isEnabled()


@pytest.fixture
def vision_tab(qtbot, home, tmp_path):
    """The tab on a real bridge with a random-weight SmolVLM/Idefics3 folder loaded (its tiles follow the size)."""
    import torch

    from engine.inputs import LoadSpec
    from tests.helpers.vision_models import build_vision_family

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # shared CI cores
    folder = build_vision_family(tmp_path / "tiny-idefics3", "idefics3")
    with _tab_on(qtbot, LoadSpec(str(folder), "fp32", "cpu")) as widget:
        yield widget
    torch.set_num_threads(threads)


def test_on_a_vision_model_what_an_image_costs_runs_from_the_window_and_its_chart_is_drawn(qtbot, vision_tab):
    from tests.app.window.test_image_turns import shot

    tab = vision_tab
    assert tab.experiment_box.currentData() == "image_cost"  # the one this model runs, chosen for the user
    items = tab.experiment_box.model()
    for i in range(tab.experiment_box.count()):
        key = tab.experiment_box.itemData(i)
        assert items.item(i).isEnabled() == (key == "image_cost")
        tip = tab.experiment_box.itemData(i, Qt.ItemDataRole.ToolTipRole)
        assert (tip is None) if key == "image_cost" else "Runs on a text model" in tip
    assert tab.run_button.isEnabled() and not tab.warning.isVisibleTo(tab)
    with qtbot.waitSignal(tab.result_shown, timeout=RUN_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    result = blocker.args[0]
    assert result.key == "image_cost" and tab.table.rowCount() == len(result.rows) == 3  # the quick sizes
    tokens = [row[result.columns.index("image tokens")] for row in result.rows]
    assert all(n > 0 for n in tokens) and "tiny-idefics3" in result.model
    assert len([ax for ax in tab.figure.axes if ax.lines]) == 3  # time, image tokens, KV bytes against megapixels
    assert "image tokens, smallest → largest" in tab.findings.toPlainText()
    assert tab.progress.value() == 100 and tab.run_button.isEnabled()
    shot(tab, "lab-image-cost.png")
