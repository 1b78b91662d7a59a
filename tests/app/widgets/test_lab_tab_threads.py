"""The window's lab runs with the CLI's torch threads (issue 30: "the window's lab runs as fast as the CLI's (same
threads)"): after a reply in the real window (whose decode lowers and restores the thread count), a task on the
worker thread — where the Lab tab's experiments run — reads the same intra-op and inter-op counts as the main
thread, and as `engine lab` records for its run in results.json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.lab.threads import thread_counts
from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, send_and_wait, settings, store  # noqa: F401

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints")]


def test_the_lab_runs_with_the_threads_the_cli_runs_with(qtbot, make_window, tiny_model_dir, tmp_path):  # noqa: F811
    window = make_window(max_new_tokens=12)
    assert send_and_wait(qtbot, window, "Hello") in ("length", "eos")
    with qtbot.waitSignal(window.bridge.task_finished, timeout=REPLY_TIMEOUT_MS,
                          check_params_cb=lambda _id, result: isinstance(result, dict)) as blocker:
        window.bridge.submit_task(lambda _loaded, _cancel: thread_counts())
    in_window = blocker.args[1]
    out = tmp_path / "lab"
    done = subprocess.run([sys.executable, "-m", "engine", "lab", "--only", "greedy20", "--quick", "--out", str(out),
                           "--model", str(tiny_model_dir), "--precision", "fp32", "--device", "cpu"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    machine = json.loads((out / "results.json").read_text(encoding="utf-8"))["machine"]
    cli = {"intra_op": machine["torch_threads"], "inter_op": machine["torch_interop_threads"]}
    assert in_window == cli == thread_counts()
