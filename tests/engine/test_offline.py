"""Fault 15: offline. Loading never attempts a network connection; a missing model fails fast with
a message that says what to do."""

from __future__ import annotations

import os
import socket

import pytest

from engine.errors import ModelNotFoundError
from engine.models.loader import load_model
from engine.inputs import LoadSpec
from tests.helpers.network import guard_network


@pytest.fixture
def no_network(monkeypatch) -> list[str]:
    """Every connection or name lookup fails, and is recorded."""
    return guard_network(monkeypatch)


def test_offline_switches_set_on_import():
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1"


def test_local_model_loads_without_connecting(tiny_model_dir, no_network):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32"))
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                               return_tensors="pt", return_dict=True)
    loaded.model.generate(**ids, max_new_tokens=3, do_sample=False)
    assert no_network == []


def test_missing_repo_id_fails_fast_without_connecting(tmp_path, monkeypatch, no_network):
    # Even a shell that turned the hub back online must not make a load go to the network.
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelNotFoundError) as info:
        load_model(LoadSpec(model="HuggingFaceTB/SmolLM2-360M-Instruct"))
    assert "not in the local Hugging Face cache" in str(info.value) and "\n" not in str(info.value)
    assert no_network == []


def test_missing_default_model_says_fetch(home, no_network):
    with pytest.raises(ModelNotFoundError) as info:
        load_model(LoadSpec(model="default"))
    assert "python -m engine fetch" in str(info.value)
    assert no_network == []


def test_missing_path_says_what_to_give(tmp_path, no_network):
    with pytest.raises(ModelNotFoundError, match="give a model folder, a .gguf file"):
        load_model(LoadSpec(model=str(tmp_path / "gone.gguf")))
    assert no_network == []


def test_network_guard_catches_a_connection(no_network):
    # The control: the guard above sees a real connection attempt, so its empty list means something.
    with pytest.raises(OSError):
        socket.create_connection(("huggingface.co", 443), timeout=1)
    assert no_network
