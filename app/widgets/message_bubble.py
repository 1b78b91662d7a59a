"""One message bubble of the conversation (``MessageWidget``): role, text, footer and the message's action buttons.

Owns how one message is shown: user text exactly as typed, a reply as Markdown (``app.ui.markdown_view``), a huge
paste previewed, the footer's token count in the interface's language, the thinking and tool-call sections, the
attached files and sources (``app.widgets.sources_view``). Does not own the column of bubbles, streaming or paging
(``app.widgets.chat_view.ChatView``), nor what an action does (the window acts on the signals).
"""

from __future__ import annotations

import re

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.state.chat_messages import ShownMessage
from app.ui.markdown_view import MessageBrowser
from app.widgets import sources_view
from app.widgets.image_strip import ImageStrip
from app.widgets.thinking_section import ThinkingSection
from app.widgets.tool_call_view import ToolCallsSection

STOPPED_LABELS = {"cancelled": QT_TRANSLATE_NOOP("MessageWidget", "stopped"),  # shown translated
                  "length": QT_TRANSLATE_NOOP("MessageWidget", "length limit reached"),
                  "error": QT_TRANSLATE_NOOP("MessageWidget", "error")}
_TOKEN_COUNT = re.compile(r"\b(\d+) tokens?\b")  # in a footer, which app.history.perf writes in English
# Laying out a 1 MB paste takes Qt tens of seconds on a slow CPU; a bubble shows this much and says the rest
# was sent (the model and the history get the whole text).
DISPLAY_LIMIT = 20_000


def _preview(text: str) -> str:
    if len(text) <= DISPLAY_LIMIT:
        return text
    return text[:DISPLAY_LIMIT] + QCoreApplication.translate(
        "ChatView", "\n\n[… {n} more characters not shown here]").format(n=f"{len(text) - DISPLAY_LIMIT:,}")


def _footer_text(footer: str) -> str:
    """A reply's footer with its token count in the interface's language (figures and units stay as they are)."""
    def count(match: re.Match) -> str:
        translate = QCoreApplication.translate
        return (translate("MessageWidget", "{n} token") if match[1] == "1"
                else translate("MessageWidget", "{n} tokens")).format(n=match[1])
    return _TOKEN_COUNT.sub(count, footer)


