"""The Models window's Recommended tab: the curated list ranked for this machine without the network, the
bandwidth measured on request and kept, and a model's Hub page one click away once downloads are allowed."""

from __future__ import annotations

import json

from app.widgets.models_window import ModelsWindow
from engine import paths
from engine.bench import roofline
from engine.library import fit
from engine.library.curated import CURATED
from tests.app._gui_fixtures import settings  # noqa: F401
from tests.helpers.fake_hub import FakeHub
from tests.helpers.network import guard_network

WAIT_MS = 30_000
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


def _open(qtbot, settings, endpoint=None) -> ModelsWindow:  # noqa: F811
    window = ModelsWindow(settings, endpoint=endpoint)
    qtbot.addWidget(window)
    window.show()
    return window


def _ranked(qtbot, tab) -> None:
    qtbot.waitUntil(lambda: tab.table.rowCount() == len(CURATED) and tab.measure_button.isEnabled(), timeout=WAIT_MS)


def test_the_list_is_ranked_offline_and_says_when_bandwidth_was_never_measured(qtbot, settings, home,  # noqa: F811
                                                                                monkeypatch):
    attempts = guard_network(monkeypatch)
    window = _open(qtbot, settings)
    tab = window.recommended_tab
    window.tabs.setCurrentWidget(tab)
    _ranked(qtbot, tab)
    assert window.tabs.tabText(window.tabs.indexOf(tab)) == "Recommended"
    assert "135M" in tab.intro.text()
    ranks = [fit.VERDICTS.index(r.estimate.verdict) for r in tab.recommendations]
    assert ranks == sorted(ranks)  # what fits this machine first
    for row, r in enumerate(tab.recommendations):
        assert tab.table.item(row, 0).text() == r.model.name
        assert "MiB" in tab.table.item(row, 2).text() or "GiB" in tab.table.item(row, 2).text()
        assert tab.table.item(row, 4).text() == "not measured"
    assert "not been measured" in tab.bandwidth_note.text()
    tab.table.selectRow(0)
    assert not tab.open_button.isEnabled() and "Allow downloads" in tab.open_button.toolTip()
    assert attempts == []
    assert window.shutdown(10_000)


def test_measuring_the_bandwidth_shows_each_models_ceiling_and_keeps_the_figure(qtbot, settings, home):  # noqa: F811
    window = _open(qtbot, settings)
    tab = window.recommended_tab
    _ranked(qtbot, tab)
    tab.measure_button.click()
    qtbot.waitUntil(lambda: tab.bandwidth is not None and tab.measure_button.isEnabled(), timeout=WAIT_MS)
    stored = json.loads((paths.data_root() / roofline.BANDWIDTH_FILE).read_text())
    rate = stored[fit.machine_memory().device]["read_bytes_s"]
    assert rate > 0 and tab.bandwidth["read_bytes_s"] == rate
    for row, r in enumerate(tab.recommendations):
        assert r.ceiling_tokens_per_s == rate / r.bytes_per_token
        assert tab.table.item(row, 4).text() == f"≤ {r.ceiling_tokens_per_s:.0f} tok/s"
    assert "measured memory bandwidth" in tab.bandwidth_note.text()
    assert window.shutdown(10_000)


def test_open_its_page_shows_the_hub_page_once_downloads_are_allowed(qtbot, settings, home, tiny_model_dir,  # noqa: F811
                                                                      monkeypatch):
    attempts = guard_network(monkeypatch, allow_loopback=True)
    hub = FakeHub()
    hub.add_folder(QWEN, tiny_model_dir, tags=["transformers", "safetensors", "qwen2", "text-generation"])
    hub.start()
    try:
        window = _open(qtbot, settings, hub.url)
        tab = window.recommended_tab
        _ranked(qtbot, tab)
        row = next(i for i, r in enumerate(tab.recommendations) if r.model.repo == QWEN)
        tab.table.selectRow(row)
        assert not tab.open_button.isEnabled()
        window.allow_box.click()
        assert tab.open_button.isEnabled()
        tab.open_button.click()
        page = window.search_tab.model_page
        assert window.tabs.currentWidget() is window.search_tab
        qtbot.waitUntil(lambda: page.page is not None and page.page.repo == QWEN, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: not window.runner.busy(), timeout=WAIT_MS)  # its fit estimate shown too
        assert window.shutdown(10_000)
    finally:
        hub.stop()
    assert all("127.0.0.1" in a or "localhost" in a for a in attempts)
