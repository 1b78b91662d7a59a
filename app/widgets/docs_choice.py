"""The composer's collections button: which collections this conversation answers from, and its documents mode.

Its books icon (assets/collections.svg: an emoji drew a box where the system has no emoji font) and label say at a
glance that a conversation is grounded ("notes", "notes +2"; "Collections" when none is picked); its menu lists the collections to tick, the documents mode (auto: the attached files whole when they fit
the context, else retrieved passages; whole text; retrieved passages) and "Manage collections…".

Owns the button and its menu only: where the choice is kept and what it does is ``app.window.docs_choice``'s.
"""

from __future__ import annotations

from PySide6.QtCore import QT_TRANSLATE_NOOP, Qt, Signal, Slot
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu, QToolButton, QWidget

from app.history.conversation_docs import DocsChoice, MODES
from app.ui.assets import icon
from engine.fmt import outside_text

MODE_TEXTS = {
    "auto": QT_TRANSLATE_NOOP("DocsChoiceButton", "Auto: attached files whole when they fit, else passages"),
    "whole": QT_TRANSLATE_NOOP("DocsChoiceButton", "Whole text of attached files"),
    "retrieve": QT_TRANSLATE_NOOP("DocsChoiceButton", "Retrieved passages"),
}
MAX_NAME_CHARS = 24  # the label stays short beside Attach; the tooltip names them all


class DocsChoiceButton(QToolButton):
    """A books icon and the picked collections; a menu to change them.

    Signals:
        choice_changed(object): the user changed the ``DocsChoice`` (ticked a collection, chose a mode).
        manage_requested(): "Manage collections…" was chosen: open the Collections window.
    """

    choice_changed = Signal(object)
    manage_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("docsChoice")
        self.setAutoRaise(True)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setIcon(icon("collections"))
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.menu_ = QMenu(self)
        self.setMenu(self.menu_)
        self._names: list[str] = []
        self._choice = DocsChoice()
        self.collection_actions: dict[str, QAction] = {}
        self.mode_actions: dict[str, QAction] = {}
        self._rebuild()

    def choice(self) -> DocsChoice:
        return self._choice

    def set_collections(self, names: list[str]) -> None:
        """The collections the store holds now (the menu's list)."""
        self._names = list(names)
        self._rebuild()

    def set_choice(self, choice: DocsChoice) -> None:
        """Show ``choice`` (a conversation opened); emits nothing."""
        self._choice = choice
        self._rebuild()

    def _rebuild(self) -> None:
        menu = self.menu_
        menu.clear()
        self.collection_actions.clear()
        self.mode_actions.clear()
        menu.addSection(self.tr("Answer from collections"))
        if not self._names:
            menu.addAction(self.tr("No collections yet")).setEnabled(False)
        for name in self._names:
            action = menu.addAction(outside_text(name))
            action.setCheckable(True)
            action.setChecked(name in self._choice.collections)
            action.toggled.connect(self.on_collection_toggled)
            action.setData(name)
            self.collection_actions[name] = action
        menu.addSection(self.tr("Documents"))
        group = QActionGroup(menu)
        for mode in MODES:
            action = menu.addAction(self.tr(MODE_TEXTS[mode]))
            action.setCheckable(True)
            action.setChecked(mode == self._choice.mode)
            action.setData(mode)
            group.addAction(action)
            action.triggered.connect(self.on_mode_triggered)
            self.mode_actions[mode] = action
        menu.addSeparator()
        menu.addAction(self.tr("Manage collections…")).triggered.connect(self.manage_requested)
        self._show_label()

    def _show_label(self) -> None:
        picked = self._choice.collections
        text = self.tr("Collections")
        if picked:
            first = outside_text(picked[0], max_chars=MAX_NAME_CHARS)
            text = first if len(picked) == 1 else f"{first} +{len(picked) - 1}"
        self.setText(text)
        mode = self.tr(MODE_TEXTS[self._choice.mode])
        tip = (self.tr("This conversation answers from: {names}. Documents: {mode}").format(
            names=", ".join(outside_text(name) for name in picked), mode=mode) if picked else
               self.tr("Pick collections this conversation answers from. Documents: {mode}").format(mode=mode))
        self.setToolTip(tip)
        self.setAccessibleName(self.tr("Collections and documents mode"))
        self.setAccessibleDescription(tip)

    @Slot(bool)
    def on_collection_toggled(self, _checked: bool) -> None:
        picked = tuple(name for name, action in self.collection_actions.items() if action.isChecked())
        self._choice = DocsChoice(picked, self._choice.mode)
        self._show_label()
        self.choice_changed.emit(self._choice)

    @Slot()
    def on_mode_triggered(self) -> None:
        mode = next((m for m, action in self.mode_actions.items() if action.isChecked()), "auto")
        if mode != self._choice.mode:
            self._choice = DocsChoice(self._choice.collections, mode)
            self._show_label()
            self.choice_changed.emit(self._choice)
