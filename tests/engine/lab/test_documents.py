"""The lab's "whole text vs retrieval" on the tiny model and a tiny real BERT: a row for each length and mode, the
whole text's prefill growing with the document while retrieval's stays bounded by the passages kept."""

from __future__ import annotations

import threading

import pytest
import torch

from engine.docs.chunking import ChunkConfig
from engine.docs.embed import TransformersEmbedder
from engine.inputs import LoadSpec
from engine.lab import EXPERIMENTS
from engine.lab.charts import save_png
from engine.lab.documents import run_docs_vs_retrieval
from engine.models.loader import load_model
from tests.helpers.documents import make_tiny_encoder
from tests.helpers.tiny_model import build_tiny_model

LENGTHS = (200, 600, 1200)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: two contending threads make tiny runs slower
    try:
        # 4,096 positions: the tiny byte-level tokenizer spends ~3 tokens on a Chinese character.
        model = build_tiny_model(tmp_path_factory.mktemp("tiny-4k"), max_position_embeddings=4096)
        loaded = load_model(LoadSpec(model=str(model), precision="fp32", device="cpu"))
        words = "delete word undo the cursor and press type to x u dw".split()
        embedder = TransformersEmbedder(make_tiny_encoder(tmp_path_factory.mktemp("encoder"), words), name="tiny")
        yield run_docs_vs_retrieval(loaded, threading.Event(), lengths=LENGTHS, embedder=embedder,
                                    chunking=ChunkConfig(max_tokens=30), passages=2)
    finally:
        torch.set_num_threads(before)


def _rows(result, lang, mode):
    index = {name: i for i, name in enumerate(result.columns)}
    return [{name: row[i] for name, i in index.items()} for row in result.rows
            if row[index["language"]] == lang and row[index["mode"]] == mode]


def test_the_experiment_is_in_the_lab_catalogue():
    item = next(e for e in EXPERIMENTS if e.key == "docs")
    assert item.needs_local  # it reads the model's tokenizer and KV cache


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_whole_text_grows_with_the_document_and_retrieval_stays_bounded(result, lang):
    whole, retrieved = _rows(result, lang, "whole"), _rows(result, lang, "retrieve")
    assert len(whole) == len(retrieved) == len(LENGTHS)
    assert all(r["prefill_tokens"] is not None and r["ttft_s"] > 0 and r["kv_cache_bytes"] > 0 for r in whole)
    prefills = [r["prefill_tokens"] for r in whole]
    assert prefills == sorted(prefills) and prefills[-1] > 2 * prefills[0]
    kv = [r["kv_cache_bytes"] for r in whole]
    assert kv == sorted(kv) and kv[-1] > kv[0]  # the cache holds every prompt token
    # Two passages of at most 30 estimated tokens each (plus labels and the frame): bounded whatever the length.
    assert max(r["prefill_tokens"] for r in retrieved) < prefills[-1] / 2
    assert retrieved[-1]["prefill_tokens"] <= whole[0]["prefill_tokens"] * 1.5
    assert all(r["retrieval_s"] is not None and r["note"].endswith("hybrid") for r in retrieved)


def test_chart_and_summary(result, tmp_path):
    assert {s.panel for s in result.series} == {0, 1, 2}
    assert {s.name for s in result.series} == {"en, whole", "en, retrieve", "zh, whole", "zh, retrieve"}
    assert result.summary["en_prefill_tokens_whole_over_retrieved"] > 1
    png = save_png(result, tmp_path / "docs.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
