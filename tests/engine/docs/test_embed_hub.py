"""engine/docs/embed_hub.py through the real huggingface_hub client against the local fake Hub (random weights: a
2-layer XLM-RoBERTa, the architecture of the multilingual MiniLM offered): the download lands in the embedders folder
and is put in use; its vectors are transformers' own forward pooled as its configs say; nothing touches the network
without --allow-downloads; a chat model is refused and the embedder in use stays."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine import paths
from engine.docs.embed import (ACTIVE, DEFAULT_EMBEDDER_NAME, MARKER, default_embedder, in_use_folder,
                               installed_embedders, use_embedder)
from engine.docs.embed_hub import fetch_hub_embedder
from engine.errors import CorruptModelError, DownloadsDisabledError, ModelNotFoundError
from tests.helpers.fake_hub import FakeHub
from tests.helpers.network import guard_network

REPO = "miaohui-test/tiny-multilingual"
CHAT = "miaohui-test/tiny-chat"
WORDS = "alpha beta gamma 文 档 检 索 中 英".split()


def make_tiny_xlmr(folder: Path, pooling: dict, window: int = 16) -> Path:
    """A random-weight 2-layer XLM-RoBERTa with a WordPiece tokenizer over WORDS and sentence-transformers configs."""
    import torch
    from transformers import BertTokenizerFast, XLMRobertaConfig, XLMRobertaModel

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(str(folder))
    torch.manual_seed(1)
    config = XLMRobertaConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=window + 2, pad_token_id=0)
    XLMRobertaModel(config).save_pretrained(str(folder), safe_serialization=True)
    (folder / "modules.json").write_text("[]", encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": window}), encoding="utf-8")
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling), encoding="utf-8")
    return folder


@pytest.fixture
def hub(tmp_path, tiny_model_dir):
    fake = FakeHub()
    fake.add_folder(REPO, make_tiny_xlmr(tmp_path / "xlmr", {"pooling_mode_mean_tokens": True}),
                    extra={"README.md": b"# tiny\n",  # add_folder takes the top level; the Hub lists nested names too
                           "1_Pooling/config.json": (tmp_path / "xlmr" / "1_Pooling" / "config.json").read_bytes()},
                    tags=["sentence-transformers", "safetensors"],
                    pipeline_tag="sentence-similarity")
    fake.add_folder(CHAT, tiny_model_dir, tags=["transformers", "safetensors", "llama"])
    fake.start()
    yield fake
    fake.stop()


def _reference(folder: Path, texts: list[str], mode: str) -> np.ndarray:
    """transformers' own forward, pooled by hand."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(str(folder)), AutoModel.from_pretrained(str(folder)).eval()
    encoded = tokenizer(texts, padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**encoded).last_hidden_state
    if mode == "cls":
        pooled = hidden[:, 0]
    else:
        mask = encoded["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=1).numpy()


def test_a_hub_embedder_is_fetched_into_the_embedders_folder_and_put_in_use(home, hub, monkeypatch):
    attempts = guard_network(monkeypatch, allow_loopback=True)
    lines: list[str] = []
    chosen = fetch_hub_embedder(REPO, allow_downloads=True, endpoint=hub.url, progress=lines.append)
    folder = paths.embedders_dir() / "miaohui-test--tiny-multilingual"
    assert chosen.folder == folder.name and chosen.name == REPO and chosen.in_use
    assert (folder / MARKER).is_file() and (folder / "1_Pooling" / "config.json").is_file()
    assert not (paths.models_dir() / folder.name).exists()  # never among the chat models
    assert not hub.requests_for("README.md") and attempts == []
    assert in_use_folder() == folder.name and [e.folder for e in installed_embedders()] == [folder.name]
    embedder = default_embedder()
    assert embedder is not None and embedder.name == REPO and embedder.pooling.max_tokens == 16
    texts = ["alpha beta", "文 档 检 索 gamma", "中 英 alpha beta gamma 文 档 检 索 中 英 alpha beta gamma 文 档"]
    np.testing.assert_allclose(embedder.embed(texts), _reference(folder, texts, "mean"), atol=1e-5)
    # a second fetch downloads nothing again
    before = len(hub.requests_for("model.safetensors"))
    fetch_hub_embedder(REPO, allow_downloads=True, endpoint=hub.url, progress=lines.append)
    assert len(hub.requests_for("model.safetensors")) == before and "already in place" in lines[-1]


def test_cls_pooling_is_read_from_the_folder(tmp_path):
    from engine.docs.embed import TransformersEmbedder

    folder = make_tiny_xlmr(tmp_path / "cls", {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})
    embedder = TransformersEmbedder(folder)
    assert embedder.pooling.mode == "cls"
    np.testing.assert_allclose(embedder.embed(["alpha", "beta gamma 文"]),
                               _reference(folder, ["alpha", "beta gamma 文"], "cls"), atol=1e-5)


def test_without_allow_downloads_nothing_connects_and_nothing_is_made(home, monkeypatch):
    attempts = guard_network(monkeypatch)
    with pytest.raises(DownloadsDisabledError) as caught:
        fetch_hub_embedder(REPO, allow_downloads=False, endpoint="https://huggingface.co")
    assert "allow-downloads" in str(caught.value) and "\n" not in str(caught.value)
    assert attempts == [] and installed_embedders() == [] and in_use_folder() == DEFAULT_EMBEDDER_NAME


def test_a_chat_model_is_refused_and_the_embedder_in_use_stays(home, hub, monkeypatch):
    guard_network(monkeypatch, allow_loopback=True)
    fetch_hub_embedder(REPO, allow_downloads=True, endpoint=hub.url)
    with pytest.raises(CorruptModelError) as caught:
        fetch_hub_embedder(CHAT, allow_downloads=True, endpoint=hub.url)
    assert "not an embedding model" in str(caught.value) and "\n" not in str(caught.value)
    assert not (paths.embedders_dir() / "miaohui-test--tiny-chat").exists()
    assert in_use_folder() == "miaohui-test--tiny-multilingual"


def test_choosing_an_embedder_by_name(home, hub, monkeypatch):
    guard_network(monkeypatch, allow_loopback=True)
    fetch_hub_embedder(REPO, allow_downloads=True, endpoint=hub.url, use=False)
    assert in_use_folder() == DEFAULT_EMBEDDER_NAME  # fetched, not in use
    with pytest.raises(ModelNotFoundError) as caught:
        use_embedder("../elsewhere")
    assert "miaohui-test--tiny-multilingual" in str(caught.value)
    assert use_embedder("miaohui-test--tiny-multilingual").in_use
    (paths.embedders_dir() / "miaohui-test--tiny-multilingual" / MARKER).unlink()  # no longer complete
    assert in_use_folder() == DEFAULT_EMBEDDER_NAME and default_embedder() is None
    assert (paths.embedders_dir() / ACTIVE).is_file()


def test_the_command_line_fetches_lists_and_chooses(home, hub, monkeypatch, capsys):
    from engine.__main__ import main

    guard_network(monkeypatch, allow_loopback=True)
    assert main(["docs", "fetch-embedder", "--hub", REPO]) == 2
    assert "--allow-downloads" in capsys.readouterr().err
    assert main(["docs", "fetch-embedder", "--hub", REPO, "--allow-downloads", "--endpoint", hub.url]) == 0
    assert "in use: " + REPO in capsys.readouterr().out
    assert main(["docs", "embedders", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"folder": "miaohui-test--tiny-multilingual", "name": REPO, "in_use": True}]
    assert main(["docs", "use-embedder", "nothing-here"]) == 2
    assert "no embedding model" in capsys.readouterr().err
