"""The Models window end to end: real widgets, the real ``engine.library`` and ``huggingface_hub`` against the
local fake Hub (tests/helpers/fake_hub.py), a real models folder under ``MIAOHUI_HOME`` (empty at the start).

With downloads off nothing connects anywhere (socket connect and name lookups are blocked and recorded); with
them on only the fake Hub on 127.0.0.1 is reached. The only stand-ins are the confirmation dialogs
(``QMessageBox.question`` answers Yes or No) and the desktop's file manager; a slow network is the fake Hub
holding the weights after their first 64 KiB until the test lets them go, so Pause and Cancel land mid-file
however fast this machine is.
"""

from __future__ import annotations

import json
import pickle
import shutil
import threading

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QMessageBox

import tests.helpers.fake_hub as fake_hub_module
from app.widgets.models_window import ModelsWindow
from engine import paths
from engine.fmt import format_bytes
from engine.inputs import LoadSpec
from engine.library import download, fit, hub
from engine.library.arch import engine_precisions
from engine.models.fetch import MARKER
from tests.app._gui_fixtures import (LOAD_TIMEOUT_MS, make_window, send_and_wait, settings,  # noqa: F401
                                     store)
from tests.helpers.fake_hub import FakeHub, make_gguf
from tests.helpers.network import guard_network

TINY = "miaohui-test/tiny-chat"
GGUF_REPO = "miaohui-test/tiny-chat-GGUF"
REMOTE_CODE = "miaohui-test/remote-code"
GGUF_F16, GGUF_Q8 = "tiny-chat-F16.gguf", "tiny-chat-Q8_0.gguf"
WEIGHTS = "model.safetensors"
HOLD_AT = 64 * 1024  # the held weights stop here until the gate opens
WAIT_MS = 30_000


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("gguf")
    return {GGUF_F16: make_gguf(folder / GGUF_F16, "F16").read_bytes(),
            GGUF_Q8: make_gguf(folder / GGUF_Q8, "Q8_0").read_bytes()}


@pytest.fixture
def fake_hub(tiny_model_dir, gguf_files):
    served = FakeHub(page_size=2)
    served.add_folder(TINY, tiny_model_dir, extra={"pytorch_model.bin": pickle.dumps({"never": "taken"})},
                      tags=["transformers", "safetensors", "llama", "text-generation", "license:apache-2.0"],
                      downloads=500, likes=7, last_modified="2025-02-01T00:00:00.000Z")
    served.add_repo(GGUF_REPO, {"README.md": b"# GGUF\n", **gguf_files}, config=None,
                    tags=["gguf", "llama", "text-generation", "license:mit"], downloads=300,
                    last_modified="2025-03-01T00:00:00.000Z")
    remote = json.loads((tiny_model_dir / "config.json").read_bytes())
    remote["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    served.add_folder(REMOTE_CODE, tiny_model_dir, extra={"config.json": json.dumps(remote).encode(),
                                                          "modeling_evil.py": b"raise SystemExit('ran')\n"},
                      tags=["transformers", "safetensors", "custom_code", "text-generation"], downloads=50)
    served.start()
    yield served
    served.stop()


@pytest.fixture
def gate(monkeypatch):
    """Hold every weights transfer (the fake Hub's CDN) after ``HOLD_AT`` bytes until ``gate.set()``."""
    opened = threading.Event()
    real_send = fake_hub_module._Handler._send

    def send(self, entry, status, body=b"", headers=None, head=False, cut=None):
        if head or opened.is_set() or not entry.path.startswith("/cdn/") or len(body) <= HOLD_AT:
            return real_send(self, entry, status, body, headers, head, cut)
        entry.status = status
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body[:HOLD_AT])
            entry.sent += HOLD_AT
            opened.wait(WAIT_MS / 1000)
            self.wfile.write(body[HOLD_AT:])
            entry.sent += len(body) - HOLD_AT
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    monkeypatch.setattr(fake_hub_module._Handler, "_send", send)
    yield opened
    opened.set()


@pytest.fixture
def open_window(qtbot, settings):  # noqa: F811
    windows = []

    def make(endpoint: str | None = None) -> ModelsWindow:
        window = ModelsWindow(settings, endpoint=endpoint)
        qtbot.addWidget(window)
        window.download_panel.chunk_bytes = 16 * 1024  # progress in steps the gate can stop between
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        assert window.shutdown(10_000)


def _allow_and_search(qtbot, window: ModelsWindow, query: str = "miaohui") -> None:
    window.allow_box.click()
    window.search_tab.query.setText(query)
    window.search_tab.search_button.click()
    qtbot.waitUntil(lambda: window.search_tab.table.rowCount() > 0, timeout=WAIT_MS)


