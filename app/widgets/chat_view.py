"""The conversation as a column of message bubbles, with one reply that can grow while it streams.

Owns the display of messages: user text shown exactly as typed, replies rendered as Markdown
(``app.ui.markdown_view``), a footer of figures under each reply, and per-message actions (edit a user
message, regenerate or continue the last reply, fork the conversation at any saved message). Streaming
touches only the reply being written, so a 200-message chat streams as fast as an empty one. Owns no
persistence and no generation: it emits requests and the window acts on them.

A long conversation opens with only its newest ``PAGE`` messages built; a "Show earlier messages"
button at the top builds the previous page. Laying out hundreds of rich bubbles measured ~150-250 ms
of frozen GUI thread on opening a 200-message chat, and every bubble added later re-ran that layout
(~25 ms per reply start); the messages not yet built are kept as data, so ``messages()`` and the
indices the signals carry always cover the whole conversation.

Keyboard and screen reader: Tab reaches each message's text (its code blocks' "Copy" links too) and its actions;
each message is named by who wrote it. A theme change re-renders the bubbles whose code blocks carry its colours.
"""

from __future__ import annotations

import re
from dataclasses import replace

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPushButton, QScrollArea, QSizePolicy, QVBoxLayout,
                               QWidget)

from app.state.chat_messages import ShownMessage
from app.ui import theme as themes
from app.ui import accessibility
from app.ui.markdown_view import MessageBrowser
from app.ui.throttle import Throttle
from app.widgets import sources_view
from app.widgets.thinking_section import ThinkingSection
from app.widgets.tool_call_view import ToolCallsSection

__all__ = ["ChatView", "MessageWidget", "ShownMessage"]

STOPPED_LABELS = {"cancelled": QT_TRANSLATE_NOOP("MessageWidget", "stopped"),  # shown translated
                  "length": QT_TRANSLATE_NOOP("MessageWidget", "length limit reached"),
                  "error": QT_TRANSLATE_NOOP("MessageWidget", "error")}
_TOKEN_COUNT = re.compile(r"\b(\d+) tokens?\b")  # in a footer, which app.history.perf writes in English
# Laying out a 1 MB paste takes Qt tens of seconds on a slow CPU; a bubble shows this much and says the rest
# was sent (the model and the history get the whole text).
DISPLAY_LIMIT = 20_000
# A streaming reply is re-rendered at most this often (the text arrives ~30 times a second): each render is
# Python work holding the GIL the engine's decode loop also needs (measured: the window decoded at 0.90 of the
# headless speed while rendering every flush).
REPLY_RENDER_MS = 80
PAGE = 30  # bubbles built when a conversation opens, and per "Show earlier messages"


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


