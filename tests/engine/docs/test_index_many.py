"""A big folder of small text files (issue 43's "a folder of 10,000 files": the full 10,000 is timed by
``engine bench --docs``, ``engine.bench.docs.folder_indexing``; here 1,000 keep the test fast), indexed on keywords
alone into the real store: ``on_file`` reports every file (reading, then its outcome) with the run's total, a cancel
set mid-way stops before the next file and keeps every file indexed so far, and the next run reads only the files
not indexed yet.

No time is asserted (the machine is shared); docs/DOCUMENTS.md gives the figure measured once."""

from __future__ import annotations

import threading
from pathlib import Path

from engine.bench.docs import write_notes_folder
from engine.docs.index import FileProgress, index_paths
from engine.docs.retrieve import search
from engine.docs.store import DocumentStore

FILES = 1_000  # the full 10,000 is `engine bench --docs` (over 30 s on this loaded machine: too long for a test)
CANCEL_AT = 250


def test_a_big_folder_reports_progress_per_file_and_a_cancel_keeps_what_was_indexed(tmp_path):
    root = write_notes_folder(tmp_path / "notes", FILES)
    cancel = threading.Event()
    events: list[FileProgress] = []

    def on_file(event: FileProgress) -> None:
        events.append(event)
        if event.status != "reading" and event.done == CANCEL_AT:
            cancel.set()  # as the window's Cancel does, from another thread, between two files

    with DocumentStore(tmp_path / "documents.sqlite3") as store:
        report = index_paths(store, "many", [root], cancel=cancel, on_file=on_file)
        assert report.cancelled and report.added == CANCEL_AT and report.failed == 0
        finished = [e for e in events if e.status != "reading"]
        assert [e.done for e in finished] == list(range(1, CANCEL_AT + 1))  # one event per file, in order
        assert {e.total for e in events} == {FILES} and {e.status for e in finished} == {"added"}
        reading = [e for e in events if e.status == "reading"]
        assert [e.done for e in reading] == list(range(CANCEL_AT))  # the file being read, before its outcome
        assert reading[0].path.endswith("note00000.txt")
        [info] = store.collections()
        assert (info.files, info.passages) == (CANCEL_AT, CANCEL_AT)
        assert search(store, f"w{CANCEL_AT - 1:05d}", ["many"]).hits  # the last file before the cancel is searchable
        assert not search(store, f"w{CANCEL_AT:05d}", ["many"]).hits

        events.clear()
        again = index_paths(store, "many", [root], on_file=events.append)
        assert not again.cancelled
        assert (again.unchanged, again.added, again.removed) == (CANCEL_AT, FILES - CANCEL_AT, 0)
        assert len([e for e in events if e.status != "reading"]) == FILES
        assert store.collections()[0].files == FILES
        assert search(store, f"w{FILES - 1:05d}", ["many"]).hits[0].path.endswith(f"note{FILES - 1:05d}.txt")


def test_a_collection_remembers_what_was_added_and_lists_read_only(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha", encoding="utf-8")
    single = tmp_path / "single.md"
    single.write_text("# One\n\nbeta", encoding="utf-8")
    path = tmp_path / "documents.sqlite3"
    with DocumentStore(path) as store:
        index_paths(store, "mine", [folder])
        index_paths(store, "mine", [single])
        assert store.sources("mine") == sorted([str(folder.absolute()), str(single.absolute())])
        (folder / "b.txt").write_text("gamma", encoding="utf-8")  # new in a remembered folder
        report = index_paths(store, "mine", [Path(p) for p in store.sources("mine")])
        assert (report.added, report.unchanged) == (1, 2)
        with DocumentStore(path, read_only=True) as reader:  # beside the writer, as the window lists
            assert [(i.name, i.files) for i in reader.collections()] == [("mine", 3)]
        store.remove_collection("mine")
        assert store.collections() == []