class MessageWidget(QFrame):
    """One bubble: role, text, footer and its action buttons.

    Signals:
        edit_clicked(): the user wants to edit and resend this (user) message.
        regenerate_clicked(): the user wants this (last) reply generated again.
        continue_clicked(): the user wants this reply, cut at the length limit or stopped, continued.
        fork_clicked(): the user wants a new conversation holding the messages up to this one.
    """

    edit_clicked = Signal()
    regenerate_clicked = Signal()
    continue_clicked = Signal()
    fork_clicked = Signal()
    ACTIONS = {"edit": QT_TRANSLATE_NOOP("MessageWidget", "Edit"),
               "regenerate": QT_TRANSLATE_NOOP("MessageWidget", "Regenerate"),
               "continue": QT_TRANSLATE_NOOP("MessageWidget", "Continue"),
               "fork": QT_TRANSLATE_NOOP("MessageWidget", "Fork from here")}  # key -> button text
    TOOLTIPS = {"edit": QT_TRANSLATE_NOOP("MessageWidget", "Edit this message and send it again"),
                "regenerate": QT_TRANSLATE_NOOP("MessageWidget", "Generate this reply again"),
                "continue": QT_TRANSLATE_NOOP("MessageWidget", "Continue this reply where it stopped"),
                "fork": QT_TRANSLATE_NOOP("MessageWidget", "Start a new chat with the messages up to this one; this "
                                                           "chat stays as it is.")}  # key -> tooltip and description

    def __init__(self, message: ShownMessage, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = message
        user = message.role == "user"
        self.setObjectName("userBubble" if user else "assistantBubble")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 8, 14, 8)
        layout.setSpacing(4)
        role = QLabel(self.tr("You") if user else self.tr("Miaohui"))
        role.setObjectName("role")
        layout.addWidget(role)
        self.thinking: ThinkingSection | None = None  # built for a reply with a thought, above its text
        self.attached = self.sources = None  # attached files' names, a reply's sources (app.widgets.sources_view)
        self.images: ImageStrip | None = None  # built for a message with pictures, above its text
        self.browser = MessageBrowser(self)
        self.browser.setAccessibleName(self.tr("Your message") if user else self.tr("Reply from Miaohui"))
        layout.addWidget(self.browser)
        bottom = QHBoxLayout()
        bottom.setSpacing(6)
        self.footer = QLabel("")
        self.footer.setObjectName("footer")
        self.footer.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.footer.setWordWrap(True)  # a narrow chat wraps the figures rather than push the actions out of view
        bottom.addWidget(self.footer, 1)  # the figures take the room; without them the spacer pushes the actions right
        bottom.addStretch(0)
        self._bottom = bottom
        # Built on first show: most bubbles never offer an action, and three idle buttons per bubble
        # were a fifth of the widgets a long chat builds when it opens.
        self._buttons: dict[str, QPushButton] = {}
        layout.addLayout(bottom)
        self._actions_state: tuple[bool, bool, bool, bool, bool] | None = None
        self.show_message(message)

    @property
    def text(self) -> str:
        return self.message.text

    def show_message(self, message: ShownMessage) -> None:
        self.message = message
        if message.reasoning and self.thinking is None:
            self.thinking = ThinkingSection(self)
            self.layout().insertWidget(1, self.thinking)  # under the role, above the answer
        if self.thinking is not None:
            self.thinking.setVisible(bool(message.reasoning))
            streaming = not message.text and message.finish_reason is None  # still thinking: no answer yet
            self.thinking.show_thought(message.reasoning, streaming, message.thinking_tokens, message.thinking_s)
        if message.tool_calls:  # built only for a reply that called tools; a streaming render leaves the live ones
            ToolCallsSection.of(self).show_records(message.tool_calls)
        sources_view.show_documents(self, self.browser, message.attachments, message.documents)
        if message.images and self.images is None:
            self.images = ImageStrip(self)
            layout = self.layout()
            layout.insertWidget(layout.indexOf(self.browser), self.images)  # the pictures, then the question
        if self.images is not None:
            self.images.show_images(message.images)
        if message.role == "user":
            self.browser.show_plain(_preview(message.text))
        else:
            self.browser.show_markdown(_preview(message.text))
        footer = _footer_text(message.footer)
        label = self.tr(STOPPED_LABELS.get(message.finish_reason or "", ""))
        if label:
            footer = f"{footer} · {label}" if footer else label
        self.footer.setText(footer)
        self.footer.setVisible(bool(footer))

    def set_actions(self, edit: bool = False, regenerate: bool = False, continue_: bool = False,
                    enabled: bool = True, fork: bool = False) -> None:
        """Which actions this bubble offers, and whether they can be used now (not while a reply streams).

        Disabling keeps the buttons in place: hiding them would re-lay out every bubble of a long chat.
        """
        state = (edit, regenerate, continue_, enabled, fork)
        if state == self._actions_state:
            return  # a long chat calls this for every bubble: skip the no-op changes
        self._actions_state = state
        for key, shown in zip(self.ACTIONS, (edit, regenerate, continue_, fork)):
            button = self._buttons.get(key)
            if button is None:
                if not shown:
                    continue
                button = self._make_button(key)
            # Enable before showing, and leave hidden buttons alone: a reply's start disables the actions of
            # every bubble, and each setEnabled on a styled button costs a re-polish (~0.1 ms x 600 measured).
            if shown and button.isEnabled() != enabled:
                button.setEnabled(enabled)
            if button.isHidden() == shown:
                button.setVisible(shown)

    def _make_button(self, key: str) -> QPushButton:
        """Build action ``key``'s button (it emits ``<key>_clicked``), placed in ``ACTIONS`` order."""
        button = QPushButton(self.tr(self.ACTIONS[key]))
        button.setFlat(True)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.clicked.connect(getattr(self, f"{key}_clicked"))
        button.setToolTip(self.tr(self.TOOLTIPS[key]))
        button.setAccessibleDescription(button.toolTip())
        button.hide()
        order = list(self.ACTIONS)  # keep the buttons in this order whatever was built first
        after = sum(1 for k in order[:order.index(key)] if k in self._buttons)
        self._bottom.insertWidget(2 + after, button)  # after the footer and the stretch
        self._buttons[key] = button
        return button