class ChatView(QScrollArea):
    """The centre of the window: messages top to bottom, newest last, following the stream.

    Signals:
        edit_requested(int): index of a user message to edit and resend.
        regenerate_requested(): regenerate the last reply.
        continue_requested(): continue the last reply (the length limit or Stop cut it).
        fork_requested(int): index of a message to fork the conversation at (it and the ones before it).
        code_copied(str): a code block was copied to the clipboard.
    """

    fork_requested = Signal(int)
    edit_requested = Signal(int)
    regenerate_requested = Signal()
    continue_requested = Signal()
    code_copied = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chat")
        accessibility.name(self, self.tr("Conversation"), self.tr("The messages of this chat, oldest first"))
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._canvas = QWidget()
        self._canvas.setObjectName("chatCanvas")
        self._layout = QVBoxLayout(self._canvas)
        self._layout.setContentsMargins(24, 16, 24, 16)
        self._layout.setSpacing(12)
        self._older: list[ShownMessage] = []  # the conversation's oldest messages, not built (yet)
        self._earlier_button = QPushButton("")
        self._earlier_button.setFlat(True)
        self._earlier_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self._earlier_button.clicked.connect(self.on_earlier_button_clicked)
        self._earlier_button.hide()
        self._layout.addWidget(self._earlier_button, 0, Qt.AlignmentFlag.AlignHCenter)
        self._placeholder = QLabel(self.tr("Ask anything. Replies stream token by token; the panel on the right "
                                           "shows why they arrive fast."))
        self._placeholder.setObjectName("footer")
        self._placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._placeholder.setWordWrap(True)
        self._layout.addWidget(self._placeholder)
        self._layout.addStretch(1)
        self.setWidget(self._canvas)
        self._widgets: list[MessageWidget] = []
        self._reply: MessageWidget | None = None
        self._reply_text = self._reply_reasoning = ""
        self._render = Throttle(self._render_reply, REPLY_RENDER_MS, self)
        self._actions_enabled = True
        self._follow = True  # keep the newest text in view unless the user scrolled up to read
        self.verticalScrollBar().rangeChanged.connect(self.on_scroll_range_changed)
        self.verticalScrollBar().valueChanged.connect(self.on_scroll_value_changed)
        themes.watcher().theme_changed.connect(self.on_theme_changed)

    # -- content ------------------------------------------------------------------------------------
    def messages(self) -> list[ShownMessage]:
        """The whole conversation shown, oldest first (bubbles not built yet included)."""
        return self._older + [w.message for w in self._widgets]

    def widgets(self) -> list[MessageWidget]:
        """The bubbles built so far: the newest messages (``messages()[-len(widgets()):]``)."""
        return list(self._widgets)

    def clear(self) -> None:
        self._render.cancel()
        for widget in self._widgets:
            widget.deleteLater()
        self._widgets.clear()
        self._older = []
        self._earlier_button.hide()
        self._reply = None
        self._reply_text = self._reply_reasoning = ""
        self._placeholder.show()

    def set_messages(self, messages: list[ShownMessage]) -> None:
        """Show a whole conversation (on selecting it); built once, never re-rendered while streaming."""
        self.setUpdatesEnabled(False)
        try:
            self.clear()
            cut = max(0, len(messages) - PAGE)
            self._older = list(messages[:cut])
            for message in messages[cut:]:
                self._append(message)
            self._update_earlier_button()
        finally:
            self.setUpdatesEnabled(True)
        self._refresh_actions()
        self._follow = True
        QTimer.singleShot(0, self.scroll_to_bottom)

    def add_message(self, message: ShownMessage) -> MessageWidget:
        widget = self._append(message)
        self._refresh_actions()
        self._follow = True
        return widget

    def remove_from(self, index: int) -> None:
        """Remove message ``index`` and every later one (edit and regenerate cut the history there)."""
        built_from = max(0, index - len(self._older))
        del self._older[index:]
        for widget in self._widgets[built_from:]:
            self._layout.removeWidget(widget)
            widget.deleteLater()
        del self._widgets[built_from:]
        if not self._widgets and self._older:
            self.show_earlier()  # never leave only the "earlier" button on screen
        self._update_earlier_button()
        self._refresh_actions()
        self._placeholder.setVisible(not self._widgets)

    def set_message_id(self, index: int, message_id: int) -> None:
        if index < len(self._older):
            m = self._older[index]
            self._older[index] = replace(m, message_id=message_id)
            return
        widget = self._widgets[index - len(self._older)]
        widget.message = replace(widget.message, message_id=message_id)

    def show_earlier(self) -> None:
        """Build the previous ``PAGE`` of messages above the ones shown, keeping the view where it was."""
        if not self._older:
            return
        cut = max(0, len(self._older) - PAGE)
        page, self._older = self._older[cut:], self._older[:cut]
        bar = self.verticalScrollBar()
        from_bottom = bar.maximum() - bar.value()
        self._follow = False
        for position, message in enumerate(page):
            self._append(message, position)
        self._update_earlier_button()
        self._refresh_actions()
        self._canvas.adjustSize()  # lay out now so the position can be restored before the next paint
        bar.setValue(bar.maximum() - from_bottom)

    # -- streaming ----------------------------------------------------------------------------------
    def begin_reply(self, resumed: ShownMessage | None = None) -> MessageWidget:
        """A new reply's bubble; or, given the last bubble's message (Continue), that bubble grows again."""
        last = self._widgets[-1] if self._widgets else None
        if (resumed is not None and (resumed.text or resumed.reasoning) and last is not None
                and last.message.role == "assistant" and resumed.message_id == last.message.message_id):
            self._reply, self._reply_text, self._reply_reasoning = last, resumed.text, resumed.reasoning
            self._refresh_actions()
            return last
        self._reply_text = self._reply_reasoning = ""
        self._reply = self.add_message(ShownMessage("assistant", ""))
        return self._reply

    def append_to_thought(self, delta: str) -> None:
        """Add streamed thought text to the reply being written (its collapsed section)."""
        if self._reply is not None and delta:
            self._reply_reasoning += delta
            self._render()

    def append_to_reply(self, delta: str) -> None:
        """Add streamed text to the reply being written (one re-render of that bubble per flush)."""
        if self._reply is None or not delta:
            return
        self._reply_text += delta
        self._render()

    def _render_reply(self) -> None:
        if self._reply is not None:
            m = self._reply.message
            self._reply.show_message(ShownMessage("assistant", self._reply_text, m.message_id,
                                                  reasoning=self._reply_reasoning, documents=m.documents))

    def show_reply_documents(self, used: object) -> None:  # the streaming reply's DocumentsUsed: sources under it
        if self._reply is not None:
            self._reply.show_message(replace(self._reply.message, documents=used))

    def reply_text(self) -> str:
        return self._reply_text

    def is_streaming(self) -> bool:
        return self._reply is not None

    def finish_reply(self, text: str, footer: str, finish_reason: str | None, message_id: int | None) -> None:
        self.finish_message(ShownMessage("assistant", text, message_id, footer, finish_reason))

    def finish_message(self, message: ShownMessage) -> None:
        """The streaming reply ended: show it as saved (its thought, tokens and seconds included)."""
        if self._reply is None:
            return
        self._render.cancel()
        self._reply.show_message(message)
        self._reply = None
        self._reply_text = ""
        self._refresh_actions()

    def set_actions_enabled(self, enabled: bool) -> None:
        """Disable edit/regenerate/continue while a reply streams (they would race the generation)."""
        if enabled != self._actions_enabled:
            self._actions_enabled = enabled
            self._refresh_actions()

    # -- internals ----------------------------------------------------------------------------------
    def _append(self, message: ShownMessage, position: int | None = None) -> MessageWidget:
        """Build a bubble at the end, or at ``position`` among the built ones (older pages go on top)."""
        self._placeholder.hide()
        widget = MessageWidget(message, self._canvas)
        widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        widget.edit_clicked.connect(self.on_message_edit_clicked)
        widget.regenerate_clicked.connect(self.regenerate_requested)
        widget.continue_clicked.connect(self.continue_requested)
        widget.fork_clicked.connect(self.on_message_fork_clicked)
        widget.browser.copied.connect(self.code_copied)
        if position is None:
            self._layout.insertWidget(self._layout.count() - 1, widget)
            self._widgets.append(widget)
        else:
            first = self._layout.indexOf(self._widgets[0]) if self._widgets else self._layout.count() - 1
            self._layout.insertWidget(first + position, widget)
            self._widgets.insert(position, widget)
        return widget

    def _update_earlier_button(self) -> None:
        count = len(self._older)
        self._earlier_button.setVisible(bool(count))
        if count:
            self._earlier_button.setText(self.tr("Show {page} earlier messages ({count} not shown)").format(
                page=min(count, PAGE), count=count))

    def _refresh_actions(self) -> None:
        last = len(self._widgets) - 1  # the last bubble is always built: older pages are the ones held back
        for i, widget in enumerate(self._widgets):
            is_last_reply = i == last and widget.message.role == "assistant" and widget is not self._reply
            widget.set_actions(edit=widget.message.role == "user", regenerate=is_last_reply,
                               continue_=is_last_reply and widget.message.continuable,
                               enabled=self._actions_enabled,
                               fork=widget.message.message_id is not None and widget is not self._reply)

    @Slot()
    def on_message_edit_clicked(self) -> None:
        sender = self.sender()
        if sender in self._widgets:
            self.edit_requested.emit(len(self._older) + self._widgets.index(sender))

    @Slot()
    def on_message_fork_clicked(self) -> None:
        sender = self.sender()
        if sender in self._widgets:
            self.fork_requested.emit(len(self._older) + self._widgets.index(sender))

    @Slot(object)
    def on_theme_changed(self, _theme: themes.Theme) -> None:
        # Only code blocks carry the theme's colours in their HTML; the rest follows the palette by itself.
        for widget in self._widgets:
            if widget.browser.code_blocks:
                widget.browser.rerender()

    @Slot()
    def on_earlier_button_clicked(self) -> None:
        self.show_earlier()

    @Slot(int, int)
    def on_scroll_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)

    @Slot(int)
    def on_scroll_value_changed(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - 24

    @Slot()
    def scroll_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
