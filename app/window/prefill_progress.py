"""What a reply waits for, then prefill progress in the window (issue 30). Before anything arrives, the new reply's
bubble says it is waiting for the model (``show_waiting``): a tool turn or a slow first prefill chunk showed an
empty card for ~40 s (issue 41). Then, once per prefill chunk (``Bridge.prefill_progressed``), the share of the
new prompt tokens computed so far, in percent, in the status bar, in the footer of the reply bubble still waiting for
its first token, and in the panel's "Why this TTFT" (``TtftView.show_prefill``); once the prompt is in, "generating"
until text shows (a tool call streams none). The bubble's footer clears itself when the first text streams in
(``MessageWidget.show_message``). Owns the wording (in the ``MainWindow`` context, where
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


def show_waiting(bubble: Any) -> None:
    """Say in a reply's bubble still without text that it waits for the model (its first prefill chunk)."""
    if not bubble.message.text and not bubble.message.reasoning:
        bubble.footer.setText(QCoreApplication.translate("MainWindow", "Waiting for the model…"))
        bubble.footer.setVisible(True)


def show_prefill_progress(window: Any, done: int, total: int) -> None:
    text = prefill_text(done, total)
    window.status_state.setText(f"· {text}")
    window.perf_panel.ttft_view.show_prefill(done, total)
    chat = window.chat
    if chat.is_streaming() and chat.widgets() and not chat.reply_text():
        bubble = chat.widgets()[-1]
        bubble.footer.setText(text)  # "generating" once the prompt is in: the wait is the first token now
        bubble.footer.setVisible(True)
