"""The window's title names the app once, as the desktop shows it.

Qt's xcb, Wayland and Windows platforms append the application's display name (which ``app.main`` sets
to "Miaohui 秒回") to every window title that does not already end with it
(``QPlatformWindow::formatWindowTitle``): a title of "Miaohui 秒回 — model" was shown as
"Miaohui 秒回 — model — Miaohui 秒回". The offscreen platform the tests run on shows titles as they are, so
``shown`` applies that rule to the real window's title.
"""

from __future__ import annotations

import pytest
from PySide6.QtGui import QGuiApplication

from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]
NAME = "Miaohui 秒回"


def shown(title: str, separator: str = " — ") -> str:
    """``title`` as a desktop platform of Qt shows it (QPlatformWindow::formatWindowTitle)."""
    display = QGuiApplication.applicationDisplayName()
    if display and not title.endswith(display):
        return f"{title}{separator}{display}" if title else display
    return title


@pytest.fixture
def display_name(qapp):
    before = QGuiApplication.applicationDisplayName()
    QGuiApplication.setApplicationDisplayName(NAME)  # as app.main does
    yield
    QGuiApplication.setApplicationDisplayName(before)


def test_the_title_names_the_app_once_with_and_without_a_model(qtbot, display_name, make_window, tiny_model_dir):
    window = make_window(loaded=False)
    assert shown(window.windowTitle()).count(NAME) == 1, shown(window.windowTitle())
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS) as ready:
        window.load_model(str(tiny_model_dir), "fp32", "cpu")
    title = shown(window.windowTitle())
    assert title.count(NAME) == 1 and ready.args[0].name in title, title
