"""The Models window's search without a network: one human line at once, in English and Chinese, never the
client's ``ConnectError: [Errno -2] ...``; through the real huggingface_hub client against an endpoint whose name
does not resolve and a closed port on 127.0.0.1."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import QCoreApplication

from app.widgets.models_window import ModelsWindow
from tests.app._gui_fixtures import settings, styled  # noqa: F401 (fixtures)
from tests.app.ui.test_i18n import chinese, zh_translations  # noqa: F401 (fixtures)
from tests.helpers.network import closed_port_url

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]
GIVES_UP_WITHIN_MS = 8_000  # it sat 25 s in huggingface_hub's retries before


@pytest.fixture(params=["en", "zh_CN"])
def language(request):
    if request.param == "zh_CN":
        request.getfixturevalue("chinese")
    return request.param


@pytest.mark.parametrize("where", ["unresolvable", "closed port"])
def test_search_without_a_network_says_so_at_once(qtbot, home, settings, styled, language, where):
    endpoint = "http://nonexistent.invalid" if where == "unresolvable" else closed_port_url()
    window = ModelsWindow(settings, endpoint=endpoint)
    qtbot.addWidget(window)
    window.show()
    try:
        window.allow_box.click()
        window.search_tab.query.setText("smol")
        start = time.monotonic()
        window.search_tab.search_button.click()
        qtbot.waitUntil(lambda: window.messages.text() != "", timeout=GIVES_UP_WITHIN_MS)
        assert time.monotonic() - start < GIVES_UP_WITHIN_MS / 1000
        line = window.messages.text()
        why = ("no network or the name does not resolve" if where == "unresolvable"
               else "nothing accepts connections there")
        expected = QCoreApplication.translate("SearchTab", "Cannot reach {endpoint}: {why}.").format(
            endpoint=endpoint, why=QCoreApplication.translate("SearchTab", why))
        assert line == expected
        if language == "en":
            assert line == f"Cannot reach {endpoint}: {why}."
        assert "Error" not in line and "Errno" not in line and "\n" not in line
        assert window.search_tab.status.text() == ""  # no "Searching…" left behind
        # Issue 41 point 9: the banner's icon was a glyph (⛔) many fonts lack: it drew an empty box.
        icon = window.messages._icon
        assert icon.text() == "" and not icon.pixmap().isNull() and icon.pixmap().width() > 0
    finally:
        assert window.shutdown(10_000)


def test_the_default_hub_is_called_hugging_face(qtbot, settings):
    from engine.library.access import DEFAULT_ENDPOINT, HubUnreachableError, Unreachable

    window = ModelsWindow(settings)
    qtbot.addWidget(window)
    try:
        text = window.search_tab.unreachable_text(HubUnreachableError(DEFAULT_ENDPOINT, Unreachable.NO_NAME))
        assert text == "Cannot reach Hugging Face: no network or the name does not resolve."
    finally:
        assert window.shutdown(10_000)
