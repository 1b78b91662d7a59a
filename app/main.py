"""Entry point: ``miaohui`` / ``python -m app`` [--model M --precision P --device D] [--language L],
``--self-test``, ``--screenshot OUT.png [--prompt TEXT]``, ``--version``.

Reads top to bottom: parse arguments → check the GUI toolkit is importable (one plain line if
not) → the data folder (unusable: the window opens with history in memory and says why; a scripted
run prints one line and exits 2) → logging and the excepthook (a bug becomes a dialog, never a
silent death) → QApplication, settings, history, the interface language (``app.ui.i18n``: its
translators go in before any widget is made), the theme (``app.ui.theme``: the appearance setting, then the system's
colour scheme followed live) → the window → run. ``--self-test`` and ``--screenshot`` run
offscreen with throwaway settings and history and no log file, so they change no file of the user's: load
the model, send one message, wait for the streamed reply, check the panel showed TTFT, tok/s and KV bytes,
print a JSON report (and save a PNG).
Owns startup and the scripted runs; the window's behaviour lives in ``app.window.mainwindow``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import re
import sys
import tempfile
import traceback
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import engine  # noqa: F401  (offline switches before anything touches Hugging Face)
from app import __version__
from app.history.store import HistoryStore
from engine.errors import DataDirError
from engine.inputs import PRECISIONS
from engine.paths import data_dir, history_path, keep_state_in, logs_dir

try:  # everything that needs PySide6: without it, main() says so in one plain line instead of a traceback
    from PySide6.QtCore import QCoreApplication, QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox
    from shiboken6 import delete as delete_now

    from app.runtime.single_instance import SingleInstance
    from app.state import settings as app_settings
    from app.ui import i18n, theme
except ImportError as _qt_error:
    QT_MISSING: ImportError | None = _qt_error
else:
    QT_MISSING = None

if TYPE_CHECKING:
    from app.window.mainwindow import MainWindow  # imported late in main(): the window's modules are slow to import

log = logging.getLogger("miaohui")

SELF_TEST_PROMPT = "In two sentences, what is a KV cache?"
SCRIPTED_TIMEOUT_S = 300  # load + one reply of the default model on a slow shared CPU fits well inside
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3


def _window_size(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d{3,5})[xX×](\d{3,5})", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1280x800")
    return int(match[1]), int(match[2])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="miaohui", description="Miaohui (秒回): a local LLM chat that shows why "
                                     "it answers fast")
    parser.add_argument("--model", help="'default', a name from `python -m engine models list`, a model folder or a "
                        ".gguf file (default: the last one used)")
    parser.add_argument("--precision", choices=PRECISIONS)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--language", choices=i18n.LANGUAGES if QT_MISSING is None else None,
                        help="interface language for this run (default: the one chosen in Settings, else the system's)")
    parser.add_argument("--self-test", action="store_true",
                        help="offscreen: load, send one message, check the panel, print a JSON report")
    parser.add_argument("--screenshot", metavar="OUT.png", help="like --self-test, then save the window as a PNG")
    parser.add_argument("--prompt", help="the message --self-test/--screenshot sends")
    parser.add_argument("--size", type=_window_size, default=(1440, 900), metavar="WxH",
                        help="the window's size for --self-test/--screenshot (default 1440x900)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="for --self-test/--screenshot")
    parser.add_argument("--timeout", type=float, default=SCRIPTED_TIMEOUT_S, help="for --self-test/--screenshot (s)")
    parser.add_argument("--version", action="version", version=f"miaohui {__version__}")
    return parser.parse_args(argv)


def setup_logging(to_file: bool = True) -> Path | None:
    """Log to ``<data dir>/logs/miaohui.log``; the GUI shows one line, the log keeps the details.

    ``to_file=False`` (scripted runs, which leave every user file as it was): warnings on stderr only.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not to_file:
        return None
    try:
        path = logs_dir() / "miaohui.log"
        root = logging.getLogger()
        if any(getattr(h, "baseFilename", None) == str(path) for h in root.handlers):
            return path  # main() ran before in this process (tests): one handler per file
        handler = logging.FileHandler(path, encoding="utf-8")
    except (OSError, DataDirError):  # a read-only or unusable data folder: the app runs without a log file
        return None
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logging.getLogger().addHandler(handler)
    return path


