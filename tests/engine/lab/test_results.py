"""Writing a user's file (issue 31, defect 10): through a temporary file beside it, fsynced and renamed over it, so
a write that fails part-way leaves the previous file byte-identical and no temporary file behind."""

from __future__ import annotations

import os
import stat

import pytest

from engine.lab.results import ExperimentResult, replace_file, replace_text, write_csv, write_json


class _DiskFull(OSError):
    pass


def _fails_after(data: bytes, n: int):
    """A writer that writes ``n`` bytes of ``data`` into the real file object, then fails as a full disk does."""
    def write(fh) -> None:
        fh.write(data[:n])
        fh.flush()
        raise _DiskFull(28, "No space left on device")
    return write


def test_a_write_failing_part_way_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "export.md"
    target.write_bytes(b"yesterday's export\n" * 50)
    before = target.read_bytes()
    with pytest.raises(_DiskFull):
        replace_file(target, _fails_after(b"today " * 1000, 700))
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.md"]


def test_a_finished_write_replaces_the_file_and_keeps_its_permissions(tmp_path):
    target = tmp_path / "export.json"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    assert replace_text(target, "新的 export\n") == target
    assert target.read_text(encoding="utf-8") == "新的 export\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    fresh = tmp_path / "fresh.txt"
    replace_text(fresh, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask  # as open() would have made it, not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.json", "fresh.txt"]


def test_an_interrupted_write_cleans_up_too(tmp_path):
    target = tmp_path / "r.csv"
    target.write_text("a,b\r\n", encoding="utf-8")

    def interrupted(fh) -> None:
        fh.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replace_file(target, interrupted)
    assert target.read_bytes() == b"a,b\r\n" and len(list(tmp_path.iterdir())) == 1


def test_lab_results_go_through_the_same_replacement(tmp_path):
    result = ExperimentResult(key="demo", title="Demo", columns=("name", "value"), rows=(("=cmd", 1.5),))
    path = write_csv(result, tmp_path / "out" / "demo.csv")
    assert path.read_bytes().startswith("\ufeff".encode("utf-8")) and "'=cmd" in path.read_text(encoding="utf-8-sig")
    json_path = write_json({"nan": float("nan")}, tmp_path / "out" / "results.json")
    assert json_path.read_text(encoding="utf-8").replace(" ", "").replace("\n", "") == '{"nan":null}'
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["demo.csv", "results.json"]
