"""The window in remote mode: "Connect to server…" against a real ``engine serve`` (the tiny model behind uvicorn on
127.0.0.1), a reply streaming through it, the panel's client-side figures and the server's KV usage from its
``/metrics``, the history's record of which engine answered, and the API key nowhere on disk or in the logs unless
the user asked to remember it (then in the keyring, or with no keyring in the settings file). A server with no
``/metrics`` and a stream cut mid-reply come from ``tests.helpers.openai_wire``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from PySide6 import QtGui
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from app.history.export import perf_to_csv, to_json, to_markdown
from engine.errors import ErrorKind
from engine.fmt import outside_text
from engine.inputs import LoadSpec
from engine.models.loader import load_model
from engine.remote import RemoteSpec, ServerFigures
from tests.app._gui_fixtures import (LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, make_window, send_and_wait,  # noqa: F401
                                     settings, store)
from tests.engine.serve.conftest import start_server
from tests.helpers.keyrings import file_keyring, no_keyring  # noqa: F401 (no_keyring: fixture)
from tests.helpers.openai_wire import MODEL, WORDS, SilentServer, WireServer

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]

SECRET = "sk-remote-test-secret-4242"


@pytest.fixture(autouse=True)
def _no_keyring_unless_set(no_keyring):  # noqa: F811
    """No keyring unless a test sets one (tests/helpers/keyrings.py)."""


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    served, stop = start_server(loaded, key=SECRET)
    yield served
    stop()


def connect_through_the_dialog(qtbot, window, url: str, key: str = "", remember: bool | None = None):
    """What a user does: Connect to server…, the address and key (ticking "Remember the key" or not), List models,
    Connect."""
    qtbot.mouseClick(window.model_bar.connect_button, Qt.MouseButton.LeftButton)
    source = window.remote_source
    dialog = source.dialog
    assert dialog is not None and dialog.isVisible() and not dialog.connect_button.isEnabled()
    dialog.url_edit.setText(url)
    dialog.key_edit.setText(key)
    if remember is not None:
        dialog.remember_box.setChecked(remember)
    with qtbot.waitSignal(dialog.listing_done, timeout=LOAD_TIMEOUT_MS):
        qtbot.mouseClick(dialog.list_button, Qt.MouseButton.LeftButton)
    assert dialog.connect_button.isEnabled(), dialog.status.text()
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS) as ready, \
            qtbot.waitSignal(source.server_read, timeout=LOAD_TIMEOUT_MS):
        qtbot.mouseClick(dialog.connect_button, Qt.MouseButton.LeftButton)
    return source, ready.args[0]


def test_a_reply_streams_from_the_server_with_its_kv_usage_and_no_key_is_kept(qtbot, make_window, store, server,
                                                                              tmp_path, home, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, openai's and httpx's included
    window = make_window(max_new_tokens=8, loaded=False)
    source, facts = connect_through_the_dialog(qtbot, window, server.url, SECRET)
    assert facts.remote and facts.name == server.worker.model_id and source.spec.api_key == SECRET
    assert window.status_device.text().endswith(f"remote: 127.0.0.1:{server.port}")
    assert window.send_button.isEnabled()
    shown = window.perf_panel.displayed()
    assert shown["server_kv"].endswith("% in use (miaohui)")
    assert "miaohui:kv_cache_usage_perc" in window.perf_panel._values["server_kv"].toolTip()

    with qtbot.waitSignal(source.server_read, timeout=REPLY_TIMEOUT_MS) as read:
        assert send_and_wait(qtbot, window, "Hello") == "length"
    text = window.chat.messages()[-1].text
    assert text and text == window.controller.messages()[-1].text
    shown = window.perf_panel.displayed()
    assert shown["ttft"] != "—" and shown["tokens"] == "8"
    # Decode speed and per-token latencies are measured on the client from chunk arrivals. The server sends the
    # pieces that queued up while it wrote the last chunk as one (engine/serve/app.py), so on a busy machine the
    # tiny model's 8 tokens can arrive in a single chunk: no time between first and last, and the panel must then
    # say "—", never a made-up rate (the chart then shows the tokens' zero gaps as they arrived). Rates from
    # separate arrivals: tests/engine/remote/test_session.py.
    timed = store.messages(window.current_conversation())[-1].perf.decode_tok_s is not None
    assert ("tok/s" in shown["decode_avg"]) == timed and (shown["decode_avg"] == "—") == (not timed)
    assert int(shown["chart_points"]) > 0 or not timed  # per-token latencies measured on the client
    for key in ("kv", "kv_formula", "kv_no_gqa", "peak"):
        assert shown[key] == "—", key  # not known through the API: never a made-up 0 B
    assert shown["device"] == f"remote: 127.0.0.1:{server.port}" and shown["context"].endswith("%)")
    assert read.args[0] is not None and read.args[0].ttft.count == 1  # this reply, as the server timed it
    assert "mean of 1 request" in shown["server_ttft"] and "%" in shown["server_kv"]

    cid = window.current_conversation()
    record = store.messages(cid)[-1].perf
    assert record.device == f"remote: 127.0.0.1:{server.port}" and record.precision == "remote"
    assert record.model == facts.name and record.generated_tokens == 8 and record.kv_cache_bytes is None
    footer = window.controller.messages()[-1].footer
    assert "KV" not in footer and ("tok/s" in footer) == timed

    exports = to_markdown(store, cid) + to_json(store, cid) + perf_to_csv(store)
    assert "remote: 127.0.0.1" in exports and SECRET not in exports
    on_disk = [p for p in (tmp_path.rglob("*")) if p.is_file()] + [p for p in Path(home).rglob("*") if p.is_file()]
    assert on_disk and not [p for p in on_disk if SECRET.encode() in p.read_bytes()]
    assert window.settings.remote_choice() == (server.url + "/v1", facts.name)  # the address is remembered
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


def test_a_server_without_metrics_says_so_and_a_local_model_hides_its_rows(qtbot, make_window, tiny_model_dir):
    window = make_window(max_new_tokens=8, loaded=True)
    panel = window.perf_panel
    assert panel._values["server_kv"].isHidden() or not panel._values["server_kv"].isVisible()
    with WireServer("ok") as wire:
        connect_through_the_dialog(qtbot, window, wire.url)
        assert panel.displayed()["server_kv"] == "not reported by this server"
        assert panel._values["server_kv"].isVisible()
        assert send_and_wait(qtbot, window, "Hi") == "eos"
        assert window.chat.messages()[-1].text == "".join(WORDS)
        assert panel.displayed()["server_ttft"] == "not reported by this server"
        assert wire.requests[-1]["model"] == MODEL and wire.requests[-1]["max_tokens"] == 8
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(tiny_model_dir), "fp32", "cpu")
    assert not panel._values["server_kv"].isVisible() and not panel._values["server_ttft"].isVisible()


def test_a_stream_cut_mid_reply_keeps_the_partial_reply_and_says_why_in_one_line(qtbot, make_window, store):
    window = make_window(max_new_tokens=8, loaded=False)
    with WireServer("cut") as wire:
        connect_through_the_dialog(qtbot, window, wire.url)
        assert send_and_wait(qtbot, window, "Hi") == "error"
    kept = window.controller.messages()[-1]
    assert kept.role == "assistant" and kept.text == "".join(WORDS[:2]) and kept.finish_reason == "error"
    assert store.messages(window.current_conversation())[-1].text == kept.text
    notice = window.messages.text()
    assert "was cut" in notice and "\n" not in notice


def test_lab_work_that_needs_the_weights_says_it_needs_a_local_model(qtbot, make_window, server):
    window = make_window(loaded=False)
    source = window.remote_source
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        source.connect_to(RemoteSpec(server.url, "default", SECRET))
    with qtbot.waitSignal(window.bridge.task_failed, timeout=LOAD_TIMEOUT_MS) as failed:
        window.bridge.submit_task(lambda loaded, cancel: loaded.tokenizer)
    assert "needs a model loaded on this computer" in failed.args[1]


def _files_holding(secret: str, *folders: Path) -> list[Path]:
    return [p for folder in folders for p in Path(folder).rglob("*")
            if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_remembered_key_goes_to_the_keyring_and_comes_back_next_time(qtbot, make_window, store, server, tmp_path,
                                                                       home, settings):
    backend = file_keyring(tmp_path)  # restored by no_keyring
    window = make_window(max_new_tokens=4, loaded=False)
    source, _ = connect_through_the_dialog(qtbot, window, server.url, SECRET, remember=True)
    url = server.url + "/v1"
    assert backend.get_password("Miaohui", url) == SECRET
    assert settings.remembered_api_key(url) is None
    assert send_and_wait(qtbot, window, "Hi") in ("eos", "length")
    # Not in the history, the settings or anything else but the keyring's own file (which keeps it base64-encoded).
    assert not _files_holding(SECRET, home, tmp_path / "qsettings")
    source._keys.clear()  # as after a restart: only what was kept between runs is left
    source.open_dialog()
    assert source.dialog.key_edit.text() == SECRET and source.dialog.remember_key()
    source.dialog.close()


def test_without_a_keyring_the_key_is_kept_in_the_settings_only_when_ticked_and_forgotten_when_unticked(
        qtbot, make_window, server, tmp_path, home, settings):
    window = make_window(max_new_tokens=4, loaded=False)
    url = server.url + "/v1"
    source, _ = connect_through_the_dialog(qtbot, window, server.url, SECRET)  # default: not remembered
    assert not source.dialog.remember_key() and source.dialog.key_warning.isVisibleTo(source.dialog)
    assert settings.remembered_api_key(url) is None and not _files_holding(SECRET, tmp_path)
    connect_through_the_dialog(qtbot, window, server.url, SECRET, remember=True)
    assert settings.remembered_api_key(url) == SECRET
    assert _files_holding(SECRET, tmp_path) == [Path(settings._q.fileName())]  # the settings file, nothing else
    source._keys.clear()
    source.open_dialog()
    assert source.dialog.key_edit.text() == SECRET and source.dialog.remember_key()
    source.dialog.close()
    connect_through_the_dialog(qtbot, window, server.url, SECRET, remember=False)
    assert settings.remembered_api_key(url) is None and not _files_holding(SECRET, tmp_path)


# -- hostile servers (issue 31, defects 6, 7, 9) ----------------------------------------------------------------
def test_a_server_whose_metrics_are_nan_or_infinite_shows_them_as_not_reported_after_every_reply(qtbot, make_window):
    window = make_window(max_new_tokens=8, loaded=False)
    with WireServer("nan-metrics") as wire:
        source, _ = connect_through_the_dialog(qtbot, window, wire.url)  # the first reading: before, a bug dialog
        for _ in range(2):
            with qtbot.waitSignal(source.server_read, timeout=REPLY_TIMEOUT_MS) as read:
                assert send_and_wait(qtbot, window, "Hi") == "eos"
            assert read.args[0] == ServerFigures()  # every figure unknown
            shown = window.perf_panel.displayed()
            assert shown["server_kv"] == shown["server_ttft"] == "not reported by this server"


def _wait_until_it_waits(qtbot, silent: SilentServer) -> None:
    """The connect is under way: the silent server holds its connection."""
    qtbot.waitUntil(lambda: silent.accepted > 0, timeout=LOAD_TIMEOUT_MS)


def test_a_server_that_never_answers_holds_neither_the_engine_nor_the_local_model(qtbot, make_window, tiny_model_dir):
    window = make_window(loaded=False)
    source = window.remote_source
    forever = {"connect_timeout_s": 600.0, "answer_timeout_s": 600.0}  # only a cancel can end this connect
    with SilentServer() as silent:
        source.connect_to(RemoteSpec(silent.url, "", **forever))
        _wait_until_it_waits(qtbot, silent)
        with qtbot.waitSignal(window.bridge.load_failed, timeout=LOAD_TIMEOUT_MS) as failed, \
                qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS) as ready:
            window.load_model(str(tiny_model_dir), "fp32", "cpu")  # before: waited behind the connect, 300 s
        assert failed.args[0].kind is ErrorKind.CANCELLED and not getattr(ready.args[0], "remote", False)
        assert window.send_button.isEnabled() and window.status_model.text() == ready.args[0].name

        # Stop cancels a connect at once, whatever its timeouts.
        source.connect_to(RemoteSpec(silent.url, "", **forever))
        qtbot.waitUntil(lambda: silent.accepted > 1, timeout=LOAD_TIMEOUT_MS)
        assert window.stop_button.isEnabled()
        with qtbot.waitSignal(window.bridge.load_failed, timeout=30_000) as failed:  # far less than its timeouts
            qtbot.mouseClick(window.stop_button, Qt.MouseButton.LeftButton)
        assert failed.args[0].kind is ErrorKind.CANCELLED and "cancelled" in window.messages.text()
        assert window.controller.facts.name == ready.args[0].name  # the local model is still the one loaded


def test_connecting_to_a_server_that_never_answers_gives_up_within_seconds_with_one_line(qtbot, make_window):
    window = make_window(loaded=False)
    with SilentServer() as silent:
        qtbot.mouseClick(window.model_bar.connect_button, Qt.MouseButton.LeftButton)
        dialog = window.remote_source.dialog
        dialog.url_edit.setText(silent.url)
        with qtbot.waitSignal(dialog.listing_done, timeout=60_000):  # the default timeouts: seconds, not minutes
            qtbot.mouseClick(dialog.list_button, Qt.MouseButton.LeftButton)
        assert "did not answer in time" in dialog.status.text() and not dialog.connect_button.isEnabled()
        dialog.close()
        with qtbot.waitSignal(window.bridge.load_failed, timeout=60_000) as failed:
            window.remote_source.connect_to(RemoteSpec(silent.url, ""))
    assert "did not answer in time" in failed.args[0].message and "\n" not in window.messages.text()


HOSTILE_NAMES = ("<b>SESSION EXPIRED</b> <a href='https://evil.example/'>re-enter your API key here</a>"
                 "<img src='https://evil.example/pixel.png'>", "\x1b]0;pwned\x07")


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=["html", "terminal-escape"])
def test_a_model_name_the_server_chose_is_shown_as_plain_escaped_text_everywhere(qtbot, make_window, name):
    window = make_window(max_new_tokens=8, loaded=False)
    with WireServer("ok", model=name) as wire:
        source, facts = connect_through_the_dialog(qtbot, window, wire.url)
        shown = outside_text(name)  # shown as its characters...
        assert window.messages.text().startswith(f"Connected to {shown} at ")
        assert facts.name == name  # ...and kept as the server names it (it is sent back as is)
        assert send_and_wait(qtbot, window, "Hi") == "eos" and wire.requests[-1]["model"] == name
        assert window.status_model.text() == shown
        # Issue 41 point 9: the precision field showed the model's name; a server does not say its precision.
        assert window.perf_panel.displayed()["precision"] == "remote" and window.status_precision.text() == "· remote"
        widgets = window.findChildren(QWidget) + [window]
        labels = [w for w in widgets
                  if isinstance(w, QLabel) and ("SESSION EXPIRED" in w.text() or "pwned" in w.text())]
        assert {window.status_model, window.model_card.placeholder} <= set(labels)
        for label in labels:  # as text, never as rich text (a bold line, a link, an image fetched)
            rich = label.textFormat() != Qt.TextFormat.PlainText and QtGui.Qt.mightBeRichText(label.text())
            assert not rich, label.text()
        tips = [w.toolTip() for w in widgets if "SESSION EXPIRED" in w.toolTip() or "pwned" in w.toolTip()]
        assert all("<b>" not in tip and "<img" not in tip for tip in tips)
        texts = [w.text() for w in labels] + [window.windowTitle(), window.messages.text()] + tips
        assert not [text for text in texts if "\x1b" in text or "\x07" in text]
