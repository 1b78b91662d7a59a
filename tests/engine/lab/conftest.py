"""A real ``python -m engine serve`` for the lab's remote runs: the serve tests' own server (the tiny model, its
worker, the FastAPI app and uvicorn on an ephemeral port of 127.0.0.1), started once per module."""

from __future__ import annotations

import pytest

from engine.inputs import LoadSpec
from engine.models.loader import load_model
from tests.engine.serve.conftest import start_server


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    served, stop = start_server(load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu")))
    yield served
    stop()
