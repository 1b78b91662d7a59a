"""A reasoning model's thought in the window: ``ThinkingSection`` above a reply, and the ``ThinkingSwitch``.

``ThinkingSection`` is the collapsed "Thinking…" line at the top of a reply while its thought streams ("Thought ·
N tokens · X s" once it is done), expandable to show the thought itself (Markdown, rendered only while open: a
collapsed thought costs no layout per token). The answer is the bubble's own text below it.

``ThinkingSwitch`` is the per-conversation "Thinking" check box in the status bar, shown only while the loaded
model's chat template takes ``enable_thinking`` (Qwen3): off, replies skip the thought (the setting is saved with
the conversation, ``ChatSettings.thinking``). Which templates take it is read on the worker thread, from the
loaded tokenizer (``engine.generate.reasoning``), once per load. Owns no generation and no persistence.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QCheckBox, QFrame, QToolButton, QVBoxLayout, QWidget

from app.runtime.bridge import Bridge
from app.state.settings import ChatSettings

from app.ui.markdown_view import MessageBrowser


class ThinkingSection(QFrame):
    """The collapsed thought of one reply: a toggle line and, when open, the thought's text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("thinking")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 4)
        layout.setSpacing(2)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("thinkingToggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.setToolTip(self.tr("Show or hide how the model reasoned before answering"))
        self.toggle.toggled.connect(self.on_toggle_toggled)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.body = MessageBrowser(self)
        self.body.setObjectName("thinkingText")
        self.body.setAccessibleName(self.tr("The model's reasoning"))
        self.body.hide()
        layout.addWidget(self.body)
        self.text = ""
        self._rendered: str | None = None

    def is_expanded(self) -> bool:
        return self.toggle.isChecked()

    def show_thought(self, text: str, streaming: bool, tokens: int | None = None,
                     seconds: float | None = None) -> None:
        """Show ``text`` (the thought so far); the line says "Thinking…" while it streams."""
        self.text = text
        head = self.tr("Thinking…") if streaming else self.tr("Thought")
        summary = self.summary(tokens, seconds)
        self.toggle.setText(f"{head} · {summary}" if summary else head)
        self.toggle.setAccessibleName(self.toggle.text())
        if self.is_expanded():
            self._render()

    def summary(self, tokens: int | None, seconds: float | None) -> str:
        """ "12 tokens · 0.8 s" in the interface's language; "" when nothing is known."""
        parts = []
        if tokens:
            parts.append(self.tr("{n} tokens").format(n=tokens) if tokens != 1 else self.tr("1 token"))
        if seconds is not None:
            parts.append(self.tr("{s} s").format(s=f"{seconds:.1f}"))
        return " · ".join(parts)

    def _render(self) -> None:
        if self._rendered != self.text:
            self.body.show_markdown(self.text)
            self._rendered = self.text

    @Slot(bool)
    def on_toggle_toggled(self, expanded: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        if expanded:
            self._render()
        self.body.setVisible(expanded)


def _template_takes_thinking(loaded: Any, _cancel: Any) -> bool:
    """On the worker: does the loaded model's chat template take ``enable_thinking``?"""
    from engine.generate.reasoning import reasoning_format

    fmt = reasoning_format(str(getattr(getattr(loaded, "tokenizer", None), "chat_template", "") or ""))
    return fmt is not None and fmt.takes_enable_thinking


class ThinkingSwitch(QCheckBox):
    """The open conversation's "Thinking" switch, for a model whose template takes ``enable_thinking``.

    ``chat_settings`` reads the open conversation's settings (the switch shows their ``thinking``); the window connects
    the controller's ``model_ready`` and ``conversation_shown`` to the slots of those names.

    Signals:
        thinking_chosen(bool): the user turned thinking on or off for the open conversation (the window applies it).
    """

    thinking_chosen = Signal(bool)

    def __init__(self, bridge: Bridge, chat_settings: Callable[[], ChatSettings],
                 parent: QWidget | None = None) -> None:
        super().__init__(self.tr("Thinking"), parent)
        self.setObjectName("thinkingSwitch")
        self.setToolTip(self.tr("Let the model reason before it answers (this conversation; the model's template "
                                "takes the switch). Off: it answers at once."))
        self._bridge, self._chat_settings = bridge, chat_settings
        self._task: int | None = None
        self.hide()
        self.toggled.connect(self.thinking_chosen)
        bridge.task_finished.connect(self.on_bridge_task_finished)

    def _sync(self) -> None:
        self.blockSignals(True)
        self.setChecked(self._chat_settings().thinking)
        self.blockSignals(False)

    @Slot(object)
    def on_controller_model_ready(self, _facts: Any) -> None:
        self.hide()
        self._task = self._bridge.submit_task(_template_takes_thinking)

    @Slot(object)
    def on_controller_conversation_shown(self, _messages: Any) -> None:
        self._sync()

    @Slot(int, object)
    def on_bridge_task_finished(self, task: int, takes: Any) -> None:
        if task == self._task:
            self._task = None
            self._sync()
            self.setVisible(takes is True)
