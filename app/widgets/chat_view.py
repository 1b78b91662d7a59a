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

from dataclasses import replace

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QLabel, QPushButton, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from app.state.chat_messages import ShownMessage
from app.ui import theme as themes
from app.ui import accessibility
from app.ui.throttle import Throttle
from app.widgets.message_bubble import MessageWidget

__all__ = ["ChatView", "MessageWidget", "ShownMessage"]

# A streaming reply is re-rendered at most this often (the text arrives ~30 times a second): each render is
# Python work holding the GIL the engine's decode loop also needs (measured: the window decoded at 0.90 of the
# headless speed while rendering every flush).
REPLY_RENDER_MS = 80
PAGE = 30  # bubbles built when a conversation opens, and per "Show earlier messages"


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
