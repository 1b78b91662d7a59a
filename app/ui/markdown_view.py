"""Turn a reply's Markdown into a Qt document (code highlighted by pygments) and show text safely.

Owns ``render_markdown`` / ``render_plain`` (build a QTextDocument) and ``MessageBrowser``, a
read-only, auto-height text view for one message. Replies are Markdown with raw HTML disabled,
so a model cannot inject markup; user text is inserted as plain characters, never parsed. No
resource is ever loaded: every Markdown image becomes inert text (``[image: URL]``) as soon as it is
inserted, before any layout could ask for it, and every document built here is an ``InertDocument``
whose ``loadResource`` answers with a blank placeholder. (A plain ``QTextDocument``, or a
``QTextBrowser`` whose ``loadResource`` returns None, falls back to reading a local path itself: a
reply's ``![x](/dev/zero)`` read without bound.)
Fenced code blocks get a header with the language and a "Copy" anchor (``copy:<n>``) that puts
the block's source on the clipboard. Owns no layout of the conversation (``widgets.chat_view``).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name, guess_lexer
from pygments.util import ClassNotFound
from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication, QSizeF, QUrl, Qt, Signal, Slot
from PySide6.QtGui import (QColor, QDesktopServices, QGuiApplication, QImage, QPalette, QTextBlockFormat,
                           QTextCharFormat, QTextCursor, QTextDocument, QTextOption)
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QWidget

from app.ui import theme as themes

# GitHub dialect (tables, strikethrough, task lists) with every form of raw HTML switched off.
MARKDOWN_FEATURES = (QTextDocument.MarkdownFeature.MarkdownDialectGitHub
                     | QTextDocument.MarkdownFeature.MarkdownNoHTML)

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$", re.MULTILINE)


@dataclass(frozen=True)
class Segment:
    kind: str  # "markdown" | "code"
    text: str
    language: str = ""
    closed: bool = True  # False for a code block still streaming (no closing fence yet)
    start: int = 0  # offset of the segment (its opening fence, for code) in the text it was split from


IMAGE_LABEL = QT_TRANSLATE_NOOP("MessageBrowser", "[image: {}]")  # shown translated
_IMAGE_URL_SHOWN = 80  # characters of an image's URL shown in its placeholder text


class InertDocument(QTextDocument):
    """A text document that never loads a resource: not a file, not a URL, not a ``data:`` image."""

    def loadResource(self, kind: int, name: QUrl) -> object:  # noqa: N802 (Qt override)
        # Non-null, so Qt does not fall back to opening the path itself; 1×1 and transparent.
        placeholder = QImage(1, 1, QImage.Format.Format_ARGB32)
        placeholder.fill(0)
        return placeholder


def defuse_images(document: QTextDocument, start: int = 0) -> int:
    """Replace every image from ``start`` on with inert text naming its URL; returns how many there were."""
    replaced = 0
    block = document.findBlock(start)
    while block.isValid():
        images = []
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.position() + fragment.length() > start and fragment.charFormat().isImageFormat():
                images.append((fragment.position(), fragment.length(), fragment.charFormat()))
            it += 1
        for position, length, fmt in reversed(images):  # from the end, so earlier positions stay valid
            url = fmt.toImageFormat().name()
            shown = url if len(url) <= _IMAGE_URL_SHOWN else url[:_IMAGE_URL_SHOWN - 1] + "…"
            text_format = QTextCharFormat()
            text_format.setFontItalic(True)
            cursor = QTextCursor(document)
            cursor.setPosition(position)
            cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
            # One U+FFFC per image; a run of adjacent images with one format is one fragment.
            label = QCoreApplication.translate("MessageBrowser", IMAGE_LABEL).format(shown)
            cursor.insertText(" ".join([label] * length), text_format)
            replaced += length
        block = block.next()
    return replaced


def split_segments(text: str) -> list[Segment]:
    """Split Markdown into prose and fenced code blocks; an unclosed fence runs to the end (streaming)."""
    segments: list[Segment] = []
    pos = 0
    while True:
        opening = _FENCE.search(text, pos)
        if opening is None:
            break
        fence = opening.group("fence")
        if opening.start() > pos:
            segments.append(Segment("markdown", text[pos:opening.start()], start=pos))
        body_start = opening.end() + 1
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        close = closing.search(text, body_start) if body_start <= len(text) else None
        language = opening.group("info").strip().split(" ")[0] if opening.group("info").strip() else ""
        if close is None:
            segments.append(Segment("code", text[body_start:], language, closed=False, start=opening.start()))
            return segments
        segments.append(Segment("code", text[body_start:close.start()].rstrip("\n"), language,
                                start=opening.start()))
        pos = close.end() + 1
    if pos < len(text):
        segments.append(Segment("markdown", text[pos:], start=pos))
    return segments


def stable_prefix(text: str) -> int:
    """Length of the prefix of a streaming reply whose rendering more text cannot change: everything up
    to the last blank line outside code, or up to the last code block's opening fence."""
    segments = split_segments(text)
    if not segments:
        return 0
    last = segments[-1]
    if last.kind == "code":
        return last.start
    cut = text.rfind("\n\n", last.start)
    return cut + 2 if cut >= 0 else last.start


