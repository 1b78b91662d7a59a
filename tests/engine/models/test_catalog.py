"""engine.models.catalog: the models this machine already has, found without reading weights or the network."""

from __future__ import annotations

import shutil

from engine import paths
from engine.models.catalog import choice_for_path, list_local_models
from engine.models.fetch import MARKER
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from tests.engine._local_models import add_to_hf_cache, write_llama_gguf


def test_empty_machine_lists_nothing(home, tmp_path):
    assert list_local_models(cache_dir=tmp_path / "no-such-cache") == []


def test_default_local_and_cache_models_listed(home, tiny_model_dir, tmp_path, monkeypatch):
    default = shutil.copytree(tiny_model_dir, paths.default_model_dir())
    (default / MARKER).write_text("{}")
    shutil.copytree(tiny_model_dir, paths.models_dir() / "my-tiny")
    (paths.models_dir() / "my-tiny" / "notes.gguf").write_bytes(b"GGUF")
    (paths.models_dir() / ".fetch-tmp").mkdir()  # a fetch in progress is not offered
    (paths.models_dir() / "empty").mkdir()
    cache = tmp_path / "hub"
    add_to_hf_cache(cache, "acme/tiny-chat", tiny_model_dir)
    (cache / "models--acme--not-a-model").mkdir()  # half-written cache entry: tolerated

    choices = list_local_models(cache_dir=cache)
    assert [c.kind for c in choices] == ["default", "local", "local", "hf-cache"]
    assert choices[0].spec_model == "default" and paths.DEFAULT_MODEL_NAME in choices[0].label
    assert choices[1].spec_model == str(paths.models_dir() / "my-tiny")
    assert choices[2].spec_model.endswith("notes.gguf")
    assert choices[3].spec_model == "acme/tiny-chat" and "acme/tiny-chat" in choices[3].label

    # What the picker offers is what the loader opens.
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for choice in (choices[0], choices[1], choices[3]):
        assert load_model(LoadSpec(model=choice.spec_model, precision="fp32")).facts.params > 0


def test_gguf_in_hf_cache_listed_and_loads(home, tiny_model_dir, tmp_path):
    gguf = write_llama_gguf(tiny_model_dir, tmp_path / "tiny-F32.gguf")
    add_to_hf_cache(tmp_path / "hub", "acme/tiny-GGUF", gguf)
    (choice,) = list_local_models(cache_dir=tmp_path / "hub")
    assert choice.kind == "hf-cache" and choice.spec_model.endswith("tiny-F32.gguf")
    assert load_model(LoadSpec(model=choice.spec_model, precision="fp32")).facts.params > 0


def test_cache_dir_from_environment(home, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    add_to_hf_cache(tmp_path / "hub", "acme/tiny-chat", tiny_model_dir)
    assert [c.spec_model for c in list_local_models()] == ["acme/tiny-chat"]


def test_recent_choice():
    choice = choice_for_path("/data/models/qwen.gguf")
    assert choice.kind == "recent" and choice.spec_model == "/data/models/qwen.gguf" and "qwen.gguf" in choice.label
