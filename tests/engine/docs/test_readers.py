"""engine/docs/readers.py and text.py on real files made here: every format's text, and every bad input as one line."""

from __future__ import annotations

import json

import pytest

from engine.docs.readers import ReadLimits, read_document
from engine.errors import DocumentError, ErrorKind, NoTextLayerError
from tests.helpers.documents import encrypt_pdf, make_docx, make_docx_bomb, make_pdf

ZH = "第一章 总则\n\n为了规范数据处理活动，保障数据安全，促进数据开发利用。本法适用于中华人民共和国境内的数据处理活动！"


def _one_line(error: Exception) -> str:
    message = str(error)
    assert "\n" not in message and message
    return message


def test_utf8_text_and_markdown_are_read_as_they_are(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\nCafé ☕ and 中文.", encoding="utf-8")
    document = read_document(path)
    assert document.kind == "text"
    assert [(p.number, p.text) for p in document.pages] == [(None, "# Notes\n\nCafé ☕ and 中文.")]
    assert len(document.sha256) == 64 and document.size == path.stat().st_size


@pytest.mark.parametrize("encoding", ["gbk", "gb18030", "utf-16"])
def test_chinese_text_in_a_legacy_encoding_is_not_mangled(tmp_path, encoding):
    path = tmp_path / "法规.txt"
    path.write_bytes(ZH.encode(encoding))
    assert read_document(path).pages[0].text == ZH


def test_a_gbk_character_outside_gb2312_survives(tmp_path):
    text = "镕基与喆的名字都不在GB2312里。" * 5  # 镕 and 喆 are GBK-only: a GB2312 decode would drop them
    path = tmp_path / "names.txt"
    path.write_bytes(text.encode("gbk"))
    assert read_document(path).pages[0].text == text


def test_csv_json_and_source_code_are_text(tmp_path):
    (tmp_path / "t.csv").write_text("name,city\nLi,北京\n", encoding="utf-8")
    (tmp_path / "t.json").write_text(json.dumps({"k": "值"}, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "t.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    assert "Li,北京" in read_document(tmp_path / "t.csv").pages[0].text
    assert "值" in read_document(tmp_path / "t.json").pages[0].text
    assert read_document(tmp_path / "t.py").pages[0].text.startswith("def f():")


def test_html_keeps_headings_as_markdown_and_drops_scripts(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("<html><head><title>T</title><style>p{}</style></head><body><h1>Guide</h1><p>Fish &amp; chips"
                    "</p><script>alert(1)</script><h2>Setup</h2><p>Run it.</p></body></html>", encoding="utf-8")
    assert read_document(path).pages[0].text == "# Guide\n\nFish & chips\n\n## Setup\n\nRun it."


def test_pdf_text_is_read_per_page_with_page_numbers(tmp_path):
    path = tmp_path / "report.pdf"
    path.write_bytes(make_pdf(["Revenue grew in 2024.", None, "Costs fell (slightly)."]))
    document = read_document(path)
    assert document.kind == "pdf"
    # The image-only middle page has no text: it is left out, the others keep their own numbers.
    assert [(p.number, p.text) for p in document.pages] == [(1, "Revenue grew in 2024."),
                                                            (3, "Costs fell (slightly).")]


def test_an_encrypted_pdf_is_one_line_no_text_layer(tmp_path):
    path = tmp_path / "locked.pdf"
    path.write_bytes(encrypt_pdf(make_pdf(["confidential figures"])))
    with pytest.raises(NoTextLayerError) as caught:
        read_document(path)
    assert "no text layer" in _one_line(caught.value) and "encrypted" in str(caught.value)
    assert caught.value.kind is ErrorKind.BAD_INPUT


def test_an_image_only_pdf_is_one_line_no_text_layer(tmp_path):
    path = tmp_path / "scan.pdf"
    path.write_bytes(make_pdf([None, None]))
    with pytest.raises(NoTextLayerError) as caught:
        read_document(path)
    assert "no text layer" in _one_line(caught.value)


def test_a_damaged_pdf_is_one_line(tmp_path):
    path = tmp_path / "broken.pdf"
    path.write_bytes(make_pdf(["fine"])[:40])
    with pytest.raises(DocumentError) as caught:
        read_document(path)
    assert "broken.pdf" in _one_line(caught.value)


def test_docx_headings_paragraphs_and_tables(tmp_path):
    path = make_docx(tmp_path / "plan.docx", [("h1", "Plan"), ("", "Ship in May."), ("h2", "Risks"),
                                               ("", "供应链延迟。")], table=[["owner", "task"], ["Li", "QA"]])
    document = read_document(path)
    assert document.kind == "docx"
    assert document.pages[0].text == "# Plan\n\nShip in May.\n\n## Risks\n\n供应链延迟。\n\nowner | task\nLi | QA"


def test_a_docx_zip_bomb_is_refused_before_it_is_inflated(tmp_path):
    path = make_docx_bomb(tmp_path / "bomb.docx")
    assert path.stat().st_size < 200_000
    with pytest.raises(DocumentError) as caught:
        read_document(path)
    assert "zip bomb" in _one_line(caught.value)


def test_a_docx_over_the_inflated_limit_is_refused(tmp_path):
    path = make_docx(tmp_path / "big.docx", [("", "text")])
    with pytest.raises(DocumentError) as caught:
        read_document(path, ReadLimits(max_docx_inflated_bytes=1000))
    assert "over the" in _one_line(caught.value)


def test_a_docx_that_is_not_a_zip_is_one_line(tmp_path):
    path = tmp_path / "fake.docx"
    path.write_text("just text", encoding="utf-8")
    with pytest.raises(DocumentError) as caught:
        read_document(path)
    assert "not a .docx" in _one_line(caught.value)


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.log"
    with path.open("wb") as fh:  # sparse: the size is there, the bytes are not read
        fh.truncate(1 << 30)
    with pytest.raises(DocumentError) as caught:
        read_document(path)
    assert "1.0 GiB" in _one_line(caught.value) and "limit" in str(caught.value)


def test_binary_bytes_behind_a_text_suffix_are_refused(tmp_path):
    path = tmp_path / "photo.txt"
    path.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(DocumentError) as caught:
        read_document(path)
    assert "binary" in _one_line(caught.value)


def test_a_vanished_file_and_an_unknown_suffix_are_one_line(tmp_path):
    with pytest.raises(DocumentError) as caught:
        read_document(tmp_path / "gone.txt")
    assert "vanished" in _one_line(caught.value)
    (tmp_path / "a.exe").write_bytes(b"MZ")
    with pytest.raises(DocumentError) as caught:
        read_document(tmp_path / "a.exe")
    assert "not a document type" in _one_line(caught.value)