def install_excepthook(log_path: Path | None, interactive: bool) -> None:
    """Turn an uncaught exception into a message dialog (or one stderr line in scripted runs)."""

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc, tb)
            return
        log.error("unhandled exception:\n%s", "".join(traceback.format_exception(exc_type, exc, tb)))
        line = f"{exc_type.__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
        if not interactive:
            print(f"miaohui: internal error: {line}", file=sys.stderr)
            return
        if QApplication.instance() is not None:
            translate = QCoreApplication.translate
            where = translate("main", "\n\nDetails were written to {path}.").format(path=log_path) if log_path else ""
            text = translate("main", "Something went wrong inside Miaohui:\n{line}{where}\n\nThe app keeps running; "
                             "if it misbehaves, restart it.")
            QMessageBox.critical(None, translate("main", "Miaohui hit a bug"), text.format(line=line, where=where))

    sys.excepthook = hook


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scripted = bool(args.self_test or args.screenshot)
    if scripted:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if QT_MISSING is not None:
        print(f"miaohui: the GUI toolkit PySide6 is not installed or cannot load ({QT_MISSING}); "
              "run `make install`", file=sys.stderr)
        return EXIT_USAGE
    from app.platform_check import advice, missing_for_platform

    missing = missing_for_platform()  # before Qt tries the xcb plugin and aborts naming the wrong library
    if missing is not None:
        print(advice(missing), file=sys.stderr)
        return EXIT_USAGE
    try:
        data_dir()
        unusable: DataDirError | None = None
    except DataDirError as exc:
        unusable = exc
    if unusable is not None and scripted:  # a self-test of a broken installation fails at once, plainly
        print(f"miaohui: {unusable}", file=sys.stderr)
        return EXIT_USAGE

    log_path = setup_logging(to_file=not scripted)
    install_excepthook(log_path, interactive=not scripted)
    # Late on purpose: the window's modules take ~1.6 s to import (pyqtgraph, matplotlib, the lab), which
    # --version, --help and the one-line refusals above need not wait for (measured: --version 2.3 s -> 0.2 s).
    from pyqtgraph.util.garbage_collector import GarbageCollector

    from app.window.mainwindow import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName(app_settings.ORGANISATION)
    app.setApplicationName(app_settings.APPLICATION)
    app.setApplicationDisplayName("Miaohui 秒回")
    app.setApplicationVersion(__version__)
    # The cyclic garbage collector runs in whichever thread allocates, and the worker thread allocates all
    # the time: a chart's graphics items collected there while the GUI thread paints crash the process
    # (seen in CI in AxisItem.boundingRect). pyqtgraph's collector disables the automatic one and collects
    # on a GUI-thread timer instead; explicit gc.collect() calls (the engine's out-of-memory recovery) still run.
    gui_thread_gc = GarbageCollector(interval=1.0)

    guard = None  # one window per data folder; scripted runs use throwaway history: never blocked, never blocking
    if not scripted and unusable is None:
        guard = SingleInstance(data_dir())
        if not guard.acquire():  # before the history opens: a second start only raises the first window
            delivered, line = guard.hand_over()
            print(f"miaohui: {line}", file=sys.stdout if delivered else sys.stderr)
            return EXIT_OK if delivered else EXIT_FAILED

    scratch = tempfile.TemporaryDirectory(prefix="miaohui-run-") if scripted else None
    if scratch is not None:
        # Scripted runs never touch the user's settings or history: both live in the scratch folder, with
        # default values (the report does not depend on what the user set). Settings() cannot be
        # redirected: QSettings(organisation, application) always writes the native file.
        app_settings.use_ini_folder(Path(scratch.name))  # for anything else asking QSettings()
        # The run's own files follow (engine.paths.state_root): history, the panel's bandwidth measurement, the
        # conversations' saved KV caches. Models are still read from the data folder.
        keep_state_in(Path(scratch.name))
        settings = app_settings.Settings.in_file(Path(scratch.name) / "miaohui.ini")
    else:
        settings = app_settings.Settings()
    store = HistoryStore(history_path())  # an unusable folder: history in memory, with a notice
    i18n.install(app, args.language or settings.language())  # before any widget: labels are translated when made
    i18n.configure_chart_fonts()
    themes = theme.install(app, settings.appearance())  # type: ignore[arg-type]  (then follows the system live)
    window = MainWindow(settings, store)
    themes.watch(window)
    if guard is not None:
        guard.activation_requested.connect(window.bring_to_front)
    if unusable is not None:  # the window still opens; loading the default model will say the same
        window.messages.show_message(QCoreApplication.translate(
            "main", "{problem}; this session's chats are kept in memory only").format(problem=unusable), "warning")
    code = EXIT_FAILED
    try:
        if scripted:
            code = ScriptedRun(window, args).run()
        else:
            window.show()
            model, precision, device = settings.model_choice()
            window.load_model(args.model or model, args.precision or precision, args.device or device)
            code = app.exec()
        return code
    finally:
        joined = window.shutdown()
        store.close()
        if joined:
            # Destroyed now, not whenever the garbage collector meets the window's reference cycles (its helpers
            # hold it): a window the collector tears down inside a later event loop (tests run main() again and
            # again) delivers events to Python objects it has already cleared, and crashes.
            delete_now(window)
        gui_thread_gc.timer.stop()
        gc.enable()  # main() run again in one process (the tests) starts from the usual collector
        gc.collect()
        i18n.uninstall(app)
        if guard is not None:
            guard.release()
        if scratch is not None:
            keep_state_in(None)
            scratch.cleanup()
        if not joined:
            # The engine ignored its cancel past the bounded wait: its thread still uses the model and would emit
            # the worker's signals into a torn-down window, and interpreter exit would wait in its C call; history
            # is closed, so leave now.
            # os._exit runs no atexit handler and flushes no Python buffer: flush the report and the log here
            # (settings are synced as they are set).
            log.error("engine thread still running at exit; leaving without waiting for it")
            logging.shutdown()
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(code)


