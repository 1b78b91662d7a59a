"""The documents benchmarks' parts that need no real model: the real texts as a PDF the reader reads page by page,
the evaluation set's answers found in the texts, and the quality scoring on keyword retrieval alone."""

from __future__ import annotations

import json
import re

from engine.bench import corpus, docs_quality
from engine.docs.readers import read_document


def test_the_tutor_laid_out_as_a_pdf_reads_back_page_by_page(tmp_path):
    pages = corpus.pages(corpus.text("en"))
    path = tmp_path / "tutor.pdf"
    path.write_bytes(corpus.make_pdf(pages))
    document = read_document(path)
    assert [p.number for p in document.pages] == list(range(1, len(pages) + 1))
    assert "Press  x  to delete".replace(" ", "") in "".join(p.text for p in document.pages).replace(" ", "")


def test_cut_ends_at_a_line_break():
    text = corpus.text("zh")
    cut = corpus.cut(text, 1000)
    assert len(cut) <= 1000 and text.startswith(cut) and text[len(cut)] == "\n"


def test_every_answer_of_the_set_is_in_its_text():
    for item in json.loads(docs_quality.SET.read_text(encoding="utf-8"))["questions"]:
        assert re.sub(r"\s+", "", item["answer"]) in re.sub(r"\s+", "", corpus.text(item["lang"])), item


def test_scoring_counts_the_first_relevant_rank():
    assert docs_quality.score(["a", "b", "the answer here"], "answer") == (True, 1 / 3)
    assert docs_quality.score(["x"] * 6 + ["answer"], "answer") == (False, 1 / 7)
    assert docs_quality.score(["x"] * 12, "answer") == (False, 0.0)


def test_keyword_only_quality_on_the_real_set(home):
    result = docs_quality.measure(lambda line: None)  # no embedder in an empty data folder: keywords alone
    assert result["embedder"] is None and set(result["results"]) == {"keyword/en", "keyword/zh", "keyword/all"}
    assert result["results"]["keyword/all"]["questions"] == 24
    assert result["results"]["keyword/all"]["recall@5"] > 0.5  # bm25 finds most answers of a real text
    assert "| keyword | zh |" in docs_quality.table(result)
