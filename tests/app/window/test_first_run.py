"""The first start says, above the chat, that the default model is tiny and where better ones are (issue 41 point 1):
through the real window, real clicks and the real settings file."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.state.settings import Settings
from app.window.mainwindow import MainWindow
from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)
from tests.app.ui.test_i18n import chinese, zh_translations  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints")]


def _window(qtbot, settings, store) -> MainWindow:  # noqa: F811
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    window.show()
    return window


def test_a_first_start_says_the_default_model_is_tiny_and_opens_the_recommended_models(qtbot, settings,  # noqa: F811
                                                                                       store, home):
    window = _window(qtbot, settings, store)
    note = window.first_run.note
    assert note.isVisible()
    assert "tiny" in note.label.text() and "SmolLM2-135M-Instruct" in note.label.text()
    assert "Recommended" in note.label.text()
    qtbot.mouseClick(note.models_button, Qt.MouseButton.LeftButton)
    models = window.models_window
    assert models is not None and models.isVisible()
    assert models.tabs.currentWidget() is models.recommended_tab
    assert note.isVisible()  # opening the list is not closing the note
    qtbot.mouseClick(note.dismiss_button, Qt.MouseButton.LeftButton)
    assert not note.isVisible()
    assert window.shutdown()
    again = _window(qtbot, Settings.in_file(settings._q.fileName()), store)  # the next start reads it back
    assert not again.first_run.note.isVisible()
    assert again.shutdown()


def test_the_note_hides_while_another_model_is_loaded(qtbot, make_window, tiny_model_dir):
    window = make_window(loaded=False)
    assert window.first_run.note.isVisible()
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(tiny_model_dir), "fp32", "cpu")
    assert not window.first_run.note.isVisible()


def test_the_note_is_in_chinese_in_a_chinese_window(qtbot, chinese, settings, store, home):  # noqa: F811
    window = _window(qtbot, settings, store)
    note = window.first_run.note
    assert "SmolLM2-135M-Instruct" in note.label.text() and "推荐" in note.label.text()
    assert note.models_button.text() != "Show better models" and note.dismiss_button.text() != "Got it"
    assert window.shutdown()
