"""Chat rendering: user text shown as typed, replies as Markdown with highlighted, copyable code, nothing loaded."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QUrl, Qt
from PySide6.QtGui import QGuiApplication

from app.ui.markdown_view import MessageBrowser, split_segments
from app.widgets.chat_view import PAGE, ChatView, MessageWidget, ShownMessage

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]

HOSTILE = '<b>bold?</b> **not bold** <img src="http://example.invalid/x.png"> <script>alert(1)</script>'


def _browser(qtbot) -> MessageBrowser:
    browser = MessageBrowser()
    qtbot.addWidget(browser)
    browser.resize(500, 100)
    return browser


def test_user_text_is_shown_exactly_as_typed(qtbot):
    browser = _browser(qtbot)
    text = HOSTILE + "\n# not a heading\n我昨天认识的那个人 😀"
    browser.show_plain(text)
    assert browser.toPlainText() == text
    block = browser.document().begin()
    while block.isValid():  # no heading, no bold character, no image object anywhere
        assert block.blockFormat().headingLevel() == 0
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            assert fmt.fontWeight() <= 400 and not fmt.isImageFormat() and not fmt.isAnchor()
            it += 1
        block = block.next()


def test_right_to_left_paragraph_runs_right_to_left(qtbot):
    browser = _browser(qtbot)
    browser.show_plain("Hello\nمرحبا بالعالم")
    assert browser.document().firstBlock().textDirection() == Qt.LayoutDirection.LeftToRight
    assert browser.document().lastBlock().textDirection() == Qt.LayoutDirection.RightToLeft


def test_reply_markdown_renders_but_raw_html_does_not(qtbot):
    browser = _browser(qtbot)
    browser.show_markdown("# Title\n\nSome **bold** text. " + HOSTILE)
    plain = browser.toPlainText()
    assert plain.startswith("Title")
    assert "**" not in plain.split("\n")[1].split("<b>")[0]  # Markdown was interpreted …
    assert "<b>bold?</b>" in plain and "<script>" in plain  # … raw HTML was kept as text
    assert browser.document().firstBlock().blockFormat().headingLevel() == 1
    # Nothing is ever fetched: a blank 1×1 placeholder, not None (on None Qt reads the file itself, issue 18).
    placeholder = browser.loadResource(2, QUrl("file:///etc/passwd"))
    assert placeholder.width() == placeholder.height() == 1


def test_code_blocks_are_highlighted_and_copyable(qtbot):
    browser = _browser(qtbot)
    code = "def add(a, b):\n    return a + b"
    browser.show_markdown(f"Here:\n\n```python\n{code}\n```\n\nDone.")
    assert browser.code_blocks == [code]
    colours = set()
    block = browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            colours.add(it.fragment().charFormat().foreground().color().name())
            it += 1
        block = block.next()
    assert len(colours) >= 3  # pygments coloured keywords, names and operators differently
    with qtbot.waitSignal(browser.copied) as copied:
        browser.on_anchor_clicked(QUrl("copy:0"))
    assert copied.args == [code]
    assert QGuiApplication.clipboard().text() == code


def test_streaming_unclosed_fence_is_code_until_closed():
    segments = split_segments("Intro\n```py\nprint(1)\n")
    assert [s.kind for s in segments] == ["markdown", "code"] and not segments[1].closed
    segments = split_segments("Intro\n```py\nprint(1)\n```\nAfter")
    assert [s.kind for s in segments] == ["markdown", "code", "markdown"] and segments[1].closed


def test_streaming_touches_only_the_reply_being_written(qtbot, monkeypatch):
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    history = [ShownMessage("user" if i % 2 == 0 else "assistant", f"message {i} 中文 😀", i) for i in range(200)]
    view.set_messages(history)
    assert view.messages() == history and len(view.widgets()) == PAGE  # the newest page is built
    rendered: list[MessageWidget] = []
    original = MessageWidget.show_message
    monkeypatch.setattr(MessageWidget, "show_message", lambda self, m: (rendered.append(self), original(self, m)))
    reply = view.begin_reply()
    for piece in ("Hello", " **world**", "\n\n```py\nx = 1\n", "```\n"):
        view.append_to_reply(piece)
    assert set(rendered) == {reply}  # 199 older bubbles were never re-rendered
    assert view.reply_text() == "Hello **world**\n\n```py\nx = 1\n```\n"
    view.finish_reply(view.reply_text(), "41.8 tok/s · TTFT 86 ms", "cancelled", 9)
    assert reply.footer.text() == "41.8 tok/s · TTFT 86 ms · stopped"
    assert not view.is_streaming()


def test_a_long_chat_builds_its_newest_page_and_the_rest_on_request(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    history = [ShownMessage("user" if i % 2 == 0 else "assistant", f"message {i}", i) for i in range(2 * PAGE + 10)]
    view.set_messages(history)
    assert [w.message for w in view.widgets()] == history[-PAGE:]
    button = view._earlier_button
    assert not button.isHidden() and button.text() == f"Show {PAGE} earlier messages ({PAGE + 10} not shown)"
    qtbot.waitUntil(lambda: view.verticalScrollBar().value() == view.verticalScrollBar().maximum() > 0)
    view.verticalScrollBar().setValue(0)  # the user scrolled to the top and asks for more
    top_message = view.widgets()[0]
    y_before = top_message.mapTo(view.viewport(), top_message.rect().topLeft()).y()
    button.click()
    assert [w.message for w in view.widgets()] == history[-2 * PAGE:]
    assert button.text() == "Show 10 earlier messages (10 not shown)"
    y_after = top_message.mapTo(view.viewport(), top_message.rect().topLeft()).y()
    assert abs(y_after - y_before) < 30  # what the user was reading stayed in place; the new page is above
    button.click()
    assert view.messages() == history and len(view.widgets()) == len(history) and button.isHidden()
    # Indices always count the whole conversation, built or not.
    view.set_messages(history)
    with qtbot.waitSignal(view.edit_requested) as edit:
        view.widgets()[0]._buttons["edit"].click()
    assert edit.args == [PAGE + 10]
    view.set_message_id(3, 99)
    assert view.messages()[3].message_id == 99
    view.remove_from(5)  # an edit of an old message that was never built
    assert view.messages() == [*history[:3], ShownMessage("assistant", "message 3", 99), history[4]]
    assert len(view.widgets()) == 5 and view._earlier_button.isHidden()  # never only the button on screen


def test_actions_follow_the_conversation(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.set_messages([ShownMessage("user", "hi", 1), ShownMessage("assistant", "cut", 2, finish_reason="length")])
    user, reply = view.widgets()
    assert not user._buttons["edit"].isHidden() and not reply._buttons["regenerate"].isHidden()
    assert not reply._buttons["continue"].isHidden()
    with qtbot.waitSignal(view.edit_requested) as edit:
        user._buttons["edit"].click()
    assert edit.args == [0]
    view.set_actions_enabled(False)  # while a reply streams
    assert not user._buttons["edit"].isEnabled() and not reply._buttons["regenerate"].isEnabled()
    view.remove_from(1)
    assert [m.text for m in view.messages()] == ["hi"]


def test_a_huge_paste_is_previewed_not_laid_out_whole(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    text = "粘贴 paste\x00 " * 100_000  # ~1 MB with NUL bytes
    widget = view.add_message(ShownMessage("user", text))
    assert widget.message.text == text  # the message keeps every character …
    shown = widget.browser.toPlainText()
    assert len(shown) < 21_000 and shown.endswith("more characters not shown here]")  # … the bubble a preview


STREAMED = ("Para one.\n\n- item one\n- item *two*\n\nPara two.\n\n# Head\n\n1. a\n2. b\n\n## Sub\n\ntext **bold**\n\n"
            "```python\nx = 1\n```\n\nمرحبا بالعالم\n\n> quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nend")


def _blocks(document) -> list[tuple]:
    block, out = document.begin(), []
    while block.isValid():
        out.append((block.text(), block.textList() is not None, block.blockFormat().headingLevel()))
        block = block.next()
    return out


def test_a_streaming_bubble_is_resized_at_most_once_per_render_and_never_shrinks(qtbot):
    # Each render removes the tail and writes it again; fitting after each step shrank the bubble and grew it
    # back (two resizes and two re-layouts of the chat per render, while the engine decodes beside it).
    browser = _browser(qtbot)
    browser.show()
    heights: list[list[int]] = []
    browser.setFixedHeight = lambda h, _set=browser.setFixedHeight: (heights[-1].append(h), _set(h))
    for end in range(5, len(STREAMED) + 5, 5):
        heights.append([])
        browser.show_markdown(STREAMED[:end])
    assert all(len(h) <= 1 for h in heights)
    grown = [h[0] for h in heights if h]
    assert len(grown) > 3 and grown == sorted(grown)


@pytest.mark.parametrize("step", [1, 9])
def test_streamed_rendering_equals_rendering_at_once(qtbot, step):
    from PySide6.QtGui import QTextDocument

    from app.ui.markdown_view import render_markdown

    streamed = _browser(qtbot)
    for end in range(step, len(STREAMED) + step, step):
        streamed.show_markdown(STREAMED[:end])  # only the tail after the last blank line is re-rendered
    whole = QTextDocument()
    codes = render_markdown(whole, STREAMED)
    assert _blocks(streamed.document()) == _blocks(whole)
    assert streamed.code_blocks == codes == ["x = 1"]
