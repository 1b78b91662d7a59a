"""The window's helpers built from typed parts (``app.window.wiring``): a plain ``QMainWindow`` stands where the main
window was, so no helper can be reaching for anything of ``MainWindow``'s (but the three attributes the allow-listed
``app.runtime.api_serving`` still reads); the real bridge, controller, store and widgets, no model loaded."""

from __future__ import annotations

from typing import Iterator

import pytest
from PySide6.QtWidgets import QMainWindow, QMenu

from app.runtime.bridge import Bridge
from app.state.settings import Settings
from app.widgets.chat_view import ChatView
from app.widgets.conversation_list import ConversationList
from app.widgets.message_area import MessageArea
from app.widgets.model_bar import ModelBar
from app.widgets.prompt_box import Composer
from app.widgets.side_panel import SidePanel
from app.window import layout, wiring
from app.window.controller import ChatController
from tests.app._gui_fixtures import settings, store  # noqa: F401

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints")]


class _ServedWindow(QMainWindow):
    """A plain window with what ``ApiServing`` (app/runtime/, the engine-core branch's, allow-listed) still reads of
    the window: its settings, bridge and message strip. Nothing else of ``MainWindow`` is here."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings, self.bridge, self.messages = settings, Bridge(self), MessageArea(self.statusBar())


@pytest.fixture
def parts(qtbot, settings, store) -> Iterator[wiring.Parts]:  # noqa: F811
    window = _ServedWindow(settings)
    qtbot.addWidget(window)
    bridge = window.bridge
    controller = ChatController(settings, store, bridge, window)
    status = window.statusBar()
    state, progress = layout.status_widgets(status)[3:]
    yield wiring.Parts(window, settings, store, bridge, controller, ChatView(), Composer(), window.messages,
                       SidePanel(bridge, window, controller).perf_panel, ConversationList(store), ModelBar(settings),
                       status, state, progress)
    assert controller.shutdown(5000) is True


def test_the_helpers_need_only_their_parts_and_report_by_signals(qtbot, parts, store):  # noqa: F811
    menu = QMenu()
    m = wiring.menu_helpers(parts, menu)
    h = wiring.model_helpers(parts)
    c = wiring.chat_helpers(parts, h.attachments, m.collections)
    # The Chat menu's entries, in the order the helpers were built.
    assert [a.text() for a in menu.actions() if not a.isSeparator()] == [
        "Collections…", "Serve this model (OpenAI API)", "API port…", "Parallel API requests…", "Complete text…",
        "Import ChatGPT export…", "Tools…"]
    assert parts.status_bar.isAncestorOf(h.thinking_switch)
    # A fork reports the conversation to list (the window's slot) and the fork itself; it needs no window for either.
    cid = store.create_conversation()
    store.add_message(cid, "user", "Hello")
    parts.controller.open(cid)
    listed: list[object] = []
    c.forker.listed.connect(listed.append)
    with qtbot.waitSignal(c.forker.forked) as forked:
        new = c.forker.fork(0)
    assert new is not None and listed == [new] and forked.args == [new, cid]
    assert parts.controller.conversation_id == new and "fork" in store.get_conversation(new).title
