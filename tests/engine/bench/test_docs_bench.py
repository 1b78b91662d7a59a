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


def test_the_follow_up_rows_on_the_tiny_model_reuse_the_document_prefix(tmp_path):
    from engine.bench import docs
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model
    from tests.helpers.tiny_model import build_tiny_model

    folder = build_tiny_model(tmp_path / "tiny-1k", max_position_embeddings=1024)
    loaded = load_model(LoadSpec(model=str(folder), precision="fp32", device="cpu"))
    result = docs.follow_up(loaded, 400, lambda line: None, max_new_tokens=4)
    prefix = result["document_prefix_tokens"]
    assert prefix > result["document_tokens"] and result["first"]["reused_tokens"] == 0
    for name in ("new_conversation", "new_conversation_from_disk"):  # the kept prefix, from memory then from its file
        row = result[name]
        assert row["reused_tokens"] == prefix and row["prefill_tokens"] == row["prompt_tokens"] - prefix
        assert row["ttft_ratio"] is not None
    assert result["follow_up"]["reused_tokens"] > prefix
    table = docs.table({"machine": {"processor": "test"}, "embedder": None, "indexing": {}, "embedding": None,
                        "follow_up": result})
    assert "| new conversation, same document, prefix from disk |" in table
    assert "| TTFT ratio, new conversation, same document / first |" in table
