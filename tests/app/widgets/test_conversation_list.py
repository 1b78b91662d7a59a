"""ConversationList as a real widget on a real HistoryStore: list, select, search, new, rename, delete, export."""

from __future__ import annotations

import itertools
import json
from contextlib import contextmanager
from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from app.history.perf import PerfRecord
from app.history.store import HistoryStore
from app.widgets.conversation_list import ConversationList


@pytest.fixture
def store(tmp_path):
    ticks = itertools.count(1_700_000_000)
    with HistoryStore(tmp_path / "history.sqlite3", clock=lambda: float(next(ticks))) as s:
        yield s


@pytest.fixture
def widget(qtbot, store):
    w = ConversationList(store)
    qtbot.addWidget(w)
    return w


def titles(w: ConversationList) -> list[str]:
    return [w.list.item(i).text() for i in range(w.list.count())]


def test_lists_newest_first_and_emits_the_picked_id(qtbot, store, widget):
    assert titles(widget) == [] and widget.status.text() == "No conversations yet."
    first = store.create_conversation("first")
    second = store.create_conversation("second")
    widget.refresh()
    assert titles(widget) == ["second", "first"] and widget.current_id() is None
    assert not widget.rename_button.isEnabled() and not widget.delete_button.isEnabled()
    with qtbot.waitSignal(widget.conversation_selected, timeout=1000) as picked:
        widget.list.setCurrentRow(1)
    assert picked.args == [first] and widget.current_id() == first
    assert widget.rename_button.isEnabled() and widget.delete_button.isEnabled()
    with qtbot.assertNotEmitted(widget.conversation_selected):
        widget.select(second)
        widget.refresh()
    assert widget.current_id() == second and widget.list.currentItem().text() == "second"


def test_new_button_asks_the_window(qtbot, widget):
    with qtbot.waitSignal(widget.new_requested, timeout=1000):
        widget.new_button.click()


def test_search_filters_titles_and_text(qtbot, store, widget):
    trip = store.create_conversation("杭州旅行")
    notes = store.create_conversation("KV notes")
    store.add_message(notes, "user", "prefill is compute-bound")
    widget.refresh()
    widget.search.setText("prefill")
    qtbot.waitUntil(lambda: titles(widget) == ["KV notes"], timeout=2000)
    widget.search.setText("杭州")
    qtbot.waitUntil(lambda: titles(widget) == ["杭州旅行"], timeout=2000)
    widget.search.setText("nothing")
    qtbot.waitUntil(lambda: titles(widget) == [], timeout=2000)
    assert widget.status.text() == "No conversation matches."
    widget.select(trip)  # a hidden conversation being opened clears the search instead of staying hidden
    assert widget.search.text() == "" and widget.list.currentItem().text() == "杭州旅行"


def test_rename_through_the_dialog(qtbot, store, widget, monkeypatch):
    cid = store.create_conversation("old name")
    widget.select(cid)
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("  new   名字 ", True))
    widget.rename_button.click()
    assert store.get_conversation(cid).title == "new 名字" and titles(widget) == ["new 名字"]
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("ignored", False))
    widget.rename_button.click()
    assert store.get_conversation(cid).title == "new 名字"


def test_delete_needs_confirmation_and_reports_the_id(qtbot, store, widget, monkeypatch):
    keep = store.create_conversation("keep")
    doomed = store.create_conversation("doomed")
    store.add_message(doomed, "user", "bye")
    widget.select(doomed)
    asked = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a, **k: asked.append(a[2]) or QMessageBox.StandardButton.No)
    with qtbot.assertNotEmitted(widget.conversation_deleted):
        widget.delete_button.click()
    assert "doomed" in asked[0] and titles(widget) == ["doomed", "keep"]
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(widget.conversation_deleted, timeout=1000) as deleted:
        widget.delete_button.click()
    assert deleted.args == [doomed] and widget.current_id() is None
    assert titles(widget) == ["keep"] and [c.id for c in store.list_conversations()] == [keep]


def test_export_markdown_and_json_through_the_file_dialog(qtbot, store, widget, monkeypatch, tmp_path):
    cid = store.create_conversation()
    store.add_message(cid, "user", "Hello: what/why?")
    widget.select(cid)
    target = tmp_path / "out.md"
    offered = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda *a, **k: offered.append(a[2]) or (str(target), a[3]))
    widget.on_export_triggered("markdown")
    assert offered[0].endswith("Hello_ what_why_.md")
    assert target.read_text(encoding="utf-8").startswith("# Hello: what/why?")
    target = tmp_path / "out.json"
    widget.on_export_triggered("json")
    assert json.loads(target.read_text(encoding="utf-8"))["messages"][0]["text"] == "Hello: what/why?"