def _open_page(qtbot, window: ModelsWindow, repo: str) -> None:
    assert window.search_tab.select_repo(repo)
    page = window.search_tab.model_page
    qtbot.waitUntil(lambda: page.page is not None and page.page.repo == repo, timeout=WAIT_MS)


def _models_folder_entries() -> list[str]:
    return sorted(p.name for p in paths.models_dir().iterdir())


# ---------------------------------------------------------------- tests


def test_downloads_are_off_by_default_and_nothing_touches_the_network(qtbot, settings, open_window, monkeypatch):
    attempts = guard_network(monkeypatch)
    window = open_window()  # the default endpoint: huggingface.co, were anything to reach it
    search = window.search_tab
    assert settings.allow_downloads() is False and not window.allow_box.isChecked()
    assert window.allow_box.text() == "Allow downloads from Hugging Face"
    for control in (search.query, search.sort, search.format, search.search_button, search.next_button,
                    search.previous_button, search.model_page.download_button):
        assert not control.isEnabled()
    assert not search.offline_note.isHidden() and "nothing in this window touches the network" in \
        search.offline_note.text()
    assert "nothing in this window touches the network" in window.access_note.text()
    assert not window.installed_tab.empty_note.isHidden() and window.installed_tab.table.rowCount() == 0

    search.query.setText("tiny")
    search.search()  # even asked directly, it refuses before any request
    assert "off" in window.messages.text()
    assert window.start_download(TINY) is False
    qtbot.wait(200)
    assert not window.runner.busy() and not window.download_panel.isVisible()
    assert attempts == []


def test_search_fit_download_and_use_the_model(qtbot, settings, open_window, fake_hub, gate, monkeypatch):
    attempts = guard_network(monkeypatch, allow_loopback=True)
    window = open_window(fake_hub.url)
    search = window.search_tab
    search.page_size = 2
    _allow_and_search(qtbot, window)
    assert settings.allow_downloads() is True and search.query.isEnabled() and search.offline_note.isHidden()
    assert [search.table.item(r, 0).text() for r in range(search.table.rowCount())] == [TINY, GGUF_REPO]
    assert search.next_button.isEnabled() and not search.previous_button.isEnabled()
    search.next_button.click()
    qtbot.waitUntil(lambda: search.results is not None and search.results.page == 1, timeout=WAIT_MS)
    assert search.table.item(0, 0).text() == REMOTE_CODE and search.previous_button.isEnabled()
    search.previous_button.click()
    qtbot.waitUntil(lambda: search.results is not None and search.results.page == 0, timeout=WAIT_MS)

    # the model page and its fit estimate, equal to engine.library.fit's for the same config
    _open_page(qtbot, window, TINY)
    page, panel = search.model_page, search.model_page.fit_panel
    qtbot.waitUntil(lambda: bool(panel.estimates), timeout=WAIT_MS)
    statuses = {page.files.item(r, 0).text(): page.files.item(r, 2).text() for r in range(page.files.rowCount())}
    assert statuses["pytorch_model.bin"].startswith("never") and statuses[WEIGHTS].startswith("yes")
    assert "license apache-2.0" in page.facts.text() and "open" in page.facts.text()
    arch, plan = hub.remote_architecture(TINY, allow_downloads=True, endpoint=fake_hub.url)
    assert panel.context.value() == 256  # the tiny model's reach, below the 4,096 default
    for context in (256, 100):
        panel.context.setValue(context)
        assert list(panel.estimates) == list(engine_precisions())
        for row, (precision, shown) in enumerate(panel.estimates.items()):
            expected = fit.estimate(arch, model=TINY, context=context, precision=precision, memory=panel.memory,
                                    download_bytes=plan.total_bytes)
            assert shown == expected
            assert [panel.table.item(row, c).text() for c in range(1, 5)] == [
                format_bytes(expected.weights_bytes), format_bytes(expected.kv_bytes),
                format_bytes(expected.total_bytes), format_bytes(expected.memory.free_bytes)]
            assert panel.table.item(row, 5).text() == expected.verdict  # plenty free: "fits"
        assert panel.estimates["bf16"].kv_bytes == context * 2 * 2 * 2 * 16 * 2  # 2·L·ctx·kv heads·head dim·bytes
    assert panel.estimates[panel.auto_precision].kv_formula in panel.formulas.text()
    assert "V·d + 12·L·d²" in panel.formulas.text() and "fits ≤ 80%" in panel.formulas.text()

    # the download, with progress mid-file (the gate holds the weights at 64 KiB)
    bar = window.download_panel
    page.download_button.click()
    qtbot.waitUntil(lambda: WEIGHTS in bar.detail.text(), timeout=WAIT_MS)
    assert bar.isVisible() and 0 < bar.bar.value() < 1000
    assert format_bytes(plan.total_bytes) in bar.detail.text() and " of " in bar.detail.text()
    assert not page.download_button.isEnabled()  # one download at a time
    with qtbot.waitSignal(bar.finished, timeout=WAIT_MS) as finished:
        gate.set()
    path = finished.args[0]
    assert not bar.isVisible() and "Installed" in window.messages.text()
    installed = window.installed_tab
    assert [m.repo for m in installed.models] == [TINY] and installed.selected_model().path == path
    assert installed.table.item(0, 1).text() == "safetensors" and installed.table.item(0, 3).text() == "99,648"
    assert not fake_hub.requests_for("pytorch_model.bin")
    assert not page.download_button.isEnabled() and "Already installed" in page.download_button.toolTip()

    # "Use this model" gives a path the engine loads
    window.tabs.setCurrentWidget(installed)
    with qtbot.waitSignal(window.model_chosen, timeout=5000) as chosen:
        installed.use_button.click()
    assert chosen.args == [path]
    from engine.models.loader import load_model

    loaded = load_model(LoadSpec(model=chosen.args[0], precision="fp32", device="cpu"))
    assert loaded.facts.params == 99_648 == panel.estimates["fp32"].params
    assert loaded.facts.weights_bytes == panel.estimates["fp32"].weights_bytes
    assert attempts == []


