"""Read one file into pages of text: .txt .md .csv .json, source code, .html, .pdf (page numbers kept), .docx.

Owns: which suffixes are read and how, the size limits, and turning every way a file can be bad (too large, binary,
encrypted or image-only PDF, a .docx zip bomb, a file that vanished) into one ``DocumentError`` line per file. Does not
own: decoding and HTML flattening (text.py), cutting into passages (chunking.py), walking folders or storing anything
(index.py, store.py).

Headings are kept as Markdown heading lines (``# Title``) whatever the format (HTML's ``<h1>``, .docx's "Heading 1"
style), so one chunker cuts every format on its structure. The libraries do the parsing (pypdf: the PDF text layer;
python-docx: paragraphs, styles, tables); the hand-written part is the checks around them, because neither refuses a
huge or hostile file by itself.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

from engine.docs.text import decode, html_to_text
from engine.errors import DocumentError, NoTextLayerError, printable
from engine.fmt import format_bytes, one_line

MB = 1 << 20  # limits in MiB, as format_bytes shows them

TEXT_SUFFIXES = frozenset("""
.txt .text .md .markdown .rst .org .csv .tsv .json .jsonl .ndjson .log .xml .yaml .yml .toml .ini .cfg .conf .tex
.py .pyi .js .mjs .cjs .ts .tsx .jsx .java .kt .kts .scala .c .h .cc .cpp .cxx .hpp .hh .cs .go .rs .rb .php .swift
.m .mm .sh .bash .zsh .fish .ps1 .bat .sql .r .lua .pl .pm .css .scss .less .vue .svelte .dart .zig .hs .ml .ex .exs
.clj .erl .jl .gradle .cmake .proto .graphql .ipynb
""".split())
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
SUPPORTED = TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf", ".docx"}


@dataclass(frozen=True)
class ReadLimits:
    """What a file may cost to read. A larger one is refused with its size, before its bytes are read."""

    max_file_bytes: int = 200 * MB  # a 1 GB log or PDF is refused; a 40-page report is a few MB
    # A .docx is a zip: its members' inflated sizes are checked against this before any is opened. Word documents
    # with pictures inflate to tens of MB; a zip bomb claims gigabytes from a few kilobytes.
    max_docx_inflated_bytes: int = 300 * MB
    max_docx_ratio: int = 200  # inflated/compressed of one large member: XML compresses ~10-20x, a bomb ~1000x


@dataclass(frozen=True)
class Page:
    """One page's text; ``number`` is the 1-based PDF page, None for formats without pages."""

    number: int | None
    text: str


@dataclass(frozen=True)
class Document:
    """A file read whole: its pages (one page numbered None for paged-less formats) and the hash of its bytes."""

    path: Path
    kind: str  # "text", "html", "pdf" or "docx"
    pages: tuple[Page, ...]
    sha256: str
    size: int  # bytes on disk

    @property
    def chars(self) -> int:
        return sum(len(page.text) for page in self.pages)


def is_supported(path: Path) -> bool:
    return path.suffix.lower() in SUPPORTED