def test_a_markdown_export_copies_its_pictures_into_a_folder_beside_it(qtbot, store, widget, tmp_path, home):
    from app.history.images import save_images
    from engine.vision import image_store

    kept = image_store.put(b"\x89PNG\r\n\x1a\n-pixels", "png")
    cid = store.create_conversation("shots")
    save_images(store, store.add_message(cid, "user", "What is this?"), [str(kept)])
    assert widget.export_to(cid, "markdown", tmp_path / "my chat.md")
    assert f"(<my chat-images/{kept.name}>)" in (tmp_path / "my chat.md").read_text(encoding="utf-8")
    assert (tmp_path / "my chat-images" / kept.name).read_bytes() == kept.read_bytes()


def test_export_failure_is_one_line_warning(qtbot, store, widget, monkeypatch, tmp_path):
    cid = store.create_conversation("x")
    shown = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: shown.append(a[2]))
    assert not widget.export_to(cid, "markdown", tmp_path / "missing-folder" / "x.md")
    assert len(shown) == 1 and "\n" not in shown[0] and "missing-folder" in shown[0]



@contextmanager
def _file_size_limit(limit: int):
    """The kernel refuses to grow any file of this process past ``limit`` bytes (EFBIG), as a full disk refuses."""
    resource = pytest.importorskip("resource")
    signal = pytest.importorskip("signal")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@pytest.mark.parametrize("fmt", ["markdown", "json", "perf-csv"])
def test_a_failed_export_leaves_yesterdays_file_as_it_was(qtbot, store, widget, monkeypatch, tmp_path, fmt):
    # Issue 31 (10): the export wrote straight into the chosen file, so a disk filling part-way had already
    # truncated the previous export.
    cid = store.create_conversation("long")
    for i in range(80):  # each reply is a row of the performance CSV too
        store.add_message(cid, "assistant", f"{i}: Paris is the capital of France. " * 5, "eos",
                          PerfRecord(model="tiny-model", decode_tok_s=10.0 + i, generated_tokens=i))
    widget.select(cid)
    target = tmp_path / "exports" / f"yesterday.{fmt}"
    target.parent.mkdir()
    target.write_bytes(b"yesterday's export\n" * 100)
    before = target.read_bytes()
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: shown.append(a[2]))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), a[3]))
    with _file_size_limit(4096):
        if fmt == "perf-csv":
            widget.on_export_perf_triggered()
        else:
            widget.on_export_triggered(fmt)
    assert target.read_bytes() == before
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary file left beside it
    assert len(shown) == 1 and "\n" not in shown[0] and target.name in shown[0]
    # With room again the same export replaces it whole.
    if fmt == "perf-csv":
        widget.on_export_perf_triggered()
    else:
        widget.on_export_triggered(fmt)
    assert target.stat().st_size > 4096 and len(shown) == 1

def test_read_only_history_disables_rename_and_delete(qtbot, tmp_path):
    import sqlite3

    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as s:
        cid = s.create_conversation("future")
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with HistoryStore(path) as s:
        w = ConversationList(s)
        qtbot.addWidget(w)
        w.select(cid)
        assert titles(w) == ["future"]
        assert not w.rename_button.isEnabled() and not w.delete_button.isEnabled()
        assert "read-only" in w.delete_button.toolTip()


def test_keyboard_f2_renames_and_delete_deletes_when_the_list_has_focus(qtbot, store, widget, monkeypatch):
    from PySide6.QtCore import Qt

    cid = store.create_conversation("keyboard")
    widget.select(cid)
    widget.show()
    qtbot.waitExposed(widget)
    widget.list.setFocus()
    qtbot.waitUntil(widget.list.hasFocus, timeout=1000)
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("renamed by F2", True))
    qtbot.keyClick(widget.list, Qt.Key.Key_F2)
    assert store.get_conversation(cid).title == "renamed by F2"
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(widget.conversation_deleted, timeout=1000):
        qtbot.keyClick(widget.list, Qt.Key.Key_Delete)
    assert store.list_conversations() == []


def test_export_suggests_a_safe_file_name_for_a_hostile_title(qtbot, store, widget, monkeypatch, tmp_path):
    cid = store.create_conversation("CON")
    store.add_message(cid, "user", "hi")
    widget.select(cid)
    offered = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: offered.append(a[2]) or ("", ""))
    widget.on_export_triggered("markdown")
    assert Path(offered[0]).name == "_CON.md"
    store.rename_conversation(cid, "秒" * 100)
    widget.refresh()
    widget.select(cid)
    widget.on_export_triggered("json")
    name = Path(offered[1]).name
    assert name.endswith(".json") and len(name.encode("utf-8")) <= 120 and name.startswith("秒秒")


@pytest.mark.parametrize("when", [1e17, 1e308, -1e308])
def test_a_stored_time_out_of_any_calendar_does_not_break_the_list(qtbot, store, when):
    """Issue 40, item 7: an imported ``update_time`` of 1e17 made the list raise at every start."""
    cid = store.create_conversation("From the far future")
    with store._write() as c:  # noqa: SLF001 - a row as an older import wrote it
        c.execute("UPDATE conversations SET updated = ?, created = ? WHERE id = ?", (when, when, cid))
    w = ConversationList(store)
    qtbot.addWidget(w)
    assert titles(w) == ["From the far future"]
    assert "From the far future" in w.list.item(0).toolTip()
