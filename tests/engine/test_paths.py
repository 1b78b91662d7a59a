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
import sys
from pathlib import Path
from typing import Iterator

import pytest

from engine import paths

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