def read_bytes(path: Path, limits: ReadLimits = ReadLimits()) -> bytes:
    """The file's bytes, or ``DocumentError``: over the size limit, vanished, unreadable, not a file."""
    name = printable(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise DocumentError(f"{name} is not a regular file")
        if size > limits.max_file_bytes:
            raise DocumentError(f"{name} is {format_bytes(size)}, over the {format_bytes(limits.max_file_bytes)} "
                                "limit for one document: split it into smaller files")
        with path.open("rb") as fh:
            data = fh.read(limits.max_file_bytes + 1)  # a file that grew since stat is still bounded
    except FileNotFoundError:
        raise DocumentError(f"{name} vanished before it could be read") from None
    except PermissionError:
        raise DocumentError(f"{name} cannot be read: permission denied") from None
    except OSError as exc:
        raise DocumentError(f"{name} cannot be read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > limits.max_file_bytes:
        raise DocumentError(f"{name} grew past the {format_bytes(limits.max_file_bytes)} limit while being read")
    return data


def read_document(path: Path, limits: ReadLimits = ReadLimits(), data: bytes | None = None) -> Document:
    """Read ``path`` (or its already-read ``data``) into pages; ``DocumentError`` with one line when it cannot be."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED:
        raise DocumentError(f"{printable(path)}: {suffix or 'files without a suffix'} is not a document type we read "
                            "(text, Markdown, HTML, CSV, JSON, source code, PDF, .docx)")
    if data is None:
        data = read_bytes(path, limits)
    if suffix == ".pdf":
        kind, pages = "pdf", _pdf_pages(data, printable(path))
    elif suffix == ".docx":
        kind, pages = "docx", (Page(None, _docx_text(data, printable(path), limits)),)
    elif suffix in HTML_SUFFIXES:
        kind, pages = "html", (Page(None, html_to_text(decode(data, printable(path)))),)
    else:
        kind, pages = "text", (Page(None, decode(data, printable(path))),)
    return Document(path=path, kind=kind, pages=pages, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def _pdf_pages(data: bytes, name: str) -> tuple[Page, ...]:
    # Lazy: pypdf costs ~0.2 s to import and most documents are not PDFs.
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # Many PDFs are encrypted with an empty user password (only printing or copying restricted): those open.
            try:
                opened = reader.decrypt("")
            except Exception:  # pypdf raises several types here (a missing AES backend among them)
                opened = 0
            if not opened:
                raise NoTextLayerError(f"{name} is encrypted with a password: no text layer we can read; "
                                       "save an unprotected copy and add that")
        pages = tuple(Page(number, (page.extract_text() or "").strip())
                      for number, page in enumerate(reader.pages, start=1))
    except DocumentError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError, zipfile.BadZipFile) as exc:
        # pypdf lets a malformed file's errors out as all of these; the first line says enough.
        raise DocumentError(f"{name} is not a readable PDF: {one_line(exc, max_chars=120)}") from None
    if not any(page.text for page in pages):
        raise NoTextLayerError(f"{name} has no text layer (scanned pages or images only): run OCR on it and add "
                               "the result")
    return tuple(page for page in pages if page.text)


def _docx_text(data: bytes, name: str, limits: ReadLimits) -> str:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise DocumentError(f"{name} is not a .docx (not a zip archive): open it in Word and save it again") from None
    with archive:
        _refuse_bomb(archive, name, limits)
    import docx  # lazy: python-docx pulls lxml
    from docx.table import Table

    try:
        # The declared sizes checked above bind what is inflated: zipfile stops a member at its declared size and
        # fails its CRC check if the data goes on.
        document = docx.Document(io.BytesIO(data))
        lines: list[str] = []
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                for row in block.rows:
                    cells = [" ".join(cell.text.split()) for cell in row.cells]
                    lines.append(" | ".join(cells))
                lines.append("")
                continue
            text = block.text.strip()
            if not text:
                continue
            lines.append(_heading_prefix(block.style.name if block.style is not None else "") + text)
            lines.append("")
    except DocumentError:
        raise
    except Exception as exc:  # python-docx and lxml raise many types on a damaged package
        raise DocumentError(f"{name} is not a readable .docx: {one_line(exc, max_chars=120)}") from None
    return "\n".join(lines).strip()


def _refuse_bomb(archive: zipfile.ZipFile, name: str, limits: ReadLimits) -> None:
    """``DocumentError`` when the archive would inflate past the limits: checked from the central directory, before
    a byte of any member is inflated."""
    total = 0
    for info in archive.infolist():
        total += info.file_size
        if info.file_size > 10 * MB and info.file_size > limits.max_docx_ratio * max(info.compress_size, 1):
            raise DocumentError(f"{name} is a zip bomb ({info.filename} inflates {format_bytes(info.compress_size)} "
                                f"to {format_bytes(info.file_size)}): not read")
    if total > limits.max_docx_inflated_bytes:
        raise DocumentError(f"{name} inflates to {format_bytes(total)}, over the "
                            f"{format_bytes(limits.max_docx_inflated_bytes)} limit for a .docx: not read")


def _heading_prefix(style: str) -> str:
    """"Heading 2" → "## ", "Title" → "# ", anything else → ""."""
    if style == "Title":
        return "# "
    if style.startswith("Heading "):
        level = style.removeprefix("Heading ").strip()
        if level.isdigit():
            return "#" * min(int(level), 6) + " "
    return ""
