"""The ‹ 2/3 › pager (``app.widgets.version_pager``) as a real widget: what it says, its keys, its place in a bubble."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.state.chat_messages import ShownMessage
from app.widgets.chat_view import MessageWidget
from app.widgets.version_pager import VersionPager, place_in


def test_the_pager_says_where_it_is_and_asks_for_versions_by_mouse_and_keyboard(qtbot):
    pager = VersionPager()
    qtbot.addWidget(pager)
    pager.set_position(2, 3)
    assert (pager.label.text(), pager.accessibleName()) == ("2/3", "Version 2 of 3")
    assert pager.previous_button.toolTip() and pager.next_button.accessibleName() == "Next version"
    chosen = []
    pager.version_chosen.connect(chosen.append)
    pager.previous_button.click()
    pager.next_button.click()
    for key in (Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_Home, Qt.Key.Key_End):
        qtbot.keyClick(pager.next_button, key)
    assert chosen == [1, 3, 1, 3, 1, 3]  # it only asks: the window shows the version and moves the pager
    pager.set_position(3, 3)
    assert pager.previous_button.isEnabled() and not pager.next_button.isEnabled()
    qtbot.keyClick(pager.previous_button, Qt.Key.Key_End)  # already the last: nothing asked
    pager.set_paging_enabled(False)  # a reply streams
    assert not pager.previous_button.isEnabled() and chosen == [1, 3, 1, 3, 1, 3]


def test_a_bubble_gets_one_pager_in_its_row_of_footer_and_actions(qtbot):
    bubble = MessageWidget(ShownMessage("assistant", "hi", 7, "12.0 tok/s", "eos"))
    qtbot.addWidget(bubble)
    pager = place_in(bubble)
    assert place_in(bubble) is pager and bubble.findChildren(VersionPager) == [pager]
    row = bubble.layout().itemAt(bubble.layout().count() - 1).layout()
    assert row.indexOf(pager) == 0 and row.indexOf(bubble.footer) == 1
