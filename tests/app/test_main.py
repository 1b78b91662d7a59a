"""Entry points: --version, --screenshot (in process, tiny model), --self-test (subprocess, default model),
and the excepthook that turns a bug into a message instead of a silent death."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from app import __version__
from app.main import install_excepthook, main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"miaohui {__version__}"


def test_screenshot_run_in_process(qapp, home, tiny_model_dir, tmp_path, capsys, monkeypatch):
    import gc

    from pyqtgraph.util import garbage_collector

    out = tmp_path / "shot.png"
    collectors: list[object] = []
    real = garbage_collector.GarbageCollector

    def spy(*args, **kwargs):
        collectors.append(real(*args, **kwargs))
        collectors.append(gc.isenabled())  # what the window runs with
        return collectors[0]

    monkeypatch.setattr(garbage_collector, "GarbageCollector", spy)
    code = main(["--screenshot", str(out), "--model", str(tiny_model_dir), "--precision", "fp32",
                 "--max-new-tokens", "8", "--prompt", "用三句话介绍一下 KV cache", "--timeout", "120",
                 "--size", "1280x800"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["ok"] and report["screenshot"] == str(out) and all(report["checks"].values())
    assert report["generated_tokens"] == 8 and report["panel"]["kv"] != "—"
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1280, 800)
    assert not (home / "history.sqlite3").exists()  # scripted runs never write the user's history
    assert not (home / "kv").exists() and not (home / "bandwidth.json").exists()  # nor its KV caches, measurements
    from engine import paths

    assert paths.state_root() == home  # the run's scratch folder was given back
    # The window ran with collection on a GUI-thread timer only; main() gave the usual collector back.
    assert collectors[1] is False and gc.isenabled()


def test_a_bad_window_size_is_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--screenshot", "out.png", "--size", "big"])
    assert exited.value.code == 2 and "'big' is not a size like 1280x800" in capsys.readouterr().err


def test_bad_model_makes_the_self_test_fail_with_one_line(qapp, home, tmp_path, capsys):
    code = main(["--self-test", "--model", str(tmp_path / "nowhere"), "--timeout", "60"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and not report["ok"] and "nowhere" in report["error"] and "\n" not in report["error"]


def test_excepthook_turns_a_bug_into_a_dialog(qapp, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    install_excepthook(tmp_path / "miaohui.log", interactive=True)
    shown: list[str] = []

    def close_dialog() -> None:
        dialog = QApplication.activeModalWidget()
        shown.append(dialog.text() if dialog is not None else "")
        if dialog is not None:
            dialog.done(0)

    QTimer.singleShot(200, close_dialog)
    try:
        raise ValueError("something broke\nwith a second line")
    except ValueError:
        sys.excepthook(*sys.exc_info())
    assert shown and "ValueError: something broke" in shown[0] and "second line" not in shown[0]
    assert "Traceback" not in shown[0] and str(tmp_path / "miaohui.log") in shown[0]


@pytest.mark.default_model
def test_self_test_with_the_default_model(default_model_dir, tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MIAOHUI_HOME": str(default_model_dir.parents[1])}
    result = subprocess.run([sys.executable, "-m", "app", "--self-test", "--max-new-tokens", "16", "--timeout", "240"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["ok"] and report["model"] == "SmolLM2-135M-Instruct" and all(report["checks"].values())
    assert report["decode_tok_s"] > 0 and report["kv_cache_bytes"] > 0
    if report["device"] == "cpu" and report["precision"] in ("int4", "int8"):
        assert report["decode_step"] == "native"
    assert "QThread: Destroyed" not in result.stderr and "Traceback" not in result.stderr


def test_installed_pyside_keeps_references_to_none():
    """PySide6 6.12.0 on Python 3.11 dropped a reference to None per void Qt call and long sessions
    died with "none_dealloc"; pyproject.toml excludes it. Guard the pin in a clean interpreter."""
    code = ("import sys\n"
            "from PySide6.QtGui import QTextDocument\n"
            "from PySide6.QtWidgets import QApplication\n"
            "app = QApplication([])\n"
            "document = QTextDocument()\n"
            "before = sys.getrefcount(None)\n"
            "for _ in range(50_000):\n"
            "    document.clear()\n"
            "print(sys.getrefcount(None) - before)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.returncode == 0, result.stderr[-1000:]
    assert abs(int(result.stdout.strip().splitlines()[-1])) < 100

# A window closed while the engine is stuck in something that never sees its cancel (a long C call): the
# worker here is a load that sleeps for two minutes. SHUTDOWN_WAIT_MS is cut to 300 ms so the bounded join
# gives up at once. Before the fix, the second ``shutdown()`` (from main's ``finally``) claimed success,
# main returned normally and Python destroyed the running QThread: SIGABRT.
_STUCK_ENGINE_RUN = """
import sys, threading, time
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import app.window.mainwindow, engine.models.loader
from app.main import main
from app.window.mainwindow import MainWindow

