"""Prefill progress in the window (issue 30): once per prefill chunk (``Bridge.prefill_progressed``), the share of the
new prompt tokens computed so far, in percent, in the status bar, in the footer of the reply bubble still waiting for
its first token, and in the panel's "Why this TTFT" (``TtftView.show_prefill``). The bubble's footer clears itself when
the first text streams in (``MessageWidget.show_message``). Owns the wording (in the ``MainWindow`` context, where
the status text was) and where it goes.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QCoreApplication


def prefill_text(done: int, total: int) -> str:
    """``"prefill 42 % (430/1024 tokens)"``, or "generating" once the prompt is in."""
    if done >= total:
        return QCoreApplication.translate("MainWindow", "generating")
    share = 100 * done // total if total > 0 else 100
    return QCoreApplication.translate("MainWindow", "prefill {share} % ({done}/{total} tokens)").format(
        share=share, done=done, total=total)


def show_prefill_progress(window: Any, done: int, total: int) -> None:
    text = prefill_text(done, total)
    window.status_state.setText(f"· {text}")
    window.perf_panel.ttft_view.show_prefill(done, total)
    chat = window.chat
    if chat.is_streaming() and chat.widgets() and not chat.reply_text():
        bubble = chat.widgets()[-1]
        bubble.footer.setText(text if done < total else "")
        bubble.footer.setVisible(done < total)
