"""Real documents for the documents lab and benchmarks: Vim's tutor in English and Chinese, cut and laid out as pages.

Owns: where the texts are (``engine/bench/data``, with their licence), cutting a text to about N characters at a
line end, and laying text out as PDF pages (a PDF with a real text layer, written by hand: pypdf cannot lay out text
and no PDF writer is a dependency). Does not own reading, indexing or measuring. Imports no torch: the lab's
catalogue (imported by the window at start-up) reaches this module.

Why a real text rather than one written for the lab: retrieval and chunking behave differently on real structure
(headings, numbered steps, code lines), and a text written to be retrieved would flatter retrieval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Sequence

DATA = Path(__file__).with_name("data")
Language = Literal["en", "zh"]
TEXTS: dict[str, str] = {"en": "vimtutor_en.txt", "zh": "vimtutor_zh.txt"}
LINES_PER_PAGE = 46  # a Letter page of 11-point text at 14-point leading, 72-point margins


def text(language: Language) -> str:
    """The whole real text in ``language``."""
    return (DATA / TEXTS[language]).read_text(encoding="utf-8")


def cut(whole: str, chars: int) -> str:
    """The first ``chars`` characters of ``whole``, ended at the last line break before them (never mid-sentence,
    so the cut text reads as a shorter document, not a broken one)."""
    if len(whole) <= chars:
        return whole
    head = whole[:chars]
    end = head.rfind("\n")
    return head[:end] if end > chars // 2 else head


def pages(whole: str, lines_per_page: int = LINES_PER_PAGE) -> list[str]:
    """``whole`` laid out as pages of ``lines_per_page`` lines."""
    lines = whole.split("\n")
    return ["\n".join(lines[i:i + lines_per_page]) for i in range(0, len(lines), lines_per_page)]


def _escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").replace("\t", "        ")


def make_pdf(page_texts: Sequence[str | None]) -> bytes:
    """A PDF with one page per item, its lines as Helvetica text (WinAnsi: Latin text only), or (None) a filled
    rectangle and no text at all, as a scanned page has none. Written by hand: pypdf cannot lay out text and
    reportlab is not a dependency; the tests make their PDFs with it too (tests/helpers/documents.py)."""
    count = len(page_texts)
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: (f"<< /Type /Pages /Kids [{' '.join(f'{4 + 2 * i} 0 R' for i in range(count))}] /Count {count} >>"
            ).encode(),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    }
    for i, page in enumerate(page_texts):
        if page is None:
            stream = b"0 0 1 rg 72 72 300 300 re f"
        else:
            shown = " ".join(f"({_escape(line)}) Tj T*" for line in page.split("\n"))
            stream = f"BT /F1 11 Tf 14 TL 72 720 Td {shown} ET".encode("latin-1", errors="replace")
        objects[4 + 2 * i] = (f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                              f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>").encode()
        objects[5 + 2 * i] = b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for number in sorted(objects):
        out += b"%010d 00000 n \n" % offsets[number]
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
