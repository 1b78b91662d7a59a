"""Chat requests that name collections (``miaohui.collections``, docs/SERVE.md) through the official ``openai`` client
(``extra_body``) against a real server on the tiny model (1024 positions here, room for passages), with a real
collection indexed by ``engine docs add`` in a temporary data folder: the last user message is grounded in the
retrieved passages, the response and the stream's final chunk carry the sources, and a collection the data folder
does not hold is a 404 that names it."""

from __future__ import annotations

import openai
import pytest

from engine.__main__ import main
from tests.engine.serve.conftest import start_server
from tests.helpers.prompts import prompts  # noqa: F401 (fixture)

CONTEXT = 1024


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-1k"), max_position_embeddings=CONTEXT)


@pytest.fixture(scope="module")
def served(tiny_loaded):
    served, stop = start_server(tiny_loaded)
    yield served
    stop()


@pytest.fixture
def notes(home, tmp_path):
    """A collection "notes" in the test's data folder, indexed on keywords (no embedding model there)."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "upgrade.md").write_text("# Upgrade\n\nBack up the database before the upgrade.\n", encoding="utf-8")
    (folder / "lunch.md").write_text("# Lunch\n\nThe canteen opens at noon.\n", encoding="utf-8")
    assert main(["docs", "add", str(folder), "--collection", "notes", "--keywords-only"]) == 0
    return folder


def test_a_request_naming_a_collection_is_grounded_and_returns_its_sources(served, notes, prompts):
    response = served.client().chat.completions.create(
        model=served.worker.model_id, max_tokens=4, temperature=0,
        messages=[{"role": "user", "content": "What should I back up before the upgrade?"}],
        extra_body={"miaohui": {"collections": ["notes"], "docs_mode": "auto"}})
    extra = response.model_extra["miaohui"]
    assert extra["docs_mode"] == "retrieve" and extra["retrieval"] == "keyword" and extra["docs_tokens"] > 0
    first = extra["sources"][0]
    assert first["n"] == 1 and first["path"] == str(notes / "upgrade.md") and first["page"] is None
    assert "Back up the database" in first["text"] and first["score"] > 0
    sent = prompts[-1]
    assert sent.startswith("Answer only from the numbered sources below.")
    assert "[1] upgrade.md\n" in sent and sent.endswith("Question: What should I back up before the upgrade?")
    assert response.usage.prompt_tokens > extra["docs_tokens"]


def test_the_final_stream_chunk_carries_the_sources(served, notes):
    stream = served.client().chat.completions.create(
        model=served.worker.model_id, max_tokens=4, temperature=0, stream=True,
        messages=[{"role": "user", "content": "When does the canteen open?"}],
        extra_body={"miaohui": {"collections": ["notes"]}})
    chunks = list(stream)
    final = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert len(final) == 1
    sources = final[0].model_extra["miaohui"]["sources"]
    assert sources[0]["path"] == str(notes / "lunch.md") and "noon" in sources[0]["text"]
    assert all("miaohui" not in (chunk.model_extra or {}) for chunk in chunks if chunk is not final[0])


def test_an_unknown_collection_is_a_404_naming_it_and_whole_is_a_400(served, notes):
    client = served.client()
    ask = dict(model=served.worker.model_id, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(**ask, extra_body={"miaohui": {"collections": ["nope"]}})
    assert "no collection named 'nope'" in missing.value.message
    with pytest.raises(openai.BadRequestError) as whole:
        client.chat.completions.create(**ask, extra_body={"miaohui": {"collections": ["notes"], "docs_mode": "whole"}})
    assert "searched, not put in whole" in whole.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(**ask, extra_body={"miaohui": {"collections": "notes"}})
    assert "miaohui.collections must be a list" in bad.value.message
    plain = client.chat.completions.create(**ask)  # no miaohui field: an ordinary request, no sources
    assert "miaohui" not in (plain.model_extra or {})
