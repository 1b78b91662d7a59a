"""Real documents made in tests: PDFs with a text layer (engine/bench/corpus.py's writer, by hand: pypdf cannot lay
out text and reportlab is not installed), encrypted and image-only PDFs, .docx files by python-docx, a .docx zip bomb,
and a tiny real BERT encoder folder for the embedder (random weights, a real tokenizer: the pooling and the store do not care what the
vectors mean)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from engine.bench.corpus import make_pdf  # noqa: F401  (one PDF writer, the bench's; None pages: image-only)


def encrypt_pdf(data: bytes, password: str = "secret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm="AES-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def make_docx(path: Path, blocks: list[tuple[str, str]], table: list[list[str]] | None = None) -> Path:
    """A .docx of (style, text) paragraphs, style "h1".."h3" for headings, "" for body text, then a table."""
    import docx

    document = docx.Document()
    for style, text in blocks:
        if style.startswith("h"):
            document.add_heading(text, level=int(style[1:]))
        else:
            document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, cell in enumerate(row):
                grid.cell(r, c).text = cell
    document.save(str(path))
    return path


def make_docx_bomb(path: Path, inflated: int = 40 << 20) -> Path:
    """A zip named .docx whose document.xml inflates ``inflated`` bytes of spaces from a few tens of kilobytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            block = b" " * (1 << 20)
            for _ in range(inflated >> 20):
                member.write(block)
    return path


def make_tiny_encoder(folder: Path, words: list[str]) -> Path:
    """A 2-layer BERT with random weights and a WordPiece tokenizer over ``words``, saved as safetensors."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(words))]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(str(folder))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(str(folder), safe_serialization=True)
    return folder
