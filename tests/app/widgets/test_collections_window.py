"""The Collections window on a real Bridge (its engine thread, no chat model loaded: indexing needs none) and the real
documents store in the test's data folder: it lists, adds a folder of real .txt/.md files into a new collection with
progress and one log line for the file that cannot be read, re-indexes only what changed, cancels a big folder
between files keeping what was indexed, and removes a collection only once confirmed."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from app.runtime.bridge import Bridge
from app.widgets.collections_window import CollectionsWindow
from app.runtime.collections_index import CollectionsIndexer
from engine import paths
from engine.docs.retrieve import search
from engine.docs.store import DocumentStore

INDEX_TIMEOUT_MS = 120_000


@pytest.fixture
def indexer(qtbot, home):
    bridge = Bridge()
    yield CollectionsIndexer(bridge)
    assert bridge.shutdown(10_000) is True


@pytest.fixture
def window(qtbot, indexer):
    shown = CollectionsWindow(indexer)
    qtbot.addWidget(shown)
    shown.show()
    return shown


def _notes(folder: Path) -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "tea.md").write_text("# Tea\n\nThe kettle in room 4 boils water in ninety seconds.\n", encoding="utf-8")
    (folder / "sub" / "plants.txt").write_text("Water the ficus on Fridays.", encoding="utf-8")
    (folder / "笔记.txt").write_text("会议在周三举行。", encoding="utf-8")
    (folder / "broken.txt").write_bytes(b"\x00\x01\x02\xff" * 64)  # binary behind a text suffix
    return folder


def _rows(window: CollectionsWindow) -> list[list[str]]:
    return [[window.table.item(r, c).text() for c in range(window.table.columnCount())]
            for r in range(window.table.rowCount())]


def _add(qtbot, window: CollectionsWindow, name: str, paths: list[str]):
    window.name_box.setCurrentText(name)
    with qtbot.waitSignal(window.indexer.finished, timeout=INDEX_TIMEOUT_MS) as done:
        assert window.add(paths)
    return done.args[0]


def test_a_folder_is_added_with_progress_and_a_line_for_the_bad_file(qtbot, window, tmp_path):
    assert window.table.rowCount() == 0 and window.empty_label.isVisibleTo(window)
    folder = _notes(tmp_path / "notes")
    seen = []
    window.indexer.progressed.connect(seen.append)
    report = _add(qtbot, window, "notes", [str(folder)])
    assert (report.added, report.failed, report.cancelled) == (3, 1, False)
    assert seen and seen[-1].done == seen[-1].total == 4  # the last file always reaches the bar
    assert _rows(window)[0][:3] == ["notes", "3", "3"]
    log = window.log.toPlainText().splitlines()
    assert [line for line in log if "broken.txt" in line] == [f"{folder / 'broken.txt'} is binary, not text: open it with "
                                                           "the program that made it and save it as text"]
    assert "indexed for keyword search only" in window.log.toPlainText()  # no embedding model in this data folder
    assert "notes" in window.status_label.text() and "3 added" in window.status_label.text()
    assert window.progress.isHidden() and window.add_folder_button.isEnabled()
    with DocumentStore(paths.documents_path()) as store:
        assert search(store, "kettle", ["notes"]).hits[0].path.endswith("tea.md")

    (folder / "sub" / "plants.txt").write_text("Water the orchid on Mondays.", encoding="utf-8")
    (folder / "new.md").write_text("A new note about lamps.", encoding="utf-8")
    window.table.selectRow(0)
    assert window.reindex_button.isEnabled() and window.name_box.currentText() == "notes"
    with qtbot.waitSignal(window.indexer.finished, timeout=INDEX_TIMEOUT_MS) as done:
        qtbot.mouseClick(window.reindex_button, Qt.MouseButton.LeftButton)
    again = done.args[0]
    assert (again.added, again.updated, again.unchanged, again.failed) == (1, 1, 2, 1)
    assert _rows(window)[0][1] == "4"


def test_cancel_stops_between_files_and_keeps_what_was_indexed(qtbot, window, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    total = 3000
    for i in range(total):
        (folder / f"n{i:04d}.txt").write_text(f"note {i}", encoding="utf-8")
    window.name_box.setCurrentText("many")
    window.indexer.progressed.connect(lambda event: window.cancel_button.click())  # at the first report
    with qtbot.waitSignal(window.indexer.finished, timeout=INDEX_TIMEOUT_MS) as done:
        assert window.add([str(folder)])
        assert window.cancel_button.isVisible() and not window.add_folder_button.isEnabled()
    report = done.args[0]
    assert report.cancelled and 0 < report.added < total
    assert _rows(window)[0][:2] == ["many", str(report.added)]
    assert "Cancelled" in window.status_label.text()


def test_remove_asks_first_and_keeps_the_files(qtbot, window, tmp_path, monkeypatch):
    folder = _notes(tmp_path / "notes")
    _add(qtbot, window, "notes", [str(folder / "tea.md")])
    _add(qtbot, window, "other", [str(folder / "sub")])
    assert [row[0] for row in _rows(window)] == ["notes", "other"]
    window.table.selectRow(0)
    answers = [QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes]
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, title, text, *_a: asked.append(text)
                        or answers.pop(0))
    qtbot.mouseClick(window.remove_button, Qt.MouseButton.LeftButton)  # No: nothing happens
    assert [row[0] for row in _rows(window)] == ["notes", "other"] and "notes" in asked[0]
    with qtbot.waitSignal(window.indexer.removed, timeout=INDEX_TIMEOUT_MS) as removed:
        qtbot.mouseClick(window.remove_button, Qt.MouseButton.LeftButton)
    assert removed.args == ["notes"]
    assert [row[0] for row in _rows(window)] == ["other"]
    assert (folder / "tea.md").is_file()  # the user's file is not touched
