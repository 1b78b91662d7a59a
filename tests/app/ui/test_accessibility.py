"""Keyboard and screen reader: every control the window's Tab key reaches has an accessible name, the figures say
their values, the focus is drawn in both themes, the tab order follows the layout, and the actions have shortcuts.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QCoreApplication, Qt
from PySide6.QtWidgets import QAbstractButton, QAbstractSpinBox, QApplication, QComboBox, QWidget

from app.ui import theme
from app.widgets.chat_view import ShownMessage
from app.widgets.settings_dialog import SettingsDialog
from tests.app._gui_fixtures import make_window, send_and_wait, settings, store, styled  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]


def _tab_stops(root: QWidget) -> list[QWidget]:
    """The widgets Tab reaches in ``root`` now, in the order it reaches them (the focus chain)."""
    stops, widget = [], root.nextInFocusChain()
    while widget is not root:
        if (widget.focusPolicy() & Qt.FocusPolicy.TabFocus and widget.isVisibleTo(root) and widget.isEnabled()
                and widget.window() is root):
            stops.append(widget)
        widget = widget.nextInFocusChain()
    return stops


def _unnamed(widgets: list[QWidget]) -> list[str]:
    """Controls a screen reader could only call by their kind: no accessible name, and no text of their own (a spin
    box's or combo box's own line edit is part of it: theirs is the name said)."""
    def named(w: QWidget) -> bool:
        if isinstance(w.parentWidget(), (QAbstractSpinBox, QComboBox)):
            w = w.parentWidget()
        return bool(w.accessibleName().strip() or (isinstance(w, QAbstractButton) and w.text().strip()))
    return [f"{type(w).__name__} in {type(w.parent()).__name__}" for w in widgets if not named(w)]



def test_every_tab_stop_is_named_and_the_figures_say_their_values(qtbot, make_window):
    window = make_window(max_new_tokens=6)
    assert send_and_wait(qtbot, window, "Hello") == "length"
    window.chat.add_message(ShownMessage("assistant", "```python\nx = 1\n```", message_id=None))
    window.messages.show_message("a note", "warning")  # its Dismiss button among the stops
    stops = []
    for index in range(window.side_tabs.count()):
        window.side_tabs.setCurrentIndex(index)
        QCoreApplication.processEvents()
        stops += [w for w in _tab_stops(window) if w not in stops]
    kinds = {type(w).__name__ for w in stops}
    assert {"QComboBox", "PromptBox", "QListWidget", "MessageBrowser", "PlotWidget", "QTableWidget"} <= kinds
    assert _unnamed(stops) == []

    panel = window.perf_panel
    for key, caption in (("ttft", "Time to first token"), ("decode_avg", "Decode average"), ("kv", "KV cache (measured)")):
        value = panel._values[key].text()
        assert value != "—" and panel._values[key].accessibleName() == f"{caption}: {value}"
    assert panel._context_bar.accessibleName().startswith("Context: ") and "tokens" in panel._context_bar.accessibleName()
    assert panel._plot.accessibleName() == "Per-token latency chart"
    assert panel._plot.accessibleDescription().startswith("5 gaps between tokens; the latest ")
    reply = window.chat.widgets()[1]
    assert reply.browser.accessibleName() == "Reply from Miaohui"
    assert reply._buttons["regenerate"].accessibleDescription()


def test_the_dialogs_controls_are_named(qtbot, settings):
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    dialog.show()
    assert _unnamed(_tab_stops(dialog)) == []
    assert dialog.temperature.accessibleName() == "Temperature"
    assert dialog.seed.accessibleDescription() == dialog.seed.toolTip() != ""


def test_tab_order_follows_the_layout_and_actions_have_shortcuts(make_window):
    window = make_window(loaded=False)
    stops = _tab_stops(window)
    order = [window.model_bar.model_combo, window.conversations.search, window.conversations.list, window.chat,
             window.prompt, window.side_tabs]
    positions = [stops.index(w) for w in order]
    assert positions == sorted(positions)
    shortcuts = {a.text(): a.shortcut().toString() for a in window.actions()}
    assert shortcuts["New chat"] and shortcuts["Stop"] == "Esc" and shortcuts["Focus prompt"] == "Ctrl+L"
    assert shortcuts["Settings…"] and shortcuts["Models…"]


@pytest.mark.parametrize("dark", [False, True])
def test_the_focus_is_drawn_in_both_themes(qtbot, qapp, styled, make_window, dark):
    sheet = theme.stylesheet(theme.DARK if dark else theme.LIGHT)
    for selector in ("QPushButton:focus", "QComboBox:focus", "QLineEdit:focus", "QAbstractItemView:focus",
                     "QCheckBox:focus", "QToolButton:focus", "QPlainTextEdit#prompt:focus", "QGraphicsView:focus"):
        assert selector in sheet
    theme.apply(qapp, dark=dark)
    window = make_window(loaded=False)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    for widget in (window.conversations.new_button, window.model_bar.load_button, window.conversations.search):
        before = widget.grab().toImage()
        widget.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(widget.hasFocus)
        QApplication.processEvents()
        assert widget.grab().toImage() != before, type(widget).__name__  # the ring shows
        window.prompt.setFocus()


def test_the_server_dialog_and_the_models_window_name_their_controls(qtbot, settings):
    from app.state.api_keys import KeyringInfo
    from app.widgets.models_window import ModelsWindow
    from app.widgets.remote_dialog import RemoteDialog

    dialog = RemoteDialog("http://127.0.0.1:8000/v1", "", None, keyring=KeyringInfo(None, False))
    qtbot.addWidget(dialog)
    dialog.show()
    assert _unnamed(_tab_stops(dialog)) == []
    assert dialog.url_edit.accessibleName() == "Base URL"

    window = ModelsWindow(settings)
    qtbot.addWidget(window)
    window.show()
    try:
        for index in range(window.tabs.count()):
            window.tabs.setCurrentIndex(index)
            QCoreApplication.processEvents()
            assert _unnamed(_tab_stops(window)) == [], window.tabs.tabText(index)
        assert window.search_tab.table.accessibleName() == "Search results"
    finally:
        assert window.shutdown(10_000)
