"""The theme follows the system's light/dark switch while the app runs, and the forced Light/Dark setting: the
window's palette, the style sheet, the chat's code blocks and the latency chart all take the new theme's colours.

The offscreen platform's colour scheme cannot change, so the tests drive what ``colorSchemeChanged`` calls (the
watcher's slot), the ThemeChange fallback (with a scheme reader of their own) and the Settings dialog.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QSettings, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from app.state.settings import Settings
from app.ui import theme
from app.widgets.chat_view import ShownMessage
from app.widgets.settings_dialog import SettingsDialog
from tests.app._gui_fixtures import make_window, settings, store  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]
CODE_REPLY = "Here:\n\n```python\nprint('hi')\n```\n"


@pytest.fixture
def watcher(qapp):
    """The application's watcher, following a light system; left that way afterwards, with the style as before."""
    before = qapp.styleSheet(), qapp.palette()
    found = theme.watcher()
    found.set_appearance("system")
    found.on_color_scheme_changed(Qt.ColorScheme.Light)
    yield found
    found.set_appearance("system")
    found.on_color_scheme_changed(Qt.ColorScheme.Light)
    qapp.setStyleSheet(before[0])
    qapp.setPalette(before[1])


def _window_colour(widget) -> str:
    return widget.palette().color(QPalette.ColorRole.Window).name()


def _assert_shows(window, expected: theme.Theme) -> None:
    app = QApplication.instance()
    assert theme.current() is expected
    assert app.palette().color(QPalette.ColorRole.Window).name() == expected.window
    assert _window_colour(window) == expected.window
    assert window.palette().color(QPalette.ColorRole.Text).name() == expected.text
    assert app.styleSheet() == theme.stylesheet(expected)
    assert window.perf_panel.chart_colours() == {"background": expected.surface, "curve": expected.accent,
                                                 "axis": expected.border, "text": expected.muted}
    code = window.chat.widgets()[-1].browser.document().toHtml()
    other = theme.LIGHT if expected is theme.DARK else theme.DARK
    assert expected.code_background in code and other.code_background not in code


def test_the_system_switching_to_dark_and_back_restyles_the_window_live(qtbot, watcher, make_window):
    window = make_window(loaded=False)
    window.chat.add_message(ShownMessage("assistant", CODE_REPLY))
    _assert_shows(window, theme.LIGHT)
    with qtbot.waitSignal(watcher.theme_changed) as changed:
        watcher.on_color_scheme_changed(Qt.ColorScheme.Dark)  # what QStyleHints.colorSchemeChanged calls
    assert changed.args == [theme.DARK]
    _assert_shows(window, theme.DARK)
    assert window.chat.widgets()[-1].browser.code_blocks == ["print('hi')"]  # re-rendered, not lost
    with qtbot.assertNotEmitted(watcher.theme_changed):
        watcher.on_color_scheme_changed(Qt.ColorScheme.Dark)  # the same scheme again: nothing redone
    watcher.on_color_scheme_changed(Qt.ColorScheme.Light)
    _assert_shows(window, theme.LIGHT)


def test_a_forced_appearance_from_settings_wins_over_the_system(qtbot, watcher, make_window, settings):
    window = make_window(loaded=False)
    window.chat.add_message(ShownMessage("assistant", CODE_REPLY))
    dialog = SettingsDialog(settings, window)
    qtbot.addWidget(dialog)
    assert dialog.appearance.currentData() == "system"
    dialog.appearance.setCurrentIndex(dialog.appearance.findData("dark"))
    with qtbot.waitSignal(watcher.theme_changed):
        dialog.accept()
    assert settings.appearance() == "dark" and watcher.appearance() == "dark"
    _assert_shows(window, theme.DARK)
    with qtbot.assertNotEmitted(watcher.theme_changed):
        watcher.on_color_scheme_changed(Qt.ColorScheme.Light)  # the system says light: forced dark stays
    _assert_shows(window, theme.DARK)
    watcher.set_appearance("light")
    _assert_shows(window, theme.LIGHT)
    watcher.on_color_scheme_changed(Qt.ColorScheme.Dark)
    _assert_shows(window, theme.LIGHT)
    watcher.set_appearance("system")  # following the system again: it is dark now
    _assert_shows(window, theme.DARK)


def test_a_theme_change_event_is_the_fallback(qtbot, qapp, watcher, make_window):
    window = make_window(loaded=False)
    window.chat.add_message(ShownMessage("assistant", CODE_REPLY))
    scheme = [Qt.ColorScheme.Light]
    fallback = theme.ThemeWatcher(qapp, "system", read_scheme=lambda: scheme[0])
    try:
        fallback.watch(window)
        scheme[0] = Qt.ColorScheme.Dark  # a platform that says so only through a ThemeChange event
        with qtbot.waitSignal(fallback.theme_changed):
            QApplication.sendEvent(window, QEvent(QEvent.Type.ThemeChange))
        assert theme.current() is theme.DARK and _window_colour(window) == theme.DARK.window
        assert qapp.styleSheet() == theme.stylesheet(theme.DARK)
    finally:
        window.removeEventFilter(fallback)
        fallback.setParent(None)
        fallback.deleteLater()


def test_appearance_setting_round_trip_and_bad_values(tmp_path):
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert settings.appearance() == "system"
    settings.set_appearance("dark")
    assert settings.appearance() == "dark"
    settings._q.setValue("ui/appearance", "sepia")
    assert settings.appearance() == "system"
    with pytest.raises(ValueError):
        settings.set_appearance("sepia")
    with pytest.raises(ValueError):
        theme.watcher().set_appearance("sepia")


def test_matplotlib_figures_get_the_themes_colours():
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(theme.matplotlib_rc(theme.DARK)):
        figure = Figure()
        axes = figure.add_subplot()
    assert matplotlib.colors.to_hex(figure.get_facecolor()) == theme.DARK.surface
    assert matplotlib.colors.to_hex(axes.get_facecolor()) == theme.DARK.surface


def test_the_models_windows_fit_verdicts_and_refusal_follow_the_theme(qtbot, watcher):
    from app.library.fit_panel import FitPanel, verdict_colour
    from app.library.model_page import ModelPagePanel
    from engine.library.arch import Architecture
    from engine.library.fit import Memory

    panel = FitPanel()
    qtbot.addWidget(panel)
    arch = Architecture(source="config.json", model_type="llama", layers=30, hidden_size=576, heads=9, kv_heads=3,
                        head_dim=64, vocab_size=49152, context_length=8192, intermediate_size=1536,
                        tied_embeddings=True)
    panel.set_architecture(arch, "SmolLM2-135M", memory=Memory("cpu", 64 << 30, "test"))
    last = panel.table.columnCount() - 1

    def verdict_colours() -> set[str]:
        return {panel.table.item(r, last).foreground().color().name() for r in range(panel.table.rowCount())
                if panel.table.item(r, last).foreground().color().name() != theme.current().muted}

    assert verdict_colours() == {verdict_colour("fits").name()} and theme.current() is theme.LIGHT
    light = verdict_colours()
    watcher.on_color_scheme_changed(Qt.ColorScheme.Dark)
    assert verdict_colours() == {verdict_colour("fits").name()} != light  # repainted in the dark theme's green

    page = ModelPagePanel(runner=None)  # no page shown: nothing is fetched
    qtbot.addWidget(page)
    assert theme.DARK.error in page.refusal.styleSheet()
    watcher.on_color_scheme_changed(Qt.ColorScheme.Light)
    assert theme.LIGHT.error in page.refusal.styleSheet()