class ScriptedRun:
    """--self-test / --screenshot: drive the real window through one load and one reply."""

    def __init__(self, window: MainWindow, args: argparse.Namespace) -> None:
        self.window = window
        self.args = args
        self.report: dict[str, Any] = {"ok": False, "model": args.model or "default"}
        self.code = EXIT_FAILED
        greedy = args.self_test and not args.screenshot  # reproducible text for comparisons
        chat = window.settings.chat()
        window.settings.set_chat(app_settings.ChatSettings(
            system_prompt=chat.system_prompt, temperature=0.0 if greedy else chat.temperature, top_p=chat.top_p,
            top_k=chat.top_k, repetition_penalty=chat.repetition_penalty,
            max_new_tokens=args.max_new_tokens or (64 if greedy else 256), seed=0, use_kv_cache=True))
        window.apply_settings()  # the scratch settings, not those of a conversation reopened at start
        self.clock = QElapsedTimer()
        self.watchdog = QTimer()
        self.watchdog.setSingleShot(True)
        self.watchdog.timeout.connect(self.on_watchdog_expired)

    def run(self) -> int:
        w = self.window
        w.model_ready.connect(self.on_model_ready)
        w.bridge.load_failed.connect(self.on_load_failed)
        w.reply_finished.connect(self.on_reply_finished)
        w.resize(*self.args.size)
        w.show()
        self.clock.start()
        self.watchdog.start(int(self.args.timeout * 1000))
        w.load_model(self.args.model or "default", self.args.precision or "auto", self.args.device or "auto")
        QApplication.instance().exec()
        print(json.dumps(self.report, ensure_ascii=False, indent=1))
        return self.code

    def _done(self, code: int) -> None:
        self.code = code
        self.report["wall_s"] = round(self.clock.elapsed() / 1000, 2)
        self.watchdog.stop()
        QApplication.instance().exit(code)

    def on_model_ready(self, facts: Any) -> None:
        self.report["model"] = facts.name
        self.report["device"] = facts.device
        self.report["precision"] = facts.precision
        # "native" where a quantized model decodes in one C++ call per token; packaging/check_self_test.py asks
        # for it, so a frozen app that silently fell back to the ~7x slower Python step fails CI.
        self.report["decode_step"] = getattr(facts, "decode_step", None)
        self.report["load_s"] = round(self.clock.elapsed() / 1000, 2)
        if not self.window.send(self.args.prompt or SELF_TEST_PROMPT):
            self.report["error"] = self.window.messages.text() or "the window refused to send"
            self._done(EXIT_FAILED)

    def on_load_failed(self, failure: Any) -> None:
        self.report["error"] = failure.message
        self._done(EXIT_FAILED)

    def on_reply_finished(self, reason: str) -> None:
        shown = self.window.perf_panel.displayed()
        metrics = self.window.last_metrics
        reply = self.window.chat.messages()[-1] if self.window.chat.messages() else None
        self.report.update(
            finish_reason=reason, reply=reply.text if reply else "", footer=reply.footer if reply else "",
            panel={k: shown[k] for k in ("ttft", "prefill", "decode_avg", "decode_now", "tokens", "kv", "kv_formula",
                                         "context")},
            decode_tok_s=getattr(metrics, "decode_tok_s", None), ttft_s=getattr(metrics, "ttft_s", None),
            generated_tokens=getattr(metrics, "generated_tokens", None),
            kv_cache_bytes=getattr(metrics, "kv_cache_bytes", None))
        checks = {
            "reply_streamed": bool(reply and reply.role == "assistant" and reply.text),
            "finished_normally": reason in ("eos", "length"),
            "ttft_shown": shown["ttft"].endswith(("ms", " s")),
            "tok_s_shown": shown["decode_avg"].endswith("tok/s"),
            "kv_shown": re.match(r"[1-9][0-9.]* (B|KiB|MiB|GiB)", shown["kv"]) is not None,
        }
        self.report["checks"] = checks
        self.report["ok"] = all(checks.values())
        if self.args.screenshot:
            QTimer.singleShot(400, self.on_screenshot_due)  # let the chart's idle redraw and layout settle
        else:
            self._done(EXIT_OK if self.report["ok"] else EXIT_FAILED)

    def on_screenshot_due(self) -> None:
        path = Path(self.args.screenshot)
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = self.window.grab().save(str(path))
        self.report["screenshot"] = str(path) if saved else None
        self._done(EXIT_OK if self.report["ok"] and saved else EXIT_FAILED)

    def on_watchdog_expired(self) -> None:
        self.report["error"] = f"timed out after {self.args.timeout:.0f} s"
        self.window.bridge.stop()
        self._done(EXIT_TIMEOUT)


if __name__ == "__main__":
    sys.exit(main())
