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

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QLabel

from app.widgets.chat_view import ChatView
from app.widgets.message_bubble import MessageWidget
from app.widgets.ttft_view import TtftView


def prefill_text(done: int, total: int) -> str:
    """``"prefill 42 % (430/1024 tokens)"``, or "generating" once the prompt is in."""
    if done >= total:
        return QCoreApplication.translate("MainWindow", "generating")
    share = 100 * done // total if total > 0 else 100
    return QCoreApplication.translate("MainWindow", "prefill {share} % ({done}/{total} tokens)").format(
        share=share, done=done, total=total)


def show_waiting(bubble: MessageWidget) -> None:
    """Say in a reply's bubble still without text that it waits for the model (its first prefill chunk)."""
    if not bubble.message.text and not bubble.message.reasoning:
        bubble.footer.setText(QCoreApplication.translate("MainWindow", "Waiting for the model…"))
        bubble.footer.setVisible(True)


def show_prefill_progress(status_state: QLabel, ttft_view: TtftView, chat: ChatView, done: int, total: int) -> None:
    """Show ``done`` of ``total`` prompt tokens in the status bar's state label, the panel's TTFT view and the
    reply's bubble still waiting for its first token."""
    text = prefill_text(done, total)
    status_state.setText(f"· {text}")
    ttft_view.show_prefill(done, total)
    if chat.is_streaming() and chat.widgets() and not chat.reply_text():
        bubble = chat.widgets()[-1]
        bubble.footer.setText(text)  # "generating" once the prompt is in: the wait is the first token now
        bubble.footer.setVisible(True)
