"""Fixtures shared by every test: offscreen Qt, an isolated data dir, the tiny and the default model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# Resolve the real data dir (where `make install` fetched the default model) before any test
# points MIAOHUI_HOME elsewhere.
import engine  # noqa: E402,F401  (offline switches)
from engine import paths  # noqa: E402

_REAL_DEFAULT_MODEL = paths.default_model_dir()


@pytest.fixture(autouse=True)
def _drafting_pays(request, monkeypatch):
    """Speculation drafts only where measured times say it pays (engine/speculate/length.py): every test is told
    costs under which drafting always pays, so what it checks (the same text, drafts counted, tinted) never hangs on
    this machine's timings. A test of the measured decision itself is marked ``measured_costs``."""
    if request.node.get_closest_marker("measured_costs") is None:
        monkeypatch.setenv("MIAOHUI_SPECULATION_COSTS", "1.0,0.1,0.01")
    else:
        monkeypatch.delenv("MIAOHUI_SPECULATION_COSTS", raising=False)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty data directory for this test (history, settings, logs)."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("MIAOHUI_HOME", str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Folder of a tiny random-weight Llama (GQA 4/2 heads, 256 positions) with a ChatML tokenizer."""
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def reasoning_model_dir(tmp_path_factory) -> Path:
    """The tiny model as a reasoning model: a Qwen3-style template, <think> tokens, always thinks then answers."""
    from tests.helpers.reasoning_model import build_reasoning_model

    return build_reasoning_model(tmp_path_factory.mktemp("reasoning-model"))


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The real default model, fetched by `make install` (`python -m engine fetch`)."""
    from engine.models.fetch import is_fetched

    if not is_fetched(_REAL_DEFAULT_MODEL):
        pytest.fail(f"default model missing at {_REAL_DEFAULT_MODEL}: run `python -m engine fetch`")
    return _REAL_DEFAULT_MODEL


@pytest.fixture
def aten_kernels(monkeypatch):
    """int4/int8 on torch's aten kernels with bf16 activations (``MIAOHUI_NATIVE=0``, engine/native/library.py): for
    tests that pin aten's layouts or exact products rather than the int8-activation kernels' (engine/quant/tiled.py)."""
    from engine.native import library as native

    monkeypatch.setenv("MIAOHUI_NATIVE", "0")
    native.int4_sym.cache_clear()
    native.q8act_isa.cache_clear()
    yield
    native.int4_sym.cache_clear()
    native.q8act_isa.cache_clear()
