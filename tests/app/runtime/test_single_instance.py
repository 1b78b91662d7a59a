"""One instance per data folder: a real QLocalServer here, real ``python -m app`` processes as later starts.

A second start on the same ``MIAOHUI_HOME`` asks the first to show its window and exits 0 without
opening the history; a crashed owner's lock and socket file do not block the next start; another data
folder is another instance; scripted runs are never blocked by a running window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QDir

from app.runtime.single_instance import LOCK_NAME, SingleInstance, server_name

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


@pytest.fixture
def guard(qapp, home):
    instance = SingleInstance(home)
    yield instance
    instance.release()


def _start_app(home: Path, tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MIAOHUI_HOME": str(home),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}  # the user's real settings stay untouched
    return subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait(qtbot, process: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    """Keep this process's event loop running (it answers the activation) until ``process`` ends."""
    try:
        qtbot.waitUntil(lambda: process.poll() is not None, timeout=int(timeout_s * 1000))
    finally:
        if process.poll() is None:  # before the fix it opened a second window and never ended
            process.kill()
    return process.communicate(timeout=30)


def test_a_second_start_on_the_same_data_folder_raises_the_first_window_and_exits_0(qtbot, guard, home, tmp_path):
    assert guard.acquire()
    activations: list[bool] = []
    guard.activation_requested.connect(lambda: activations.append(True))
    started = time.monotonic()
    second = _start_app(home, tmp_path)
    out, err = _wait(qtbot, second, timeout_s=60)
    assert second.returncode == 0, err[-2000:]
    assert time.monotonic() - started < 30  # an interpreter start, a connect and an answer: no window, no model
    (line,) = out.strip().splitlines()
    assert line.startswith("miaohui: Miaohui is already running") and str(home) in line
    assert activations == [True]
    assert "Traceback" not in err
    assert not (home / "history.sqlite3").exists()  # it never opened the history the first one owns


def test_a_crashed_instances_lock_and_socket_do_not_block_the_next_start(qtbot, qapp, home):
    crash = ("import os, sys\n"
             "from PySide6.QtCore import QCoreApplication\n"
             "from app.runtime.single_instance import SingleInstance\n"
             "app = QCoreApplication([])\n"
             "guard = SingleInstance(sys.argv[1])\n"
             "assert guard.acquire()\n"
             "os._exit(0)  # no release: the lock file and the socket file stay behind\n")
    subprocess.run([sys.executable, "-c", crash, str(home)], cwd=ROOT, check=True, timeout=60,
                   env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert (home / LOCK_NAME).exists()
    if sys.platform != "win32":  # a Unix socket file; Windows pipes vanish with their process
        assert Path(QDir.tempPath(), server_name(home)).exists()
    guard = SingleInstance(home)
    try:
        assert guard.acquire()
        assert guard._server is not None and guard._server.isListening()
    finally:
        guard.release()


def test_another_data_folder_is_another_instance(qapp, guard, tmp_path):
    assert guard.acquire()
    other = SingleInstance(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    try:
        assert other.acquire()
    finally:
        other.release()
    assert server_name(tmp_path / "elsewhere") != guard.name
    assert not SingleInstance(guard.data_dir).acquire()  # while the same folder is still held


def test_a_running_window_does_not_block_a_self_test(qtbot, guard, home, tmp_path):
    assert guard.acquire()
    run = _start_app(home, tmp_path, "--self-test", "--model", str(tmp_path / "nowhere"), "--timeout", "60")
    out, err = _wait(qtbot, run, timeout_s=90)
    report = json.loads(out[out.index("{"):])
    assert run.returncode == 1 and "nowhere" in report["error"]  # it ran (and failed on the model), not refused



def test_the_server_name_is_valid_as_a_windows_pipe_and_a_unix_socket_name(tmp_path):
    """Qt makes it \\\\.\\pipe\\NAME on Windows (no backslash allowed) and a socket file in the temp folder on Unix
    (paths of at most ~104 bytes): short, lower-case letters, digits and dashes, whatever the folder's name."""
    import re

    for folder in (tmp_path / "数据 folder", tmp_path / ("x" * 200), Path("C:/Users/用户/AppData/Local/miaohui")):
        name = server_name(folder)
        assert re.fullmatch(r"miaohui-[0-9a-f]{20}", name), name