def highlight_html(code: str, language: str, style: str) -> str:
    """Inline-styled HTML spans (Qt's rich text understands ``style=`` but not CSS classes)."""
    try:
        lexer = get_lexer_by_name(language) if language else guess_lexer(code)
    except ClassNotFound:
        lexer = TextLexer()
    if not language and lexer.name in ("Text only", "Text output"):
        lexer = TextLexer()
    formatter = HtmlFormatter(nowrap=True, noclasses=True, style=style)
    return highlight(code, lexer, formatter).rstrip("\n")


def _auto_direction(cursor: QTextCursor, start: int = 0) -> None:
    """Let every paragraph from ``start`` on pick its own direction from its text (Arabic lines run right to left)."""
    fmt = QTextBlockFormat()
    fmt.setLayoutDirection(Qt.LayoutDirection.LayoutDirectionAuto)
    cursor.setPosition(start)
    cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
    cursor.mergeBlockFormat(fmt)
    cursor.clearSelection()


def render_plain(document: QTextDocument, text: str) -> None:
    """Show ``text`` exactly as typed: no Markdown, no HTML, nothing loaded."""
    document.clear()
    cursor = QTextCursor(document)
    cursor.insertText(text)
    _auto_direction(cursor)


def render_markdown(document: QTextDocument, text: str, theme: themes.Theme | None = None) -> list[str]:
    """Build ``document`` from a reply's Markdown; return the code blocks' sources (index = Copy anchor)."""
    document.clear()
    cursor = QTextCursor(document)
    codes: list[str] = []
    append_markdown(cursor, text, codes, theme or themes.current(), separate=False)
    _auto_direction(cursor)
    return codes


def _insert_markdown(cursor: QTextCursor, text: str, separate: bool) -> None:
    """insertMarkdown in a block of its own, so text rendered in pieces lays out like text rendered at once.

    Qt merges a fragment's first block into the (empty) block at the cursor and drops its block format
    (a heading would lose its level), or leaves that empty block behind (before a list): undo both.
    """
    document = cursor.document()
    if not separate:
        inserted_at = cursor.position()
        cursor.insertMarkdown(text, MARKDOWN_FEATURES)
        defuse_images(document, inserted_at)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return
    cursor.insertBlock(QTextBlockFormat())
    block_start = cursor.position()
    cursor.insertMarkdown(text, MARKDOWN_FEATURES)
    defuse_images(document, block_start)
    block = document.findBlock(block_start)
    following = block.next()
    if block.length() == 1 and following.isValid() and QTextCursor(following).currentTable() is None:
        eraser = QTextCursor(block)
        eraser.movePosition(QTextCursor.MoveOperation.NextBlock, QTextCursor.MoveMode.KeepAnchor)
        eraser.removeSelectedText()
    else:
        alone = InertDocument()  # only its first block's format is read; never laid out
        QTextCursor(alone).insertMarkdown(text, MARKDOWN_FEATURES)
        QTextCursor(block).setBlockFormat(alone.firstBlock().blockFormat())
    cursor.movePosition(QTextCursor.MoveOperation.End)


def append_markdown(cursor: QTextCursor, text: str, codes: list[str], theme: themes.Theme, separate: bool) -> bool:
    """Append ``text``'s blocks at ``cursor`` (a new block first when ``separate``); code sources go to
    ``codes``. Returns whether the document now ends with content (so the next append separates)."""
    for segment in split_segments(text):
        if segment.kind == "markdown":
            if not segment.text.strip():
                continue
            _insert_markdown(cursor, segment.text, separate)
        else:
            if separate:
                cursor.insertBlock(QTextBlockFormat())
            index = len(codes)
            codes.append(segment.text)
            label = html.escape(segment.language or QCoreApplication.translate("MessageBrowser", "code"))
            copy = html.escape(QCoreApplication.translate("MessageBrowser", "Copy"))
            body = highlight_html(segment.text, segment.language, theme.pygments_style) if segment.text else ""
            cursor.insertHtml(
                f'<table width="100%" cellspacing="0" cellpadding="8" style="background-color:{theme.code_background};'
                f' border: 1px solid {theme.border};">'
                f'<tr><td style="color:{theme.muted}; font-size:small;">{label}'
                f'&nbsp;&nbsp;&nbsp;<a href="copy:{index}" style="color:{theme.accent};">{copy}</a></td></tr>'
                f'<tr><td><pre style="font-family: \'DejaVu Sans Mono\', monospace;">{body}</pre></td></tr></table>')
            cursor.movePosition(QTextCursor.MoveOperation.End)
        separate = True
    return separate


