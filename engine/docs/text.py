"""Bytes to text for the plain-text formats (.txt .md .csv .json, source code) and HTML to text with its headings.

Owns: telling text from binary, choosing the encoding, and flattening HTML to lines where each heading becomes a
Markdown heading (``## Title``) so the chunker cuts on it like on a .md file. Does not own: reading files (readers.py),
PDF and .docx (readers.py), cutting into passages (chunking.py).

Why a hand-written decode order rather than charset-normalizer alone: strict UTF-8 is tried first because a valid
UTF-8 file is almost never anything else, and detectors sometimes call short UTF-8 text cp1252. Only what is not
UTF-8 goes to charset-normalizer, and a GB2312/GBK verdict is decoded as GB18030 (their superset), so a character
outside GB2312 in a GBK file is not turned into a replacement mark. HTML uses the standard library's parser: the
few tags we act on (headings, blocks, script/style to drop) do not need an HTML5 tree builder.
"""

from __future__ import annotations

import codecs
from html.parser import HTMLParser

from charset_normalizer import from_bytes

from engine.errors import DocumentError

_SAMPLE = 64 * 1024  # bytes looked at for NUL and control characters: a binary file shows itself early
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
# Encodings whose superset decodes the same bytes the same way and more besides.
_SUPERSET = {"gb2312": "gb18030", "gbk": "gb18030", "cp936": "gb18030", "ascii": "utf-8"}


def decode(data: bytes, name: str) -> str:
    """``data`` as text, or ``DocumentError`` when it is binary; ``name`` is only for the message."""
    for bom, encoding in _BOMS:  # UTF-16/32 carry NULs, so their BOM is read before the binary test
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    sample = data[:_SAMPLE]
    if b"\x00" in sample or _control_share(sample) > 0.05:
        raise DocumentError(f"{name} is binary, not text: open it with the program that made it and save it as text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None or best.encoding is None:
        raise DocumentError(f"{name} is not text in any encoding we know: save it as UTF-8 and add it again")
    encoding = _SUPERSET.get(best.encoding.lower().replace("_", ""), best.encoding)
    return data.decode(encoding, errors="replace")


def _control_share(sample: bytes) -> float:
    """Share of C0 control bytes other than tab, newline, form feed and carriage return (text has next to none)."""
    if not sample:
        return 0.0
    controls = sum(1 for byte in sample if byte < 32 and byte not in (9, 10, 12, 13, 27))
    return controls / len(sample)


_BLOCKS = {"p", "div", "br", "li", "tr", "section", "article", "blockquote", "pre", "table", "ul", "ol", "hr",
           "header", "footer", "nav", "main", "aside", "figure", "dd", "dt"}
_SKIP = {"script", "style", "noscript", "template", "head"}


class _Flattener(HTMLParser):
    """Collects an HTML page's text: headings as ``#`` lines, a blank line at each block's end."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0
        self._title: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in _SKIP:
            self._skipping += 1
        elif len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in _BLOCKS:
            self.parts.append("\n\n" if tag != "br" else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif (len(tag) == 2 and tag[0] == "h" and tag[1] in "123456") or tag in _BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title.append(data)
        if not self._skipping:
            self.parts.append(data)

    def text(self) -> str:
        body = "".join(self.parts)
        lines = [" ".join(line.split()) for line in body.split("\n")]
        flat = "\n".join(lines)
        while "\n\n\n" in flat:
            flat = flat.replace("\n\n\n", "\n\n")
        flat = flat.strip()
        title = " ".join("".join(self._title).split())
        if title and not flat.startswith("#"):
            flat = f"# {title}\n\n{flat}"
        return flat


def html_to_text(markup: str) -> str:
    """An HTML page's visible text, headings as Markdown headings (``<h2>`` → ``## ``), scripts and styles dropped."""
    parser = _Flattener()
    parser.feed(markup)
    parser.close()
    return parser.text()
