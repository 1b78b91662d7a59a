"""Entry points: --version, --screenshot (in process, tiny model), --self-test (subprocess, default model),
and the excepthook that turns a bug into a message instead of a silent death."""

from __future__ import annotations

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


def test_screenshot_run_in_process(qapp, home, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "shot.png"
    code = main(["--screenshot", str(out), "--model", str(tiny_model_dir), "--precision", "fp32",
                 "--max-new-tokens", "8", "--prompt", "用三句话介绍一下 KV cache", "--timeout", "120"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["ok"] and report["screenshot"] == str(out) and all(report["checks"].values())
    assert report["generated_tokens"] == 8 and report["panel"]["kv"] != "—"
    image = QImage(str(out))
    assert image.width() >= 1200 and image.height() >= 800
    assert not (home / "history.sqlite3").exists()  # scripted runs never write the user's history


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