app.window.mainwindow.SHUTDOWN_WAIT_MS = 300
stuck = threading.Event()

def load_model(*_args, **_kwargs):  # never polls its cancel flag, like a forward stuck in a C call
    stuck.set()
    time.sleep(120)

engine.models.loader.load_model = load_model
qapp = QApplication(sys.argv[:1])  # before the QTimer: main() reuses it
done = []

def drive():
    window = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()), None)
    if window is None or not stuck.is_set() or done:
        return
    done.append(True)
    cid = window.store.create_conversation(title="kept")
    window.store.add_message(cid, "user", "written before the close")
    window.close()

poll = QTimer()
poll.timeout.connect(drive)
poll.start(20)
sys.exit(main(["--model", "anything", "--device", "cpu"]))
"""


def test_closing_while_the_engine_is_stuck_exits_0_without_aborting_and_closes_history(tmp_path):
    from app.history.store import HistoryStore

    home = tmp_path / "home"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MIAOHUI_HOME": str(home),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}  # the user's real settings stay untouched
    result = subprocess.run([sys.executable, "-c", _STUCK_ENGINE_RUN], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Destroyed while thread" not in result.stderr and "Traceback" not in result.stderr
    history = home / "history.sqlite3"
    assert not Path(str(history) + "-wal").exists()  # the store was closed (its WAL checkpointed) before exit
    with HistoryStore(history) as store:
        (conversation,) = store.list_conversations()
        assert conversation.title == "kept"
        assert [m.text for m in store.messages(conversation.id)] == ["written before the close"]


# --------------------------------------------------------- issue 18: scripted runs, unusable data folders

def _user_env(tmp_path: Path) -> dict[str, str]:
    """A user of our own: HOME, XDG_CONFIG_HOME (where Settings() writes on Linux) and MIAOHUI_HOME."""
    return {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path / "user"),
            "XDG_CONFIG_HOME": str(tmp_path / "user" / ".config"), "MIAOHUI_HOME": str(tmp_path / "user" / "data")}


_WRITE_USER_SETTINGS = """
from PySide6.QtCore import QByteArray
from app.state.settings import ChatSettings, Settings
settings = Settings()  # the user's own store, as the app opens it
settings.set_chat(ChatSettings(system_prompt="Mine.", temperature=1.3, top_k=7, max_new_tokens=999, seed=4242))
settings.set_model_choice("/my/model", "bf16", "cpu")
settings.add_recent_model("/my/model")
settings.set_window_state(QByteArray(b"geometry"), QByteArray(b"state"))
settings.set_last_conversation(1)
print(settings._q.fileName())
"""


def _tree(folder: Path) -> dict[str, str]:
    """Every folder and file under ``folder``, files with their sha256: equal trees are byte-identical."""
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("run", ["self-test", "screenshot"])
def test_scripted_runs_leave_every_user_file_byte_identical(tmp_path, tiny_model_dir, run):
    from app.history.store import HistoryStore

    env = _user_env(tmp_path)
    written = subprocess.run([sys.executable, "-c", _WRITE_USER_SETTINGS], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=60)
    assert written.returncode == 0, written.stderr[-2000:]
    settings_file = Path(written.stdout.strip().splitlines()[-1])
    assert settings_file.is_relative_to(tmp_path / "user" / ".config") and settings_file.is_file()
    data = Path(env["MIAOHUI_HOME"])
    (data / "logs").mkdir(parents=True)
    (data / "models").mkdir()
    (data / "logs" / "miaohui.log").write_text("an earlier session\n")
    with HistoryStore(data / "history.sqlite3") as history:
        history.add_message(history.create_conversation(title="mine"), "user", "keep me")
    # The app's settings folder and its data folder; matplotlib keeps its own cache under ~/.config.
    before = {"settings": _tree(settings_file.parent), "data": _tree(data)}
    args = ["--self-test"] if run == "self-test" else ["--screenshot", str(tmp_path / "shot.png")]
    result = subprocess.run([sys.executable, "-m", "app", *args, "--model", str(tiny_model_dir), "--precision",
                             "fp32", "--device", "cpu", "--max-new-tokens", "4", "--timeout", "120"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert json.loads(result.stdout[result.stdout.index("{"):])["ok"]
    after = {"settings": _tree(settings_file.parent), "data": _tree(data)}
    assert after == before


def test_self_test_with_the_data_folder_a_file_is_one_line_exit_2(tmp_path):
    env = _user_env(tmp_path)
    Path(env["MIAOHUI_HOME"]).parent.mkdir(parents=True)
    Path(env["MIAOHUI_HOME"]).write_text("not a folder")
    result = subprocess.run([sys.executable, "-m", "app", "--self-test", "--timeout", "60"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"miaohui: the data folder {env['MIAOHUI_HOME']} is a file, not a folder: move the file away or set "
        "MIAOHUI_HOME to a folder"]


_OPEN_AND_CLOSE = """
import json, sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.main import main
from app.window.mainwindow import MainWindow

