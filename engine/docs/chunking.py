"""Cut a read document into passages on its structure: headings, then paragraphs, then sentences (。！？ too).

Owns: the passage bound and the order of cuts. A passage never spans two pages (its page number is exact) nor two
sections (its heading path is exact); paragraphs are packed together up to the bound; a paragraph over the bound is cut
between sentences, and a sentence over the bound between lines or words (or anywhere, for text without spaces). Does
not own: reading files (readers.py), tokenizing for a model (the embedder truncates at its own window).

Why hand-written: the splitters in RAG libraries (LangChain's RecursiveCharacterTextSplitter and the like) come with
large dependency trees and cut English sentences only; ours needs Chinese sentence ends and heading paths. The bound is
in estimated tokens rather than characters because a Chinese character costs about one token where English costs
about a quarter of one per character: a 1000-character bound would give Chinese passages four times too long for the
embedder's 256-token window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.docs.readers import Document

_HEADING = re.compile(r"^(#{1,6})\s+(\S.*?)\s*#*\s*$")
# A sentence ends at 。！？ (with any closing quotes or brackets after it), or at . ! ? followed by white space.
_SENTENCE_END = re.compile(r"[。！？!?…]+[”’」』）)\]]*|[.!?;]+[\"')\]]*(?=\s)")
_CJK = re.compile(r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
HEADING_FORMATS = frozenset({"html", "docx"})  # their readers write headings as Markdown lines
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})


@dataclass(frozen=True)
class ChunkConfig:
    """The passage bound."""

    # all-MiniLM-L6-v2 reads 256 word pieces; 200 estimated tokens leaves room for the estimate's error and the
    # heading path that is embedded with the text.
    max_tokens: int = 200


@dataclass(frozen=True)
class Passage:
    """One retrievable piece of a document."""

    ordinal: int  # its place in the document, from 0
    page: int | None  # the PDF page it is on; None where the format has no pages
    heading: str  # the heading path it sits under ("Setup › Linux"), "" before the first heading
    text: str


def estimate_tokens(text: str) -> int:
    """A model-free token estimate: one per CJK character, one per four other characters (BPE and WordPiece on
    English prose average about that)."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


def chunk(document: Document, config: ChunkConfig = ChunkConfig()) -> list[Passage]:
    """``document``'s passages in reading order."""
    headings = document.kind in HEADING_FORMATS or document.path.suffix.lower() in MARKDOWN_SUFFIXES
    passages: list[Passage] = []
    path: list[tuple[int, str]] = []  # the open headings: (level, title)
    for page in document.pages:
        buffer: list[str] = []

        def flush() -> None:
            text = "\n\n".join(buffer).strip()
            buffer.clear()
            if text:
                passages.append(Passage(len(passages), page.number, " › ".join(t for _, t in path), text))

        for block in _blocks(page.text, headings):
            match = _HEADING.match(block) if headings and "\n" not in block else None
            if match:
                flush()
                level = len(match.group(1))
                path[:] = [(lvl, title) for lvl, title in path if lvl < level] + [(level, match.group(2))]
                continue
            for piece in _pieces(block, config.max_tokens):
                if buffer and estimate_tokens("\n\n".join(buffer + [piece])) > config.max_tokens:
                    flush()
                buffer.append(piece)
        flush()
    return passages


def _blocks(text: str, headings: bool) -> list[str]:
    """Paragraphs (blank-line separated); with ``headings``, each heading line a block of its own."""
    blocks: list[str] = []
    current: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line.strip():
            if current:
                blocks.append("\n".join(current).strip())
                current = []
        elif headings and _HEADING.match(line.strip()):
            if current:
                blocks.append("\n".join(current).strip())
                current = []
            blocks.append(line.strip())
        else:
            current.append(line.rstrip())
    if current:
        blocks.append("\n".join(current).strip())
    return [block for block in blocks if block]


def _pieces(block: str, max_tokens: int) -> list[str]:
    """``block`` whole when it fits, else its sentences packed up to the bound, a long sentence cut further."""
    if estimate_tokens(block) <= max_tokens:
        return [block]
    pieces: list[str] = []
    for sentence in split_sentences(block):
        if estimate_tokens(sentence) <= max_tokens:
            if pieces and estimate_tokens(pieces[-1] + " " + sentence) <= max_tokens:
                pieces[-1] = _join(pieces[-1], sentence)
            else:
                pieces.append(sentence)
        else:
            pieces.extend(_hard_split(sentence, max_tokens))
    return pieces


def split_sentences(text: str) -> list[str]:
    """``text`` cut after each sentence end (。！？ or . ! ? before white space), ends kept, blanks dropped."""
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append(text[start:match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [sentence for sentence in sentences if sentence]


def _join(left: str, right: str) -> str:
    """Two sentences joined as the source had them: no space between Chinese sentences."""
    return left + right if _CJK.match(right[:1]) or _CJK.match(left[-1:]) else f"{left} {right}"


def _hard_split(text: str, max_tokens: int) -> list[str]:
    """``text`` in pieces under the bound, cut at the last newline or space before it where there is one."""
    pieces: list[str] = []
    rest = text
    while estimate_tokens(rest) > max_tokens:
        cut = _longest_prefix(rest, max_tokens)
        window = rest[:cut]
        at = max(window.rfind("\n"), window.rfind(" "))
        if at > cut // 2:  # a break in the second half: cut there rather than inside a word
            cut = at + 1
        pieces.append(rest[:cut].strip())
        rest = rest[cut:]
    if rest.strip():
        pieces.append(rest.strip())
    return [piece for piece in pieces if piece]


def _longest_prefix(text: str, max_tokens: int) -> int:
    """The largest n with ``estimate_tokens(text[:n]) <= max_tokens`` (at least 1), by bisection."""
    low, high = 1, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(text[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return low
