"""engine/docs/chunking.py: passages cut on headings, paragraphs and sentences (。！？ too), bounded, page exact."""

from __future__ import annotations

from pathlib import Path

from engine.docs.chunking import ChunkConfig, chunk, estimate_tokens, split_sentences
from engine.docs.readers import Document, Page


def _doc(text: str, suffix: str = ".md", kind: str = "text", pages: tuple[Page, ...] | None = None) -> Document:
    return Document(path=Path("doc" + suffix), kind=kind, pages=pages or (Page(None, text),), sha256="0" * 64,
                    size=len(text))


def test_headings_open_sections_and_give_each_passage_its_path():
    passages = chunk(_doc("# Guide\n\nIntro.\n\n## Install\n\nRun it.\n\n### Linux\n\napt.\n\n## Use\n\nType."))
    assert [(p.heading, p.text) for p in passages] == [
        ("Guide", "Intro."), ("Guide › Install", "Run it."), ("Guide › Install › Linux", "apt."),
        ("Guide › Use", "Type.")]
    assert [p.ordinal for p in passages] == [0, 1, 2, 3]


def test_a_hash_line_in_source_code_is_not_a_heading():
    passages = chunk(_doc("# a comment\nx = 1\n", suffix=".py"))
    assert [(p.heading, p.text) for p in passages] == [("", "# a comment\nx = 1")]


def test_short_paragraphs_are_packed_together_up_to_the_bound():
    text = "\n\n".join(f"Paragraph {i} is short." for i in range(40))
    passages = chunk(_doc(text, suffix=".txt"), ChunkConfig(max_tokens=30))
    assert len(passages) > 1
    assert all(estimate_tokens(p.text) <= 30 for p in passages)
    assert all("\n\n" in p.text for p in passages[:-1])  # more than one paragraph each
    assert " ".join(p.text for p in passages).split() == text.split()  # nothing lost, nothing repeated


def test_chinese_sentences_end_at_their_own_marks():
    assert split_sentences("今天下雨。你带伞了吗？带了！“好的。”然后") == ["今天下雨。", "你带伞了吗？", "带了！", "“好的。”", "然后"]
    assert split_sentences("Dr. Li came. He left! Why? e.g.x") == ["Dr.", "Li came.", "He left!", "Why?", "e.g.x"]


def test_a_long_chinese_paragraph_is_cut_between_sentences_within_the_bound():
    sentence = "数据处理者应当依照法律规定建立健全全流程数据安全管理制度。"
    passages = chunk(_doc(sentence * 30, suffix=".txt"), ChunkConfig(max_tokens=100))
    assert len(passages) > 3
    for passage in passages:
        assert estimate_tokens(passage.text) <= 100
        assert passage.text.endswith("。") and passage.text.startswith("数据")  # whole sentences only
    assert "".join(p.text for p in passages) == sentence * 30


def test_a_sentence_longer_than_the_bound_is_cut_at_words():
    words = " ".join(f"word{i}" for i in range(400))
    passages = chunk(_doc(words, suffix=".txt"), ChunkConfig(max_tokens=50))
    assert all(estimate_tokens(p.text) <= 50 for p in passages)
    assert " ".join(p.text for p in passages).split() == words.split()


def test_passages_never_span_pages_and_keep_their_page_number():
    pages = (Page(1, "Alpha one.\n\nAlpha two."), Page(2, "Beta."), Page(5, "Gamma."))
    passages = chunk(_doc("", suffix=".pdf", kind="pdf", pages=pages))
    assert [(p.page, p.text) for p in passages] == [(1, "Alpha one.\n\nAlpha two."), (2, "Beta."), (5, "Gamma.")]


def test_the_token_estimate_counts_chinese_characters_one_each():
    assert estimate_tokens("中文文本") == 4
    assert estimate_tokens("abcdefgh") == 2