def test_gguf_quantizations_and_a_remote_code_refusal(qtbot, open_window, fake_hub, monkeypatch):
    attempts = guard_network(monkeypatch, allow_loopback=True)
    window = open_window(fake_hub.url)
    _allow_and_search(qtbot, window)
    page = window.search_tab.model_page
    _open_page(qtbot, window, GGUF_REPO)
    assert [page.choice.itemData(i) for i in range(page.choice.count())] == [GGUF_F16, GGUF_Q8]
    for index, name in enumerate((GGUF_F16, GGUF_Q8)):
        page.choice.setCurrentIndex(index)
        qtbot.waitUntil(lambda: bool(page.fit_panel.estimates) and name in page.fit_panel.label, timeout=WAIT_MS)
        arch, _plan = hub.remote_architecture(GGUF_REPO, file=name, allow_downloads=True, endpoint=fake_hub.url)
        shown = page.fit_panel.estimates["bf16"]
        assert shown.params == arch.params and shown.kv_bytes_per_token == arch.kv_bytes_per_token(2)
    assert "Q8_0" in page.choice.itemText(1) and page.download_button.isEnabled()

    _open_page(qtbot, window, REMOTE_CODE)
    assert page.page.needs_remote_code and not page.refusal.isHidden()
    assert "refused" in page.refusal.text().lower() and "code" in page.refusal.text()
    assert "needs its own Python code: refused" in page.facts.text()
    assert not page.download_button.isEnabled() and page.choice.count() == 0
    assert "refused" in page.fit_panel.placeholder.text()
    assert attempts == []


def test_cancel_mid_file_leaves_nothing_behind(qtbot, open_window, fake_hub, gate, monkeypatch):
    guard_network(monkeypatch, allow_loopback=True)
    window = open_window(fake_hub.url)
    window.allow_box.click()
    bar = window.download_panel
    assert window.start_download(TINY)
    qtbot.waitUntil(lambda: WEIGHTS in bar.detail.text(), timeout=WAIT_MS)
    assert any(p.name.startswith(download.WORK_PREFIX) for p in paths.models_dir().iterdir())
    assert window.installed_tab.partial == []  # the download under way is the bar's, not a stopped one
    with qtbot.waitSignal(bar.stopped, timeout=WAIT_MS) as stopped:
        bar.cancel_button.click()
        gate.set()
    assert "cancelled" in stopped.args[0] and "nothing was installed" in window.messages.text()
    assert _models_folder_entries() == []
    assert window.installed_tab.models == [] and window.installed_tab.partial == []
    assert window.installed_tab.partial_box.isHidden()


def test_pause_then_resume_after_a_restart(qtbot, settings, open_window, fake_hub, gate, monkeypatch):  # noqa: F811
    guard_network(monkeypatch, allow_loopback=True)
    window = open_window(fake_hub.url)
    window.allow_box.click()
    assert window.start_download(TINY)
    qtbot.waitUntil(lambda: WEIGHTS in window.download_panel.detail.text(), timeout=WAIT_MS)
    with qtbot.waitSignal(window.download_panel.stopped, timeout=WAIT_MS) as stopped:
        window.download_panel.pause_button.click()
        gate.set()
    assert "paused" in stopped.args[0]
    assert [p.repo for p in window.installed_tab.partial] == [TINY] and window.installed_tab.models == []
    assert window.shutdown(5000)
    window.close()

    again = open_window(fake_hub.url)  # a new session: the setting and the partial download are remembered
    tab = again.installed_tab
    assert again.allow_box.isChecked() and [p.repo for p in tab.partial] == [TINY]
    assert not tab.partial_box.isHidden()
    tab.partial_table.selectRow(0)
    assert tab.resume_button.isEnabled()
    before = len(fake_hub.requests_for(WEIGHTS))
    with qtbot.waitSignal(again.download_panel.finished, timeout=WAIT_MS):
        tab.resume_button.click()
    ranges = [e.range for e in fake_hub.requests_for(WEIGHTS)[before:] if e.method == "GET"]
    assert any(r and r.startswith("bytes=") and not r.startswith("bytes=0-") for r in ranges)  # resumed mid-file
    assert [m.repo for m in tab.models] == [TINY] and tab.partial == []


