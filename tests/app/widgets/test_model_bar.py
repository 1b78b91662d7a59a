"""The model bar asks and the window decides (issue 30): "Connect to server…" is a request the bar emits
(``connect_requested``), which the main window connects to the remote source it constructed; the bar neither
finds nor makes a remote source itself, so it works, and is tested, without a window around it."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt

from app.widgets.model_bar import ModelBar
from tests.app._gui_fixtures import settings  # noqa: F401 (fixture)


def test_connect_to_server_is_a_request_the_bar_emits_without_a_window(qtbot, settings):
    bar = ModelBar(settings)
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.connect_requested, timeout=1000):
        qtbot.mouseClick(bar.connect_button, Qt.MouseButton.LeftButton)
    assert [type(child).__name__ for child in bar.findChildren(QObject) if "Remote" in type(child).__name__] == []

