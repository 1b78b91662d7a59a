"""History faults (docs/FAULTS.md, faults 11-13): kill -9 mid-write, corrupt file, malformed rows, old and new schemas.

Every case runs on a real SQLite file; the killed writer is a real separate process.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.history.notices import NoticeKind
from app.history.perf import PerfRecord
from app.history.schema import SCHEMA_VERSION
from app.history.store import HistoryStore, ReadOnlyStoreError

ROOT = Path(__file__).resolve().parents[3]


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:  # damage bad enough that the check itself cannot run
        return str(exc)
    finally:
        conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_fault_11_kill_9_during_writes_keeps_every_committed_message(tmp_path):
    path = tmp_path / "history.sqlite3"
    writer = subprocess.Popen([sys.executable, "-m", "tests.helpers.store_writer", str(path)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        while len(lines) < 150:
            line = writer.stdout.readline()
            assert line, f"writer died early: {writer.stderr.read()[-2000:]}"
            lines.append(line.split())
        os.kill(writer.pid, signal.SIGKILL)  # while it keeps writing: lands mid-transaction more often than not
        rest, _ = writer.communicate(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == -signal.SIGKILL
    lines += [ln.split() for ln in rest.splitlines() if ln.strip()]
    assert _integrity(path) == "ok"
    with HistoryStore(path) as store:
        assert store.notices == []
        (conv,) = store.list_conversations()
        by_id = {m.id: m for m in store.messages(conv.id)}
    added = {int(parts[1]) for parts in lines if parts[0] == "m"}
    assert added <= set(by_id)
    # A streaming save that reported its commit is there in full (or a later, longer save replaced it).
    for parts in lines:
        if parts[0] == "u":
            assert len(by_id[int(parts[1])].text) >= int(parts[2])
        if parts[0] == "f":
            assert by_id[int(parts[1])].finish_reason == "eos" and by_id[int(parts[1])].perf is not None


def _populated(path: Path, conversations: int = 3, per: int = 100) -> dict[int, str]:
    texts = {}
    with HistoryStore(path) as store:
        for c in range(conversations):
            cid = store.create_conversation(f"chat {c}")
            for i in range(per):
                text = f"c{c} m{i} " + "字" * 100 + "x" * 150
                role = ("user", "assistant")[i % 2]
                perf = PerfRecord(model="m", decode_tok_s=float(i)) if role == "assistant" else None
                texts[store.add_message(cid, role, text, "eos" if perf else None, perf)] = text
    return texts  # closing the last connection checkpoints the WAL into the main file


def _all_messages(store: HistoryStore) -> dict[int, str]:
    return {m.id: m.text for conv in store.list_conversations() for m in store.messages(conv.id)}


def test_fault_12_pages_overwritten_with_garbage_are_quarantined_and_the_rest_salvaged(tmp_path):
    path = tmp_path / "history.sqlite3"
    original = _populated(path)
    page = 4096
    pages = path.stat().st_size // page
    assert pages > 40
    damaged = bytearray(path.read_bytes())
    rng = random.Random(12)
    middle = pages // 2
    damaged[middle * page:(middle + 3) * page] = rng.randbytes(3 * page)
    path.write_bytes(bytes(damaged))
    assert _integrity(path) != "ok"

    with HistoryStore(path) as store:
        notice = " ".join(store.notices)
        (quarantine,) = tmp_path.glob("history.corrupt-*.sqlite3")
        assert "damaged" in notice and str(quarantine) in notice
        assert quarantine.read_bytes() == bytes(damaged)
        recovered = _all_messages(store)
        # What survived is exact, most of it survived, and rows stored after the damage were reached too.
        assert all(original[mid] == text for mid, text in recovered.items())
        assert len(original) - 3 * page // 250 <= len(recovered) < len(original)
        assert max(recovered) == max(original)
        assert f"{len(recovered)} messages" in notice
        assert any(m.perf is not None for conv in store.list_conversations() for m in store.messages(conv.id))
        store.add_message(store.create_conversation(), "user", "the store still works")
    assert _integrity(path) == "ok"
    with HistoryStore(path) as again:
        assert again.notices == []


def test_fault_12_random_bytes_file_is_quarantined_and_a_fresh_history_starts(tmp_path):
    path = tmp_path / "history.sqlite3"
    junk = random.Random(7).randbytes(64 * 1024)
    path.write_bytes(junk)
    with HistoryStore(path) as store:
        (quarantine,) = tmp_path.glob("history.corrupt-*.sqlite3")
        assert quarantine.read_bytes() == junk
        assert "damaged" in store.notices[0] and "Recovered 0 conversations and 0 messages" in store.notices[0]
        assert store.notices[0].kind is NoticeKind.SALVAGED
        assert store.notices[0].values["problem"].kind is NoticeKind.NOT_A_DATABASE
        assert store.list_conversations() == []
        cid = store.create_conversation()
        store.add_message(cid, "user", "hello again")
    assert _integrity(path) == "ok"


def test_fault_12_malformed_rows_are_skipped_or_repaired_with_a_notice(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid = store.create_conversation("fine", settings={"a": 1})
        good = store.add_message(cid, "user", "good row")
        bad_perf = store.add_message(cid, "assistant", "bad perf", "eos", PerfRecord(model="m"))
        broken = store.create_conversation("broken settings")
    raw = sqlite3.connect(path)
    raw.execute("UPDATE perf SET record = '{not json' WHERE message_id = ?", (bad_perf,))
    raw.execute("UPDATE conversations SET settings = 'nope', created = 'garbage' WHERE id = ?", (broken,))
    rows = [(cid, "user", "CAST(X'48C328FF21' AS TEXT)", 1.0, None),   # not UTF-8
            (cid, "robot", "'unknown role'", 2.0, None),                  # cannot be shown
            (cid, "assistant", "X'00FF'", 3.0, None),                     # a blob where text belongs
            (cid, "assistant", "'bad time and reason'", "'yesterday'", "'exploded'")]
    for conv, role, text, created, finish in rows:
        raw.execute(f"INSERT INTO messages(conversation_id, role, text, created, finish_reason) "
                    f"VALUES (?, ?, {text}, {created}, {finish if finish else 'NULL'})", (conv, role))
    raw.commit()
    raw.close()

    with HistoryStore(path) as store:
        notices = " ".join(store.notices)
        assert "1 damaged messages cannot be shown" in notices and "repaired" in notices
        messages = store.messages(cid)
        by_text = {m.text: m for m in messages}
        assert [m.id for m in messages][:2] == [good, bad_perf]
        assert by_text["bad perf"].perf is None and by_text["bad perf"].finish_reason == "eos"
        assert "H\ufffd(\ufffd!" in by_text
        assert "\x00\ufffd" in by_text
        assert by_text["bad time and reason"].finish_reason is None
        assert "unknown role" not in by_text and len(messages) == 5
        assert store.get_conversation(broken).settings == {}
        # Repairs are for display: the stored bytes are left as found, nothing is destroyed.
        assert store._conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 6


V1_SCHEMA = """
CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT, created REAL, updated REAL,
                            system_prompt TEXT DEFAULT '');
