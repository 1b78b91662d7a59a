"""Fixtures of the model-library tests: a local fake Hub serving the tiny model, a GGUF repo, a pickle-only repo
and a remote-code repo, and network guards (nothing connects anywhere but the fake Hub on 127.0.0.1)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from tests.helpers.fake_hub import FakeHub, make_gguf
from tests.helpers.network import guard_network

TINY = "miaohui-test/tiny-chat"
GGUF_REPO = "miaohui-test/tiny-chat-GGUF"
PICKLE_ONLY = "miaohui-test/pickle-only"
REMOTE_CODE = "miaohui-test/remote-code"
CLASSIFIER = "other/tiny-classifier"
GGUF_F16 = "tiny-chat-F16.gguf"
GGUF_Q8 = "tiny-chat-Q8_0.gguf"


@pytest.fixture(scope="session")
def gguf_files(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("gguf")
    return {GGUF_F16: make_gguf(folder / GGUF_F16, "F16").read_bytes(),
            GGUF_Q8: make_gguf(folder / GGUF_Q8, "Q8_0").read_bytes()}


@pytest.fixture
def fake_hub(tiny_model_dir, gguf_files) -> FakeHub:
    """A running fake Hub; ``fake_hub.url`` is its endpoint."""
    hub = FakeHub(page_size=2)
    hub.add_folder(TINY, tiny_model_dir,
                   extra={"pytorch_model.bin": pickle.dumps({"not": "loaded"}), "README.md": b"# tiny chat\n",
                          "onnx/model.onnx": b"onnx graph"},
                   tags=["transformers", "safetensors", "llama", "text-generation", "license:apache-2.0"],
                   downloads=500, likes=7, last_modified="2025-02-01T00:00:00.000Z")
    hub.add_repo(GGUF_REPO, {"README.md": b"# GGUF\n", **gguf_files}, config=None,
                 tags=["gguf", "llama", "text-generation", "license:mit"], downloads=300, likes=9,
                 last_modified="2025-03-01T00:00:00.000Z")
    config = (tiny_model_dir / "config.json").read_bytes()
    hub.add_repo(PICKLE_ONLY, {"config.json": config, "pytorch_model.bin": pickle.dumps({"w": 1}),
                               "tokenizer.json": (tiny_model_dir / "tokenizer.json").read_bytes()},
                 tags=["transformers", "pytorch", "llama", "text-generation"], downloads=100,
                 last_modified="2025-04-01T00:00:00.000Z")
    remote = json.loads(config)
    remote["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    hub.add_folder(REMOTE_CODE, tiny_model_dir, extra={"config.json": json.dumps(remote).encode(),
                                                       "modeling_evil.py": b"raise SystemExit('ran')\n"},
                   tags=["transformers", "safetensors", "custom_code", "text-generation"], downloads=50)
    hub.add_folder(CLASSIFIER, tiny_model_dir, tags=["transformers", "safetensors"], downloads=10_000,
                   pipeline_tag="text-classification")
    hub.start()
    yield hub
    hub.stop()


@pytest.fixture
def no_network(monkeypatch) -> list[str]:
    """Every connection and name lookup fails, and is recorded."""
    return guard_network(monkeypatch)


@pytest.fixture
def only_fake_hub(monkeypatch) -> list[str]:
    """Connections to 127.0.0.1 (the fake Hub) go through; any other is refused and recorded."""
    return guard_network(monkeypatch, allow_loopback=True)


def visible_models(home: Path) -> list[str]:
    """What the model picker and the library list would show (hidden work folders excluded)."""
    from engine.library.installed import list_installed
    from engine.models.catalog import list_local_models

    picker = [c.spec_model for c in list_local_models(cache_dir=home / "no-hf-cache")]
    return picker + [m.name for m in list_installed()]
