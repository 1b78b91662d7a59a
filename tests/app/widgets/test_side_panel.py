"""The side panel at the window sizes people use (1280×800, 1440×900), in English and Chinese, with the app's real
style sheet: every tab shows without the tab bar's scroll arrows, and what a tab shows (a tokenized line, a reply's
tokens) never widens the panel.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QToolButton

from tests.app._gui_fixtures import (REPLY_TIMEOUT_MS, make_window, send_and_wait, settings,  # noqa: F401
                                     store, styled)
from tests.app.ui.test_i18n import chinese, zh_translations  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]
SIZES = [(1280, 800), (1440, 900)]
LINE = ("Tokenizing one long line of text, with words, numbers like 1234567890 and 我昨天认识的那个人 in it, must not "
        "push the side panel wider than the window gave it")


@pytest.fixture(params=["en", "zh_CN"])
def language(request):
    if request.param == "zh_CN":
        request.getfixturevalue("chinese")
    return request.param


def _settle(window, size: tuple[int, int]) -> None:
    window.resize(*size)
    for _ in range(3):
        QCoreApplication.processEvents()


@pytest.mark.parametrize("size", SIZES, ids=["1280x800", "1440x900"])
def test_every_side_tab_shows_without_scrolling(qtbot, styled, language, make_window, size):
    window = make_window(loaded=False)
    _settle(window, size)
    bar = window.side_tabs.tabBar()
    arrows = [b for b in bar.findChildren(QToolButton) if b.isVisible()]
    assert arrows == [], f"the tab bar scrolls: {[bar.tabText(i) for i in range(bar.count())]}"
    for index in range(bar.count()):
        assert bar.rect().contains(bar.tabRect(index)), (bar.tabText(index), bar.tabRect(index), bar.rect())
    assert bar.tabText(bar.count() - 1) and window.side_tabs.widget(bar.count() - 1) is window.lab_tab


@pytest.mark.parametrize("size", SIZES, ids=["1280x800", "1440x900"])
def test_tokenizing_a_line_and_a_reply_do_not_widen_the_panel(qtbot, styled, language, make_window, size):
    window = make_window(max_new_tokens=12)
    _settle(window, size)
    dock, chat = window.perf_dock.width(), window.chat.width()
    window.side_tabs.setCurrentWidget(window.tokenizer_view)
    with qtbot.waitSignal(window.tokenizer_view.view_shown, timeout=REPLY_TIMEOUT_MS):
        window.tokenizer_view.set_text(LINE)
        window.tokenizer_view.tokenize()
    _settle(window, size)
    assert window.tokenizer_view.counts_label.text()
    assert window.perf_dock.width() <= dock + 1, (dock, window.perf_dock.width())
    assert window.chat.width() >= chat - 1
    window.side_tabs.setCurrentWidget(window.token_inspector)
    send_and_wait(qtbot, window, LINE)
    _settle(window, size)
    assert window.token_inspector.row_count() > 0
    assert window.perf_dock.width() <= dock + 1, (dock, window.perf_dock.width())
    assert window.chat.width() >= chat - 1
    # Nothing inside asks for more than the panel has: a later resize cannot grow it either.
    assert window.perf_dock.minimumSizeHint().width() <= dock + 1