qt_app = QApplication(sys.argv[:1])  # before the timer: main() uses this one
seen = {}

def look():
    window = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()), None)
    if window is None or seen or not window.messages.text():  # a notice, or the default model's failed load
        return
    cid = window.store.create_conversation(title="in memory")  # history still works this session
    window.store.add_message(cid, "user", "hello")
    seen.update(message=window.messages.text(), notices=window.store.notices,
                rows=len(window.store.messages(cid)))
    window.close()

poll = QTimer()
poll.timeout.connect(look)
poll.start(50)
code = main(["--model", "default", "--device", "cpu"])
print(json.dumps(seen))
sys.exit(code)
"""


@pytest.mark.parametrize("state", ["data-folder-is-a-file", "models-is-a-file", "read-only-data-folder"])
def test_the_window_opens_on_an_unusable_data_folder_with_history_in_memory(tmp_path, state):
    env = _user_env(tmp_path)
    data = Path(env["MIAOHUI_HOME"])
    data.parent.mkdir(parents=True)
    if state == "data-folder-is-a-file":
        data.write_text("not a folder")
    elif state == "models-is-a-file":
        data.mkdir()
        (data / "models").write_text("not a folder")
    else:
        data.mkdir()
    # Before the fix a file as the data folder raised at startup: the excepthook's modal dialog then waited
    # for a click forever, hence the timeout.
    from tests.engine.test_paths import read_only

    with read_only(data) if state == "read-only-data-folder" else contextlib.nullcontext():
        result = subprocess.run([sys.executable, "-c", _OPEN_AND_CLOSE], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["rows"] == 1
    # The startup notice, or the failed load of the default model after it: both name the problem.
    if state == "data-folder-is-a-file":
        assert any("kept in memory only" in notice for notice in seen["notices"])
        assert f"the data folder {data} is a file, not a folder" in seen["message"]
    elif state == "models-is-a-file":  # history is fine there; only the default model and fetching need it
        assert seen["notices"] == []
        assert f"the models folder {data / 'models'} is a file, not a folder" in seen["message"]
        assert (data / "models").is_file()  # nothing was moved or replaced
    else:
        assert any("kept in memory only" in notice for notice in seen["notices"])
        assert list(data.iterdir()) == []
