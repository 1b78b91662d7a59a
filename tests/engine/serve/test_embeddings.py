"""``POST /v1/embeddings`` through the official ``openai`` client on a real server: one string and a list, float and
base64 (the client's default) giving the same unit vectors as the engine's embedder, usage from its tokenizer, 400 on
bad input, 404 for another model's name, 503 while no embedding model is installed. The embedder is the tiny real
BERT the docs tests build (random weights: the vectors' meaning is not what is checked)."""

from __future__ import annotations

import json

import numpy as np
import openai
import pytest

from engine.docs.embed import TransformersEmbedder
from engine.serve.embeddings import Embeddings
from tests.engine.serve.conftest import start_server
from tests.helpers.documents import make_tiny_encoder

WORDS = ["the", "lyon", "warehouse", "closed", "in", "march", "water", "ficus"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return TransformersEmbedder(make_tiny_encoder(tmp_path_factory.mktemp("encoder"), WORDS), name="tiny-bert")


@pytest.fixture(scope="module")
def served(tiny_loaded, encoder):
    found: list[int] = []

    def find():
        found.append(1)
        return encoder

    server, stop = start_server(tiny_loaded, embeddings=Embeddings(find))
    yield server, found
    stop()


def test_one_string_and_a_list_through_the_openai_client(served, encoder):
    server, found = served
    client = server.client()
    one = client.embeddings.create(model="tiny-bert", input="the lyon warehouse closed")
    assert one.model == "tiny-bert" and len(one.data) == 1 and one.data[0].index == 0
    vector = np.array(one.data[0].embedding, dtype=np.float32)
    assert vector.shape == (32,) and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    # [CLS] the lyon warehouse closed [SEP]
    assert one.usage.prompt_tokens == one.usage.total_tokens == 6

    texts = ["the lyon warehouse closed in march", "water the ficus"]
    many = client.embeddings.create(model="tiny-bert", input=texts)  # the client asks for base64 and decodes it
    got = np.array([d.embedding for d in sorted(many.data, key=lambda d: d.index)], dtype=np.float32)
    np.testing.assert_allclose(got, encoder.embed(texts), atol=1e-6)
    assert many.usage.prompt_tokens == 8 + 5
    floats = client.embeddings.create(model="default", input=texts, encoding_format="float")
    np.testing.assert_allclose(np.array([d.embedding for d in floats.data], dtype=np.float32), got, atol=1e-6)
    assert found == [1]  # found once, on the first request


@pytest.mark.parametrize("body, param", [
    ({"model": "tiny-bert", "input": []}, "input"),
    ({"model": "tiny-bert", "input": ""}, "input"),
    ({"model": "tiny-bert", "input": [[101, 2003]]}, "input"),
    ({"model": "tiny-bert", "input": 3}, "input"),
    ({"input": "hello"}, "model"),
    ({"model": "tiny-bert", "input": "hi", "encoding_format": "hex"}, "encoding_format"),
    ({"model": "tiny-bert", "input": "hi", "dimensions": 8}, "dimensions"),
])
def test_bad_input_is_a_400_with_the_field_named(served, body, param):
    server, _ = served
    status, _, raw = server.raw("POST", "/v1/embeddings", body)
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == param and error["type"] == "invalid_request_error"


def test_a_bad_input_raises_the_clients_bad_request_error(served):
    with pytest.raises(openai.BadRequestError, match="input must be a string"):
        served[0].client().embeddings.create(model="tiny-bert", input=[])


def test_another_models_name_is_a_404(served):
    with pytest.raises(openai.NotFoundError, match="embeds with 'tiny-bert'"):
        served[0].client().embeddings.create(model="text-embedding-3-small", input="hello")


def test_no_embedding_model_is_a_503_that_says_how_to_install_one(tiny_loaded, encoder):
    installed: list[TransformersEmbedder] = []
    server, stop = start_server(tiny_loaded, embeddings=Embeddings(lambda: installed[0] if installed else None))
    try:
        with pytest.raises(openai.InternalServerError) as info:
            server.client().embeddings.create(model="tiny-bert", input="hello")
        assert info.value.status_code == 503 and "engine docs fetch-embedder" in str(info.value)
        installed.append(encoder)  # fetched while the server runs: the next request finds it
        assert len(server.client().embeddings.create(model="tiny-bert", input="hello").data) == 1
    finally:
        stop()
