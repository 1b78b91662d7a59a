"""``python -m tests.helpers.panel_midreply OUT.png [--language zh_CN]``: the real window on the real default model, a
second turn whose system prompt's date changed, grabbed while the reply streams (issue 30's done-when: the panel
mid-reply, roofline and waterfall, in both languages). Temporary settings and history; the app's style sheet and
its compiled translation. Prints the PNG's path."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.panel_midreply")
    parser.add_argument("out")
    parser.add_argument("--language", default="en")
    parser.add_argument("--after-tokens", type=int, default=24, help="grab once this many tokens streamed")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QEventLoop, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from app.history.store import HistoryStore
    from app.state.settings import ChatSettings, Settings, use_ini_folder
    from app.ui import i18n, theme

    app = QApplication.instance() or QApplication([])
    if args.language != "en":
        i18n.install(app, args.language)
    theme.apply(app, dark=False)
    tmp = Path(tempfile.mkdtemp(prefix="miaohui-shot-"))
    use_ini_folder(tmp / "qsettings")
    settings = Settings(QSettings(str(tmp / "qsettings" / "miaohui.ini"), QSettings.Format.IniFormat))
    chat = ChatSettings(system_prompt="Today is 2026-12-02. Be brief.", temperature=0.0, top_p=1.0, top_k=0,
                        repetition_penalty=1.0, max_new_tokens=24, seed=0, use_kv_cache=True)
    settings.set_chat(chat)
    from app.window.mainwindow import MainWindow

    store = HistoryStore(tmp / "history.sqlite3")
    window = MainWindow(settings, store)
    window.resize(1440, 900)
    window.show()
    loop = QEventLoop()
    window.model_ready.connect(lambda *_: loop.quit())
    window.reply_finished.connect(lambda *_: loop.quit())
    QTimer.singleShot(900_000, loop.quit)
    window.load_model("default", "auto", "cpu")
    loop.exec()
    assert window.send("Hello there")
    loop.exec()
    window.apply_settings(replace(chat, system_prompt="Today is 2026-12-03. Be brief.", max_new_tokens=200))
    seen = {"tokens": 0, "saved": False}

    def on_tokens(_text: str, tokens: list) -> None:
        seen["tokens"] += len(tokens)
        if seen["tokens"] >= args.after_tokens and not seen["saved"]:
            seen["saved"] = True
            from PySide6.QtWidgets import QScrollArea

            view, area = window.perf_panel.ttft_view, window.perf_panel.ttft_view.parentWidget()
            while area is not None and not isinstance(area, QScrollArea):
                area = area.parentWidget()
            if area is not None:  # the roofline's verdict and the whole waterfall, marker included, in view
                area.ensureWidgetVisible(view, 0, 0)
            QApplication.processEvents()
            window.grab().save(args.out)
            print(args.out)
            window.controller.stop() if hasattr(window.controller, "stop") else None

    window.bridge.tokens_received.connect(on_tokens)
    assert window.send("Tell me a long story about a cat who learns to cook.")
    loop.exec()
    window.shutdown()
    store.close()
    return 0 if seen["saved"] else 1


if __name__ == "__main__":
    sys.exit(main())
