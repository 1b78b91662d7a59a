"""A real ``python -m engine serve`` for the remote-engine tests: the serve tests' own server (the tiny model, its
worker, the FastAPI app and uvicorn on an ephemeral port of 127.0.0.1), and a ``RemoteSpec`` pointing at it."""

from __future__ import annotations

import pytest

from engine.inputs import LoadSpec
from engine.models.loader import load_model
from engine.remote import RemoteSpec
from tests.engine.serve.conftest import KEY, start_server

__all__ = ["KEY"]


@pytest.fixture(scope="module")
def tiny_loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


@pytest.fixture(scope="module")
def server(tiny_loaded):
    served, stop = start_server(tiny_loaded)
    yield served
    stop()


@pytest.fixture
def spec(server) -> RemoteSpec:
    return RemoteSpec(server.url, "default", server.key)
