"""engine.paths: a data folder that cannot be used is one line everywhere (issue 18, defect 7).

``MIAOHUI_HOME`` pointing at a file, ``models`` being a file, a read-only data folder: every CLI
command answers with one ``error:`` line naming the folder and what to change, exit 2, no traceback.
Real subprocesses; the read-only folder is a read-only bind mount when running as root (root ignores
file modes), ``chmod 555`` otherwise.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import stat
import sys
from pathlib import Path
from typing import Iterator

import pytest

from engine import paths
from engine.paths import replace_file, replace_text

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "chat": ["chat", "--prompt", "hello"],
    "info": ["info"],
    "fetch": ["fetch", "--wheel", "never-read.whl"],
    "lab": ["lab", "--out", "{tmp}/lab", "--quick"],
    "bench": ["bench"],
}


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder`` cannot be written while the block runs, by this process or its children."""
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(mode)
        return
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot make a read-only folder as root here: {mounted.stderr.strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remount.stderr.strip()}")
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def _bad_home(tmp_path: Path, state: str) -> tuple[Path, str]:
    """(MIAOHUI_HOME, what the one line must say) for each broken state."""
    if state == "home-is-a-file":
        home = tmp_path / "home"
        home.write_text("not a folder")
        return home, f"the data folder {home} is a file, not a folder"
    if state == "models-is-a-file":
        home = tmp_path / "home"
        home.mkdir()
        (home / "models").write_text("not a folder")
        return home, f"the models folder {home / 'models'} is a file, not a folder"
    home = tmp_path / "home"  # read-only, empty: the models folder cannot be made
    home.mkdir()
    return home, f"cannot create the models folder {home / 'models'}"


@pytest.mark.parametrize("state", ["home-is-a-file", "models-is-a-file", "read-only-home"])
def test_every_cli_command_answers_a_bad_data_folder_with_one_line(tmp_path, state):
    home, expected = _bad_home(tmp_path, state)
    env = {**os.environ, "MIAOHUI_HOME": str(home)}
    guard = read_only(home) if state == "read-only-home" else contextlib.nullcontext()
    with guard:
        results = {name: subprocess.run([sys.executable, "-m", "engine",
                                         *[a.format(tmp=tmp_path) for a in argv]], cwd=ROOT, env=env,
                                        capture_output=True, text=True, timeout=300)
                   for name, argv in COMMANDS.items()}
    for name, result in results.items():
        assert result.returncode == 2, (name, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, (name, result.stderr[-2000:])
        lines = result.stderr.strip().splitlines()
        errors = [line for line in lines if line.startswith("error:")]
        assert len(errors) == 1 and errors[0] == lines[-1], (name, lines)
        assert errors[0].startswith(f"error: {expected}"), (name, errors[0])
        if name != "bench":  # bench alone prints its progress ("[bench] loading default") before the error
            assert len(lines) == 1, (name, lines)


def test_data_dir_errors_are_typed_one_line_and_create_nothing(tmp_path, monkeypatch):
    from engine.errors import DataDirError

    home = tmp_path / "home"
    home.write_text("x")
    monkeypatch.setenv("MIAOHUI_HOME", str(home))
    for make in (paths.data_dir, paths.models_dir, paths.logs_dir, paths.default_model_dir):
        with pytest.raises(DataDirError, match="is a file, not a folder: move the file away or set MIAOHUI_HOME"):
            make()
    assert paths.history_path() == home / "history.sqlite3"  # a path only: the store decides what to do
    assert home.read_text() == "x"
    newline = tmp_path / "new\nline"
    newline.write_text("x")
    monkeypatch.setenv("MIAOHUI_HOME", str(newline))
    with pytest.raises(DataDirError) as info:
        paths.data_dir()
    assert "\n" not in str(info.value) and "new\\nline" in str(info.value)

# ---------------------------------------------------------------- replacing a file whole or not at all (issue 31, defect 10)
# Through a temporary file beside it, fsynced and renamed over it: a write that fails part-way leaves the previous
# file byte-identical and no temporary file behind.


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


# ---------------------------------------------------------------- one override for a run's own files (scripted runs)

def test_keep_state_in_moves_the_runs_own_files_and_leaves_the_models_where_they_are(home, tmp_path):
    from engine.bench import roofline

    scratch = tmp_path / "scratch"
    assert paths.state_root() == home and paths.history_path() == home / "history.sqlite3"
    paths.keep_state_in(scratch)
    try:
        assert paths.state_root() == scratch and paths.history_path() == scratch / "history.sqlite3"
        assert roofline._bandwidth_path() == scratch / roofline.BANDWIDTH_FILE
        assert paths.state_dir() == scratch and scratch.is_dir()  # created on demand, as the data folder is
        assert paths.models_dir() == home / "models"  # a scripted run still loads the user's models
    finally:
        paths.keep_state_in(None)
    assert paths.state_root() == home
