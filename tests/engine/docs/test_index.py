"""engine/docs/index.py, store.py and retrieve.py on the real SQLite store in tmp_path: indexing folders, re-indexing
only changed files, removal, Chinese keyword search, and hybrid retrieval with a real (tiny) encoder."""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest

from engine.docs.embed import TransformersEmbedder
from engine.docs.index import index_paths
from engine.docs.retrieve import KEYWORDS_ONLY_NOTE, rrf, search
from engine.docs.store import DocumentStore
from engine.errors import CollectionNotFoundError, ErrorKind
from tests.helpers.documents import make_docx, make_pdf, make_tiny_encoder

ZH_LAW = ("# 数据安全法\n\n## 总则\n\n为了规范数据处理活动，保障数据安全，促进数据开发利用。\n\n"
          "## 数据安全制度\n\n国家建立数据分类分级保护制度，对数据实行分类分级保护。")


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "law.md").write_bytes(ZH_LAW.encode("gbk"))
    (folder / "report.pdf").write_bytes(make_pdf(["Quarterly revenue grew by nine percent.",
                                                   "The warehouse in Lyon closed in March."]))
    make_docx(folder / "sub" / "plan.docx", [("h1", "Plan"), ("", "Hire two engineers for the database team.")])
    (folder / "sub" / "notes.txt").write_text("Remember to water the ficus on Fridays.", encoding="utf-8")
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "secret.txt").write_text("never indexed", encoding="utf-8")
    return folder


@pytest.fixture
def store(tmp_path):
    with DocumentStore(tmp_path / "documents.sqlite3") as opened:
        yield opened


def test_a_folder_is_indexed_recursively_and_searched_by_keyword(store, corpus):
    lines: list[str] = []
    report = index_paths(store, "work", [corpus], progress=lines.append)
    assert (report.added, report.failed, report.unchanged) == (4, 0, 0)
    assert any("report.pdf: added" in line and "2 pages" in line for line in lines)
    assert not any("secret" in line for line in lines)
    [info] = store.collections()
    assert (info.name, info.files, info.vectors) == ("work", 4, 0)
    result = search(store, "Lyon warehouse", ["work"], k=3)
    assert result.mode == "keyword" and result.note == KEYWORDS_ONLY_NOTE
    top = result.hits[0]
    assert top.path.endswith("report.pdf") and top.page == 2 and "Lyon" in top.text


def test_a_chinese_query_matches_words_inside_a_sentence(store, corpus):
    index_paths(store, "work", [corpus])
    hits = search(store, "分级保护", ["work"], k=2).hits  # two words, neither separated by spaces in the text
    assert hits and hits[0].text.startswith("国家建立数据分类分级保护制度") and hits[0].heading == "数据安全法 › 数据安全制度"
    assert hits[0].page is None


def test_only_changed_files_are_read_again_and_vanished_ones_leave(store, corpus):
    index_paths(store, "work", [corpus])
    (corpus / "sub" / "notes.txt").write_text("Water the orchid on Mondays.", encoding="utf-8")
    os.remove(corpus / "report.pdf")
    lines: list[str] = []
    report = index_paths(store, "work", [corpus], progress=lines.append)
    assert (report.added, report.updated, report.unchanged, report.removed) == (0, 1, 2, 1)
    assert any("notes.txt: updated" in line for line in lines)
    assert search(store, "orchid", ["work"]).hits[0].text == "Water the orchid on Mondays."
    assert search(store, "ficus", ["work"]).hits == ()  # the old passage and its keywords are gone
    assert search(store, "Lyon", ["work"]).hits == ()