CREATE TABLE messages (id INTEGER PRIMARY KEY,
                       conversation_id INTEGER REFERENCES conversations(id) ON DELETE CASCADE,
                       role TEXT, text TEXT, created REAL);
PRAGMA user_version = 1;
"""


def test_fault_13_older_schema_is_backed_up_then_migrated_keeping_every_row(tmp_path):
    path = tmp_path / "history.sqlite3"
    raw = sqlite3.connect(path)
    raw.executescript(V1_SCHEMA)
    raw.executemany("INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
                    [(1, "旧的对话", 10.0, 20.0, "Be brief."), (2, "second", 30.0, 40.0, "")])
    v1_rows = [(i, 1 + i % 2, ("user", "assistant")[i % 2], f"old message {i} 你好", float(i)) for i in range(1, 41)]
    raw.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)", v1_rows)
    raw.commit()
    raw.close()

    with HistoryStore(path) as store:
        (backup,) = tmp_path.glob("history.v1-backup-*.sqlite3")
        assert any("upgraded from schema v1" in n and str(backup) in n for n in store.notices)
        assert [(c.id, c.title, c.system_prompt, c.settings) for c in store.list_conversations()] == [
            (2, "second", "", {}), (1, "旧的对话", "Be brief.", {})]
        got = [(m.id, m.conversation_id, m.role, m.text, m.created)
               for cid in (1, 2) for m in store.messages(cid)]
        assert sorted(got) == v1_rows
        mid = store.add_message(1, "assistant", "new", "eos", PerfRecord(model="m", decode_tok_s=1.0))
        assert store.messages(1)[-1].perf.decode_tok_s == 1.0 and mid == 41
        store.delete_conversation(1)
        assert store._conn.execute("SELECT count(*) FROM perf").fetchone()[0] == 0
    old = sqlite3.connect(backup)
    assert old.execute("PRAGMA user_version").fetchone()[0] == 1
    assert old.execute("SELECT count(*) FROM messages").fetchone()[0] == 40
    old.close()
    new = sqlite3.connect(path)
    assert new.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    new.close()


def test_fault_12_null_text_in_an_old_file_is_skipped_not_fatal(tmp_path):
    path = tmp_path / "history.sqlite3"
    raw = sqlite3.connect(path)
    raw.executescript(V1_SCHEMA)
    raw.execute("INSERT INTO conversations VALUES (1, NULL, NULL, NULL, NULL)")
    raw.executemany("INSERT INTO messages VALUES (?, 1, ?, ?, 1.0)",
                    [(1, "user", "kept"), (2, "assistant", None), (3, None, "no role")])
    raw.commit()
    raw.close()
    with HistoryStore(path) as store:
        assert any("2 damaged messages cannot be shown (ids 2, 3)" in n for n in store.notices)
        (conv,) = store.list_conversations()
        assert conv.title == "Chat 1" and conv.system_prompt == ""
        assert [m.text for m in store.messages(1)] == ["kept"]


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_fault_13_newer_schema_is_opened_read_only_and_never_written(tmp_path, journal):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        cid = store.create_conversation("from the future")
        store.add_message(cid, "user", "hello")
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA journal_mode = {journal}")
    raw.execute("ALTER TABLE messages ADD COLUMN attachments TEXT")
    raw.execute("CREATE TABLE tags (name TEXT)")
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    before, names = _digest(path), sorted(p.name for p in tmp_path.iterdir())

    store = HistoryStore(path)
    assert store.read_only
    assert "newer Miaohui" in store.notices[0] and "read-only" in store.notices[0]
    assert [c.title for c in store.list_conversations()] == ["from the future"]
    assert [m.text for m in store.messages(cid)] == ["hello"]
    for write in (lambda: store.create_conversation(), lambda: store.add_message(cid, "user", "x"),
                  lambda: store.rename_conversation(cid, "x"), lambda: store.delete_conversation(cid)):
        with pytest.raises(ReadOnlyStoreError, match="newer Miaohui"):
            write()
    store.close()
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_an_unopenable_location_still_gives_a_working_store_in_memory(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the data folder should be")
    with HistoryStore(blocker / "history.sqlite3") as store:
        assert not store.read_only
        assert "cannot be opened" in store.notices[0] and "in memory only" in store.notices[0]
        # said by its kind, the reason too, so the window words it in its own language
        assert store.notices[0].kind is NoticeKind.IN_MEMORY
        assert store.notices[0].values["reason"].kind is NoticeKind.NOT_A_FOLDER
        cid = store.create_conversation()
        store.add_message(cid, "user", "still works")
        assert [m.text for m in store.messages(cid)] == ["still works"]
    assert blocker.read_text() == "a file where the data folder should be"


# ---------------------------------------------------------------- two instances on one data folder

_OPEN_AND_SAVE = """
import json, sys, time
from app.history.store import HistoryStore
path, start, n = sys.argv[1], float(sys.argv[2]), sys.argv[3]
while time.time() < start:  # every process opens the fresh file at the same moment
    pass