class MessageBrowser(QTextBrowser):
    """A read-only, scroll-less text view whose height follows its content (one per chat message).

    Signals:
        copied(str): a code block's source was put on the clipboard (for a status-bar message).
    """

    copied = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDocument(InertDocument(self))
        self.setObjectName("messageText")  # the style sheet's focus ring (app.ui.theme)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setOpenLinks(False)  # every click goes through on_anchor_clicked: copy or an explicit web link
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        # A transparent base through the palette, not a per-widget style sheet: a style sheet on each of a
        # long chat's bubbles measured ~0.3 ms apiece to build, and re-polishes on every state change.
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Base, QColor(0, 0, 0, 0))
        self.setPalette(palette)
        option = self.document().defaultTextOption()
        option.setTextDirection(Qt.LayoutDirection.LayoutDirectionAuto)
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.document().setDefaultTextOption(option)
        self.document().setDocumentMargin(2)
        self._codes: list[str] = []
        self._text = ""
        self._markdown = False
        self._fitting = False
        # Streaming: the document holds the rendering of text[:_stable_chars] up to position _stable_pos;
        # only the tail after it is re-rendered when more text arrives (a full re-render of a 3 KB reply
        # measured ~90 ms per update on the shared CPU, the tail ~5 ms).
        self._stable_chars = 0
        self._stable_pos = 0
        self._stable_codes = 0
        self._stable_separate = False
        self.anchorClicked.connect(self.on_anchor_clicked)
        self.document().documentLayout().documentSizeChanged.connect(self.on_document_resized)

    @property
    def text(self) -> str:
        return self._text

    @property
    def code_blocks(self) -> list[str]:
        return list(self._codes)

    def rerender(self) -> None:
        """Render the text shown again from scratch: the theme changed, and code blocks carry its colours."""
        if self._markdown:
            self._markdown = False  # show_markdown then starts over instead of keeping its stable prefix
            self.show_markdown(self._text)

    def show_plain(self, text: str) -> None:
        self._text, self._markdown = text, False
        self._stable_chars = self._stable_pos = self._stable_codes = 0
        render_plain(self.document(), text)
        self._codes = []
        self._fit()

    def show_markdown(self, text: str) -> None:
        """Render ``text``; when it extends the text shown, only the part after the stable prefix is redone."""
        if not (self._markdown and text.startswith(self._text[:self._stable_chars])):
            self._stable_chars = self._stable_pos = self._stable_codes = 0
            self._stable_separate = False
            self.document().clear()
        self._text, self._markdown = text, True
        theme = themes.current()
        document = self.document()
        # The tail is removed, then written again: fit once, after both (fitting after each resized the
        # bubble twice per render, and the chat re-laid out twice, shrinking and growing, while streaming).
        self._fitting = True
        try:
            cursor = QTextCursor(document)
            cursor.setPosition(self._stable_pos)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            del self._codes[self._stable_codes:]
            redone_from = self._stable_pos
            boundary = stable_prefix(text)
            if boundary > self._stable_chars:
                self._stable_separate = append_markdown(cursor, text[self._stable_chars:boundary], self._codes,
                                                        theme, self._stable_separate)
                self._stable_chars = boundary
                self._stable_pos = document.characterCount() - 1
                self._stable_codes = len(self._codes)
            append_markdown(cursor, text[self._stable_chars:], self._codes, theme, self._stable_separate)
            _auto_direction(cursor, redone_from)
        finally:
            self._fitting = False
        self._fit()

    def loadResource(self, kind: int, name: QUrl) -> object:  # noqa: N802 (Qt override)
        """Never load anything: a reply must not make the app read a file or touch the network."""
        return self.document().loadResource(kind, name)

    @Slot(QUrl)
    def on_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            try:
                code = self._codes[int(url.path())]
            except (ValueError, IndexError):
                return
            QGuiApplication.clipboard().setText(code)
            self.copied.emit(code)
        elif url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)  # only on an explicit click, never automatically

    @Slot(QSizeF)
    def on_document_resized(self, _size: QSizeF) -> None:
        self._fit()

    def _fit(self) -> None:
        if self._fitting:
            return  # setTextWidth re-emits documentSizeChanged synchronously; one pass is enough
        self._fitting = True
        try:
            width = self.viewport().width()
            if width > 0 and self.document().textWidth() != width:
                self.document().setTextWidth(width)
            height = int(self.document().size().height()) + 2 * self.frameWidth() + 2
            if height != self.height():
                self.setFixedHeight(height)
        finally:
            self._fitting = False

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._fit()
