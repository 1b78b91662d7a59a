"""The lab through the window vs ``engine lab``, side by side in one run (issue 30: "the window's lab runs as fast as
the CLI's").

``python -m app.lab_bench`` runs one experiment (default: the quick KV cache on/off) alternately through the
window's path — the real ``Bridge``, its engine thread and the Lab tab's job (``app.widgets.lab_tab``), the
model loaded as the window loads it — and through ``python -m engine lab --only KEY`` in its own process, and prints
one JSON object: each run's seconds, the torch thread counts each side ran with (intra-op and inter-op, read on the
thread that runs the experiment), the medians and their ratio (window ÷ CLI; the goal is about 1). A noisy shared
machine drifts: alternating and medians keep the drift from favouring either side.

Owns only the orchestration and the arithmetic; the thread counts come from ``engine.lab.threads``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _window_run(key: str, quick: bool, spec: Any, timeout_s: float) -> dict[str, Any]:
    """One run through the real Bridge and the Lab tab's job; the model loaded as the window does."""
    from PySide6.QtCore import QEventLoop, QTimer

    from app.runtime.bridge import Bridge
    from app.widgets.lab_tab import _LabJob, _ProgressRelay
    from engine.lab import LabOptions
    from engine.lab.threads import thread_counts

    bridge = Bridge()
    outcome: dict[str, Any] = {}
    loop = QEventLoop()

    def done(_id: int, result: object) -> None:
        outcome.setdefault("results", []).append(result)
        loop.quit()

    def failed(_id: int, line: str) -> None:
        outcome["error"] = line
        loop.quit()

    bridge.model_loaded.connect(lambda _facts: loop.quit())
    bridge.load_failed.connect(lambda failure: (outcome.update(error=str(failure)), loop.quit()))
    bridge.task_finished.connect(done)
    bridge.task_failed.connect(failed)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    bridge.load(spec)
    loop.exec()
    if "error" in outcome:
        raise SystemExit(f"lab_bench: the window could not load the model: {outcome['error']}")
    bridge.submit_task(lambda _loaded, _cancel: thread_counts())
    loop.exec()
    relay = _ProgressRelay()
    t0 = time.perf_counter()
    bridge.submit_task(_LabJob(key, LabOptions(quick=quick), relay))
    loop.exec()
    seconds = time.perf_counter() - t0
    bridge.shutdown()
    if "error" in outcome:
        raise SystemExit(f"lab_bench: the window's run failed: {outcome['error']}")
    threads, result = outcome["results"]
    return {"seconds": round(seconds, 2), "threads": threads, "summary": getattr(result, "summary", {})}


def _last_progress(stderr: bytes | str | None) -> str:
    """The child's last progress line (``[  59.1 s   5.0%] KV cache on: …``), or "none"."""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else (stderr or "")
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip().startswith("[")]
    return lines[-1] if lines else "none"


def _cli_run(key: str, quick: bool, args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="miaohui-lab-bench-") as out:
        command = [sys.executable, "-m", "engine", "lab", "--only", key, "--out", out, "--model", args.model,
                   "--precision", args.precision, "--device", args.device, *(["--quick"] if quick else [])]
        t0 = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:  # one line, with how far it got: crawling on a busy machine or stuck
            raise SystemExit(f"lab_bench: engine lab passed its {timeout_s:.0f} s limit (--timeout); its last progress "
                             f"line: {_last_progress(exc.stderr)}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SystemExit(f"lab_bench: engine lab failed (exit {done.returncode}): {tail[0]}")
        document = json.loads((Path(out) / "results.json").read_text(encoding="utf-8"))
    result = document["experiments"][key]
    machine = document.get("machine", {})
    return {"seconds": round(document.get("elapsed_s", time.perf_counter() - t0), 2),
            "process_seconds": round(time.perf_counter() - t0, 2),
            "threads": {"intra_op": machine.get("torch_threads"), "inter_op": machine.get("torch_interop_threads")},
            "summary": result.get("summary", {})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.lab_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="kv_cache")
    parser.add_argument("--full", action="store_true", help="the full-size experiment (default: quick)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--runs", type=int, default=1, help="runs of each path (alternated)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per run, seconds")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    import platform

    from engine.inputs import LoadSpec

    app = QApplication.instance() or QApplication([])  # noqa: F841  (the bridge's signals need an event loop)
    spec = LoadSpec(model=args.model, precision=args.precision, device=args.device)
    quick = not args.full
    runs: dict[str, list[dict[str, Any]]] = {"window": [], "cli": []}
    for _ in range(args.runs):
        for name in ("cli", "window"):
            run = (_cli_run(args.experiment, quick, args, args.timeout) if name == "cli"
                   else _window_run(args.experiment, quick, spec, args.timeout))
            runs[name].append(run)
            print(f"{name:6s} {run['seconds']:8.1f} s  threads {run['threads']}", file=sys.stderr)
    medians = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    report = {"experiment": args.experiment, "quick": quick, "model": args.model, "precision": args.precision,
              "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "runs": runs,
              "median_s": {k: round(v, 2) for k, v in medians.items()},
              "window_over_cli": round(medians["window"] / medians["cli"], 3)}
    print(json.dumps(report, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
