"""The ‹ 2/3 › pager under a reply that has several versions (a Regenerate kept the earlier ones), or under a message
an edit gave several versions (each with the branch that follows it): ``VersionPager``.

Owns the three controls and their keyboard use: Tab reaches the two arrows (each a button with a tooltip and an
accessible name), Space or Enter presses one, and Left/Right (Home/End: the first/last version) page while either has
focus. It only asks for a version (``version_chosen``); which version a turn shows, and what showing it changes (the
text, the thought, the footer, the panel's figures, the next prompt), is the window's (``app.window.versions``), the
store's (``app.history.versions``). ``place_in(bubble)`` puts it in a bubble's bottom row, before the footer's figures.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QBoxLayout, QHBoxLayout, QLabel, QPushButton, QWidget


class VersionPager(QWidget):
    """‹ shown/count ›; ``of_message``: versions of an edited message (the branch below follows), else of a reply.

    Signals:
        version_chosen(int): the user asked for this version (1-based) of the reply.
    """

    version_chosen = Signal(int)

    def __init__(self, parent: QWidget | None = None, of_message: bool = False) -> None:
        super().__init__(parent)
        self.setObjectName("versionPager")
        self.of_message = of_message
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.previous_button = self._arrow("‹", self.tr("Previous version of this message (Left)") if of_message
                                           else self.tr("Previous version of this reply (Left)"))
        self.label = QLabel("")
        self.label.setObjectName("footer")
        self.next_button = self._arrow("›", self.tr("Next version of this message (Right)") if of_message
                                       else self.tr("Next version of this reply (Right)"))
        self.previous_button.setAccessibleName(self.tr("Previous version"))
        self.next_button.setAccessibleName(self.tr("Next version"))
        self.previous_button.clicked.connect(self.on_previous_button_clicked)
        self.next_button.clicked.connect(self.on_next_button_clicked)
        for widget in (self.previous_button, self.label, self.next_button):
            layout.addWidget(widget)
        layout.addSpacing(6)  # apart from the footer's figures that follow
        # The arrows larger than the footer's text, and grey when there is no version that way (the theme's flat
        # buttons are link-coloured whether or not they can be pressed).
        self.setStyleSheet("QPushButton { font-size: 15px; font-weight: 600; padding: 0px 2px; }"
                           "QPushButton:disabled { color: palette(mid); }")
        self._shown = self._count = 1
        self._enabled = True

    def _arrow(self, text: str, tip: str) -> QPushButton:
        button = QPushButton(text)
        button.setFlat(True)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        button.setToolTip(tip)
        button.setAccessibleDescription(tip)
        button.setFixedWidth(button.fontMetrics().horizontalAdvance("‹") * 3 + 8)
        button.installEventFilter(self)
        return button

    @property
    def shown(self) -> int:
        return self._shown

    @property
    def count(self) -> int:
        return self._count

    def set_position(self, shown: int, count: int) -> None:
        """Show version ``shown`` of ``count``."""
        self._shown, self._count = shown, count
        self.label.setText(f"{shown}/{count}")
        text = self.tr("Version {shown} of {count}").format(shown=shown, count=count)
        self.label.setToolTip((self.tr("{version}: editing kept the earlier messages, each with the conversation "
                                       "that followed it; page through them with the arrows. The one shown is the one "
                                       "the next reply answers.") if self.of_message else
                               self.tr("{version}: Regenerate kept the earlier replies; page through them with the "
                                       "arrows. The one shown is the one the next reply answers.")).format(version=text))
        self.setAccessibleName(text)
        self._update_buttons()

    def set_paging_enabled(self, enabled: bool) -> None:
        """Off while a reply streams: the conversation must not change under it."""
        self._enabled = enabled
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.previous_button.setEnabled(self._enabled and self._shown > 1)
        self.next_button.setEnabled(self._enabled and self._shown < self._count)

    def _choose(self, place: int) -> None:
        if self._enabled and 1 <= place <= self._count and place != self._shown:
            self.version_chosen.emit(place)

    def eventFilter(self, watched: object, event: object) -> bool:  # noqa: N802 (Qt override)
        if isinstance(event, QKeyEvent) and event.type() == QKeyEvent.Type.KeyPress:
            moves = {Qt.Key.Key_Left: self._shown - 1, Qt.Key.Key_Right: self._shown + 1,
                     Qt.Key.Key_Home: 1, Qt.Key.Key_End: self._count}
            if event.key() in moves:
                self._choose(moves[event.key()])
                return True
        return super().eventFilter(watched, event)  # type: ignore[arg-type]

    @Slot()
    def on_previous_button_clicked(self) -> None:
        self._choose(self._shown - 1)

    @Slot()
    def on_next_button_clicked(self) -> None:
        self._choose(self._shown + 1)


def place_in(bubble: QWidget, of_message: bool = False) -> VersionPager:
    """The bubble's pager, built into its bottom row (before the footer) the first time it is asked for."""
    pager = bubble.findChild(VersionPager)
    if pager is None:
        pager = VersionPager(bubble, of_message)
        layout = bubble.layout()
        row = layout.itemAt(layout.count() - 1).layout() if layout is not None and layout.count() else None
        if isinstance(row, QBoxLayout):  # the bubble's row of footer and actions (app.widgets.chat_view)
            row.insertWidget(0, pager)
        elif layout is not None:
            layout.addWidget(pager)
    return pager
