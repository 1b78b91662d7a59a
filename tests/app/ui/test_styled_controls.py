"""The app's real style sheet draws every control readably, read from the pixels of the real window, in light and
dark, English and Chinese: a drop-down's highlighted entry shows its text on the selection colour, spin boxes
show their arrows, and a disabled button looks disabled (the Lab's Export before there is a result).

The checks read colours, not glyph shapes, so they hold whether or not a CJK font is installed (missing glyphs
still draw ink).
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication, QComboBox, QStyle, QStyleOptionSpinBox

from app.ui import theme
from app.widgets.settings_dialog import SettingsDialog
from tests.app._gui_fixtures import make_window, settings, store, styled  # noqa: F401 (fixtures)
from tests.app.ui.test_i18n import chinese, zh_translations  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints", "raise", "grabbing"),
              pytest.mark.qt_log_level_fail("WARNING")]


@pytest.fixture(params=["en", "zh_CN"])
def language(request):
    if request.param == "zh_CN":
        request.getfixturevalue("chinese")
    return request.param


@pytest.fixture(params=[False, True], ids=["light", "dark"])
def shown_theme(request, qapp, styled) -> theme.Theme:
    return theme.apply(qapp, dark=request.param)  # the styled fixture restores the style afterwards


def _distance(a: QColor, b: QColor) -> int:
    return abs(a.red() - b.red()) + abs(a.green() - b.green()) + abs(a.blue() - b.blue())


def _ink(image: QImage, rect: QRect, background: QColor, far: int = 120) -> int:
    """Pixels of ``rect`` far from ``background``: the text (or arrow) drawn on it."""
    return sum(1 for x in range(rect.left(), rect.right() + 1) for y in range(rect.top(), rect.bottom() + 1)
               if _distance(image.pixelColor(x, y), background) > far)


def _highlighted_row(qtbot, combo: QComboBox, row: int) -> tuple[QImage, QRect]:
    """Open ``combo``'s list, move the highlight to ``row`` (what hovering does) and grab the list."""
    combo.showPopup()
    view = combo.view()
    qtbot.waitUntil(view.isVisible)
    view.setCurrentIndex(combo.model().index(row, 0))
    QApplication.processEvents()
    popup = view.window()  # the whole popup as drawn, whichever kind of list the style makes
    image = popup.grab().toImage()
    rect = view.visualRect(combo.model().index(row, 0))
    rect.moveTopLeft(view.viewport().mapTo(popup, rect.topLeft()))
    assert image.devicePixelRatio() == 1.0 and image.rect().contains(rect.center()), (image.size(), rect)
    return image, rect.intersected(image.rect())


def test_every_drop_down_shows_its_highlighted_entry(qtbot, shown_theme, language, make_window):
    window = make_window(loaded=False)
    window.side_tabs.setCurrentWidget(window.lab_tab)
    accent = QColor(shown_theme.accent)
    combos = {"precision": window.model_bar.precision_combo, "device": window.model_bar.device_combo,
              "experiment": window.lab_tab.experiment_box}
    for name, combo in combos.items():
        assert combo.count() >= 2, name
        for row in (combo.currentIndex(), (combo.currentIndex() + 1) % combo.count()):  # the current, a hovered one
            image, rect = _highlighted_row(qtbot, combo, row)
            fill = image.pixelColor(rect.right() - 6, rect.center().y())  # right of any text
            assert _distance(fill, accent) < 30, (name, row, fill.name())  # the highlight is drawn
            ink = _ink(image, rect, fill)
            assert ink >= 15, (name, row, combo.itemText(row), ink)  # and the entry's text shows on it
            combo.hidePopup()
            qtbot.waitUntil(lambda: not combo.view().isVisible())


def _arrow_shown(image: QImage, rect: QRect, background: QColor) -> bool:
    """An arrow is ink at the middle of its button (an empty box has its ink only on its edges)."""
    centre = rect.center()
    middle = QRect(centre - QPoint(2, 2), centre + QPoint(2, 2))
    return _ink(image, middle, background, far=90) >= 3


def test_spin_boxes_show_their_arrows(qtbot, shown_theme, language, settings, make_window):
    window = make_window(loaded=False)
    dialog = SettingsDialog(settings, window)
    qtbot.addWidget(dialog)
    dialog.show()
    window.side_tabs.setCurrentWidget(window.lab_tab)
    window.lab_tab.select("attention")  # its layer and head spin boxes show
    spins = {"temperature": dialog.temperature, "top_k": dialog.top_k, "seed": dialog.seed,
             "layer": window.lab_tab.layer_spin}
    surface = QColor(shown_theme.surface)
    for name, spin in spins.items():
        spin.setRange(0, 10)
        spin.setValue(5)  # neither end: both arrows are live
        QApplication.processEvents()
        image = spin.grab().toImage()
        assert image.devicePixelRatio() == 1.0
        option = QStyleOptionSpinBox()
        spin.initStyleOption(option)
        for part in (QStyle.SubControl.SC_SpinBoxUp, QStyle.SubControl.SC_SpinBoxDown):
            rect = spin.style().subControlRect(QStyle.ComplexControl.CC_SpinBox, option, part, spin)
            assert rect.width() >= 12 and rect.height() >= 8, (name, part, rect)
            assert _arrow_shown(image, rect, surface), (name, part)


def test_the_labs_export_is_off_and_looks_off_until_there_is_a_result(qtbot, shown_theme, language, make_window):
    window = make_window(loaded=False)
    window.side_tabs.setCurrentWidget(window.lab_tab)
    lab = window.lab_tab
    assert lab.result is None
    enabled = window.conversations.new_button
    assert enabled.isEnabled()
    for button in (lab.export_csv_button, lab.export_png_button):
        assert not button.isEnabled()
        off, on = button.grab().toImage(), enabled.grab().toImage()
        inside_off = off.pixelColor(6, off.height() // 2)
        inside_on = on.pixelColor(6, on.height() // 2)
        # Enabled buttons are filled with the surface colour; a disabled one with the window's, so it reads as off.
        assert inside_on.name() == shown_theme.surface and inside_off.name() == shown_theme.window, \
            (inside_on.name(), inside_off.name())


def test_the_labs_empty_chart_takes_the_themes_colour(qtbot, qapp, styled, make_window):
    window = make_window(loaded=False)
    window.side_tabs.setCurrentWidget(window.lab_tab)
    canvas = window.lab_tab.canvas
    for dark in (True, False):  # the theme changing while the app runs, before any result
        shown = theme.watcher()
        shown.set_appearance("dark" if dark else "light")
        expected = theme.current().surface
        qtbot.waitUntil(lambda: canvas.grab().toImage().pixelColor(10, 10).name() == expected, timeout=5000)
    theme.watcher().set_appearance("system")