def test_turning_downloads_off_pauses_the_download(qtbot, settings, open_window, fake_hub, gate,  # noqa: F811
                                                   monkeypatch):
    guard_network(monkeypatch, allow_loopback=True)
    window = open_window(fake_hub.url)
    window.allow_box.click()
    assert window.start_download(TINY)
    qtbot.waitUntil(lambda: WEIGHTS in window.download_panel.detail.text(), timeout=WAIT_MS)
    with qtbot.waitSignal(window.download_panel.stopped, timeout=WAIT_MS):
        window.allow_box.click()
        gate.set()
    assert settings.allow_downloads() is False and not window.search_tab.query.isEnabled()
    assert [p.repo for p in window.installed_tab.partial] == [TINY]
    window.installed_tab.partial_table.selectRow(0)
    assert not window.installed_tab.resume_button.isEnabled()


def test_delete_asks_first_and_says_when_it_is_the_default(qtbot, open_window, tiny_model_dir, monkeypatch):
    guard_network(monkeypatch)
    models = paths.models_dir()
    shutil.copytree(tiny_model_dir, models / "my-tiny")
    default = models / paths.DEFAULT_MODEL_NAME
    shutil.copytree(tiny_model_dir, default)
    (default / MARKER).write_text("{}")
    questions: list[str] = []
    answer = [QMessageBox.StandardButton.No]

    def question(parent, title, text, *args, **kwargs):
        questions.append(text)
        return answer[0]

    monkeypatch.setattr(QMessageBox, "question", question)
    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    window = open_window()
    tab = window.installed_tab
    assert [(m.name, m.default) for m in tab.models] == [(paths.DEFAULT_MODEL_NAME, True), ("my-tiny", False)]
    assert "default" in tab.table.item(0, 0).text() and "default" not in tab.table.item(1, 0).text()

    assert tab.select_model(str(models / "my-tiny"))
    tab.open_button.click()
    assert [u.toLocalFile() for u in opened] == [str(models / "my-tiny")]
    tab.delete_button.click()  # answered No: nothing happens
    assert (models / "my-tiny").is_dir() and "my-tiny" in questions[-1] and "default model" not in questions[-1]
    answer[0] = QMessageBox.StandardButton.Yes
    with qtbot.waitSignal(window.models_changed, timeout=5000):
        tab.delete_button.click()
    assert not (models / "my-tiny").exists() and [m.name for m in tab.models] == [paths.DEFAULT_MODEL_NAME]

    tab.select_model(str(default))
    tab.delete_button.click()
    assert "This is the default model" in questions[-1]
    assert not default.exists() and tab.models == [] and _models_folder_entries() == []


def test_from_the_main_windows_menu_to_chatting_with_a_downloaded_model(qtbot, settings, store, make_window,  # noqa: F811
                                                                         fake_hub, monkeypatch):
    """The issue's whole flow: Models… in the window's menu, allow, search, download, use it, chat with it."""
    attempts = guard_network(monkeypatch, allow_loopback=True)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)  # the window's Models window takes the endpoint from here
    window = make_window(max_new_tokens=4, loaded=False)
    action = next(a for a in window.actions() if a.text() == "Models…")
    action.trigger()
    models = window.models_window
    assert models is not None and models.isVisible()
    models.download_panel.chunk_bytes = 16 * 1024
    _allow_and_search(qtbot, models)
    _open_page(qtbot, models, TINY)
    with qtbot.waitSignal(models.download_panel.finished, timeout=WAIT_MS) as finished:
        models.search_tab.model_page.download_button.click()
    path = finished.args[0]
    models.tabs.setCurrentWidget(models.installed_tab)
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        models.installed_tab.use_button.click()
    assert window.model_bar.current_model() == path
    assert send_and_wait(qtbot, window, "Hello") in ("eos", "length")
    cid = window.current_conversation()
    assert store.messages(cid)[-1].role == "assistant" and store.messages(cid)[-1].text != ""
    assert attempts == []