def test_bad_files_are_one_line_each_and_the_rest_is_indexed(store, corpus, tmp_path):
    (corpus / "scan.pdf").write_bytes(make_pdf([None]))
    (corpus / "blob.json").write_bytes(b"\x00\x01\x02" * 100)
    lines: list[str] = []
    report = index_paths(store, "work", [corpus, tmp_path / "missing.txt"], progress=lines.append)
    assert report.added == 4 and report.failed == 3
    failures = [line for line in lines if "skipped" in line]
    assert any("scan.pdf" in line and "no text layer" in line for line in failures)
    assert any("blob.json" in line and "binary" in line for line in failures)
    assert any("missing.txt" in line and "vanished" in line for line in failures)


def test_a_symlink_loop_is_walked_once(store, corpus):
    os.symlink(corpus, corpus / "sub" / "loop")
    lines: list[str] = []
    report = index_paths(store, "work", [corpus], progress=lines.append)
    assert report.added == 4
    assert any("symlink loop" in line for line in lines)


def test_collections_are_separate_and_removable(store, corpus):
    index_paths(store, "a", [corpus / "sub"])
    index_paths(store, "b", [corpus / "report.pdf"])
    assert search(store, "ficus", ["b"]).hits == ()
    assert [hit.collection for hit in search(store, "ficus", []).hits] == ["a"]
    store.remove_collection("a")
    assert [info.name for info in store.collections()] == ["b"]
    with pytest.raises(CollectionNotFoundError) as caught:
        store.remove_collection("a")
    assert caught.value.kind is ErrorKind.NOT_FOUND
    # The FTS rows went with the passages: nothing is left pointing at a removed passage.
    db = sqlite3.connect(store.path)
    assert db.execute("SELECT COUNT(*) FROM passages_fts").fetchone()[0] == db.execute(
        "SELECT COUNT(*) FROM passages").fetchone()[0]


def test_reciprocal_rank_fusion_rewards_agreement():
    fused = rrf([[1, 2, 3], [3, 1, 4]], k=60)
    assert [item for item, _ in fused] == [1, 3, 2, 4]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)


@pytest.fixture(scope="module")
def tiny_embedder(tmp_path_factory):
    words = "quarterly revenue grew by nine percent the warehouse in lyon closed march water orchid".split()
    return TransformersEmbedder(make_tiny_encoder(tmp_path_factory.mktemp("encoder"), words), name="tiny")


def test_hybrid_search_stores_one_unit_vector_per_passage_and_fuses_both_rankings(store, corpus, tiny_embedder):
    report = index_paths(store, "work", [corpus], embedder=tiny_embedder)
    assert report.embedded == report.passages > 0
    assert store.collections()[0].vectors == report.passages
    raw = sqlite3.connect(store.path).execute("SELECT model, dim, vector FROM vectors").fetchall()
    assert {(model, dim) for model, dim, _ in raw} == {("tiny", 32)}
    vectors = np.stack([np.frombuffer(blob, dtype="<f4") for _, _, blob in raw])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    result = search(store, "The warehouse in Lyon closed in March.", ["work"], k=2, embedder=tiny_embedder)
    assert result.mode == "hybrid" and result.note is None
    # Ranked first by keywords and (identical text: cosine 1) by vectors: the highest fused score there is.
    assert result.hits[0].page == 2 and result.hits[0].score == pytest.approx(2 / 61)


def test_passages_indexed_without_a_model_are_embedded_by_a_later_run(store, corpus, tiny_embedder):
    first = index_paths(store, "work", [corpus])
    assert store.collections()[0].vectors == 0
    second = index_paths(store, "work", [corpus], embedder=tiny_embedder)
    assert second.unchanged == 4 and second.embedded == first.passages
    assert store.collections()[0].vectors == first.passages


def test_the_embedder_pools_only_real_tokens(tiny_embedder):
    alone = tiny_embedder.embed(["revenue grew"])
    batched = tiny_embedder.embed(["revenue grew", "the warehouse in lyon closed in march nine percent"])
    assert batched.shape == (2, 32) and batched.dtype == np.float32
    np.testing.assert_allclose(batched[0], alone[0], atol=1e-5)  # padding to the longer text changed nothing
