"""A gated recommended model downloaded from the Recommended tab through real clicks against the fake Hub: refused
without a token (saying so), the token entered in the Models window and kept in the keyring only, then the
download with its progress, sent with the token to the Hub endpoint only."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.state.hub_token import SERVICE
from app.widgets.models_window import ModelsWindow
from engine import paths
from engine.library.curated import CURATED
from tests.app._gui_fixtures import settings  # noqa: F401
from tests.helpers.fake_hub import FakeHub
from tests.helpers.keyrings import memory_keyring, no_keyring  # noqa: F401 (fixture)
from tests.helpers.network import guard_network

WAIT_MS = 60_000
LLAMA = "meta-llama/Llama-3.2-1B-Instruct"
TOKEN = "hf_granted_for_tests_0123456789"


def _window(qtbot, settings, hub) -> ModelsWindow:  # noqa: F811
    window = ModelsWindow(settings, endpoint=hub.url)
    qtbot.addWidget(window)
    window.show()
    tab = window.recommended_tab
    window.tabs.setCurrentWidget(tab)
    qtbot.waitUntil(lambda: tab.table.rowCount() == len(CURATED) and tab.measure_button.isEnabled(), timeout=WAIT_MS)
    tab.table.selectRow(next(i for i, r in enumerate(tab.recommendations) if r.model.repo == LLAMA))
    return window


def _holding(folder, token: str) -> list[str]:
    """Files under ``folder`` (the test's data and settings folders) with ``token`` in them."""
    return [str(p) for p in folder.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]


def _gated_hub(tiny_model_dir) -> FakeHub:
    hub = FakeHub()
    hub.add_folder(LLAMA, tiny_model_dir, gated="manual",
                   tags=["transformers", "safetensors", "llama", "text-generation", "license:llama3.2"])
    hub.grant(LLAMA, TOKEN)
    return hub.start()


def test_a_gated_recommendation_downloads_once_a_token_is_saved(qtbot, settings, home, tiny_model_dir,  # noqa: F811
                                                                no_keyring, monkeypatch, tmp_path):  # noqa: F811
    attempts = guard_network(monkeypatch, allow_loopback=True)
    keyring = memory_keyring()
    hub = _gated_hub(tiny_model_dir)
    try:
        window = _window(qtbot, settings, hub)
        tab = window.recommended_tab
        row = tab.table.selectionModel().selectedRows()[0].row()
        assert "gated" in tab.table.item(row, 5).text()
        assert "huggingface.co/meta-llama/Llama-3.2-1B-Instruct" in tab.licence_note.text()
        assert not tab.download_button.isEnabled()
        window.allow_box.click()
        qtbot.mouseClick(tab.download_button, Qt.MouseButton.LeftButton)  # no token yet
        qtbot.waitUntil(lambda: not window.download_panel.is_busy() and window.messages.isVisible(), timeout=WAIT_MS)
        assert window.messages.level == "error" and "gated" in window.messages.label.text()
        assert "token" in window.messages.label.text()
        assert "No token" in window.token_row.note.text()

        qtbot.keyClicks(window.token_row.field, TOKEN)
        qtbot.mouseClick(window.token_row.save_button, Qt.MouseButton.LeftButton)
        assert window.token_row.field.text() == ""
        assert keyring.passwords == {(SERVICE, hub.url): TOKEN}
        assert "kept" in window.token_row.note.text() and window.token_row.forget_button.isEnabled()

        with qtbot.waitSignal(window.download_panel.finished, timeout=WAIT_MS) as done:
            qtbot.mouseClick(tab.download_button, Qt.MouseButton.LeftButton)
            assert window.download_panel.isVisible()  # the progress, in the Recommended tab's window
        assert done.args[0].endswith("meta-llama--Llama-3.2-1B-Instruct")
        resolves = [e for e in hub.log if "/resolve/" in e.path]
        assert resolves[-1].auth == f"Bearer {TOKEN}" and resolves[-1].status in (200, 302)
        settings._q.sync()
        assert _holding(tmp_path, TOKEN) == []  # settings, history, the model folder, the download's work files
        assert (paths.models_dir() / "meta-llama--Llama-3.2-1B-Instruct").is_dir()
        assert window.shutdown(10_000)
    finally:
        hub.stop()
    assert all("127.0.0.1" in a or "localhost" in a for a in attempts)


def test_without_a_system_keyring_the_token_is_kept_for_this_run_only(qtbot, settings, home, tiny_model_dir,  # noqa: F811
                                                                      no_keyring, tmp_path):  # noqa: F811
    hub = _gated_hub(tiny_model_dir)
    try:
        window = _window(qtbot, settings, hub)
        qtbot.keyClicks(window.token_row.field, TOKEN)
        qtbot.mouseClick(window.token_row.save_button, Qt.MouseButton.LeftButton)
        assert "until Miaohui closes" in window.token_row.note.text()
        assert window.tokens.load(hub.url) == TOKEN
        settings._q.sync()
        assert _holding(tmp_path, TOKEN) == []
        assert window.shutdown(10_000)
        again = ModelsWindow(settings, endpoint=hub.url)  # the next start: nothing was written anywhere
        qtbot.addWidget(again)
        assert again.tokens.load(hub.url) is None
        assert again.shutdown(10_000)
    finally:
        hub.stop()