store = HistoryStore(path)
try:
    cid = store.create_conversation(title="process " + n)
    store.add_message(cid, "user", "saved by process " + n)
    saved = True
except Exception as exc:
    saved = str(exc)
print(json.dumps({"read_only": store.read_only, "notices": store.notices, "saved": saved}))
store.close()
"""


def test_processes_opening_a_new_history_at_once_can_all_save(tmp_path):
    """Each used to create the schema: the losers opened read-only ("table conversations already exists")
    or in memory ("database is locked"), or took the half-made file for a damaged one."""
    import json
    import time

    processes = 6
    for attempt in range(3):  # the race is timing-dependent: three fresh folders, each must be clean
        path = tmp_path / f"try{attempt}" / "history.sqlite3"
        start = time.time() + 2.0  # after every interpreter has started
        runs = [subprocess.Popen([sys.executable, "-c", _OPEN_AND_SAVE, str(path), str(start), str(i)], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(processes)]
        reports = []
        for run in runs:
            out, err = run.communicate(timeout=60)
            assert run.returncode == 0, err[-2000:]
            reports.append(json.loads(out))
        assert all(r == {"read_only": False, "notices": [], "saved": True} for r in reports), reports
        with HistoryStore(path) as store:
            assert store.notices == [] and not store.read_only
            assert sorted(c.title for c in store.list_conversations()) == [f"process {i}" for i in range(processes)]
        assert sorted(p.name for p in path.parent.iterdir() if "corrupt" in p.name or "backup" in p.name) == []
