"""Tinting the accepted speculative drafts of a reply while it streams: ``DraftTint``.

Speculative decoding (``engine.speculate``) marks each token it kept from a draft (``Token.drafted``: it came without
a forward pass of its own). This paints those tokens' text with the theme's ``draft_tint`` behind it, as the
browser's extra selections (``QTextEdit.setExtraSelections``): they overlay the rendered document without changing
it, so copying, markdown and the final render stay as they are. The reply is rendered markdown, whose text differs
from the tokens' (markup is gone), so each token's text is looked up in the rendered text in order, a short way
ahead of the previous one; a token found nowhere near (markup) is skipped, never matched far away.

Owns the tint of the last reply only (a new reply starts over, off clears it). Not what a token is (the engine's)
nor the rendering (``app.ui.markdown_view``).
"""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextEdit

from app.ui import theme as themes

LOOKAHEAD = 48  # characters past the last match a token's text may start at: markup, a code fence, spacing


class DraftTint(QObject):
    """The drafted tokens of the reply being shown in ``browser``; re-applied whenever its document changes."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.enabled = True
        self._browser: QTextEdit | None = None
        self._tokens: list[tuple[str, bool]] = []  # (text, drafted) in reply order
        self._apply_soon = QTimer(self)
        self._apply_soon.setSingleShot(True)
        self._apply_soon.setInterval(0)  # after the render that changed the document, once per burst
        self._apply_soon.timeout.connect(self.apply)
        themes.watcher().theme_changed.connect(self.on_theme_changed)

    def begin(self, browser: QTextEdit) -> None:
        """A new reply streams into ``browser``: the previous reply's tint goes."""
        self.clear()
        self._browser = browser
        browser.document().contentsChanged.connect(self._apply_soon.start)

    def add_tokens(self, tokens: Sequence[Any]) -> None:
        """``engine.events.Token`` events of the reply, in order (the answer's: a thought's are not shown here)."""
        self._tokens += [(t.text, bool(getattr(t, "drafted", False))) for t in tokens if t.text]
        self._apply_soon.start()

    def set_enabled(self, on: bool) -> None:
        self.enabled = on
        self.apply()

    def clear(self) -> None:
        if self._browser is not None:
            try:
                self._browser.document().contentsChanged.disconnect(self._apply_soon.start)
                self._browser.setExtraSelections([])
            except RuntimeError:  # the bubble is gone (another conversation shown)
                pass
        self._browser, self._tokens = None, []

    def spans(self) -> list[tuple[int, int]]:
        """(start, end) of the tinted runs in the rendered document's text."""
        if self._browser is None:
            return []
        text = self._browser.document().toPlainText()
        spans: list[tuple[int, int]] = []
        at = 0
        for token, drafted in self._tokens:
            piece = token.strip()
            if not piece:
                continue
            found = text.find(piece, at, at + LOOKAHEAD + len(piece))
            if found < 0:
                continue
            end = found + len(piece)
            if drafted:
                if spans and found - spans[-1][1] <= len(token) - len(piece) + 1:  # the space between: one run
                    spans[-1] = (spans[-1][0], end)
                else:
                    spans.append((found, end))
            at = end
        return spans

    def apply(self) -> None:
        browser = self._browser
        if browser is None:
            return
        try:
            selections = []
            if self.enabled:
                fmt = QTextCharFormat()
                fmt.setBackground(QColor(themes.current().draft_tint))
                for start, end in self.spans():
                    selection = QTextEdit.ExtraSelection()
                    selection.cursor = QTextCursor(browser.document())
                    selection.cursor.setPosition(start)
                    selection.cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
                    selection.format = fmt
                    selections.append(selection)
            browser.setExtraSelections(selections)
        except RuntimeError:  # the bubble was deleted under us
            self._browser, self._tokens = None, []

    def on_theme_changed(self, _theme: themes.Theme) -> None:
        self.apply()
