"""DraftTint on a real reply browser: the accepted drafts' words are tinted in the rendered Markdown (markup skipped,
never matched far away), off clears the tint, and the tint keeps the text readable in both themes (WCAG 4.5:1)."""

from __future__ import annotations

from PySide6.QtGui import QColor

from app.ui import theme
from app.ui.markdown_view import MessageBrowser
from app.widgets.draft_tint import DraftTint
from engine.events import Token


def tokens(*parts: tuple[str, bool]) -> list[Token]:
    return [Token(i, i, text, 0.0, None, drafted=drafted) for i, (text, drafted) in enumerate(parts)]


def test_drafted_words_are_tinted_in_the_rendered_markdown(qtbot):
    browser = MessageBrowser()
    qtbot.addWidget(browser)
    tint = DraftTint()
    tint.begin(browser)
    browser.show_markdown("Use **apple** and banana here")
    tint.add_tokens(tokens(("Use", False), (" **", False), ("apple", True), ("**", False), (" and", False),
                           (" banana", True), (" here", True)))
    text = browser.document().toPlainText()
    assert [text[a:b] for a, b in tint.spans()] == ["apple", "banana here"]  # one run across the space
    qtbot.waitUntil(lambda: len(browser.extraSelections()) == 2, timeout=2000)
    tint.set_enabled(False)
    assert browser.extraSelections() == []
    tint.set_enabled(True)
    assert len(browser.extraSelections()) == 2
    tint.begin(MessageBrowser())  # the next reply: the last one's tint goes
    assert browser.extraSelections() == []


def test_a_token_not_found_nearby_is_skipped_not_matched_far_away(qtbot):
    browser = MessageBrowser()
    qtbot.addWidget(browser)
    tint = DraftTint()
    tint.begin(browser)
    browser.show_markdown("alpha " + "x " * 60 + "omega")
    tint.add_tokens(tokens(("alpha", False), ("omega", True)))
    assert tint.spans() == []


def _luminance(colour: str) -> float:
    c = QColor(colour)
    def linear(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    return 0.2126 * linear(c.redF()) + 0.7152 * linear(c.greenF()) + 0.0722 * linear(c.blueF())


def test_the_tint_keeps_text_readable_in_light_and_dark():
    for t in (theme.LIGHT, theme.DARK):
        high, low = sorted((_luminance(t.text), _luminance(t.draft_tint)), reverse=True)
        assert (high + 0.05) / (low + 0.05) >= 4.5, t.name
        assert t.draft_tint.lower() != t.assistant_bubble.lower()  # visible against the reply's own background
