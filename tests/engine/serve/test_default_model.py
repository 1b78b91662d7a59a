"""The real default model behind the server answers one short greedy request."""

from __future__ import annotations

import pytest

from engine.inputs import LoadSpec
from engine.models.loader import load_model
from tests.engine.serve.conftest import start_server


@pytest.mark.default_model
def test_default_model_answers_paris_through_the_server(default_model_dir):
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision="bf16", device="cpu"))
    served, stop = start_server(loaded)
    try:
        reply = served.client().chat.completions.create(
            model="default", messages=[{"role": "user", "content": "What is the capital of France?"}],
            temperature=0, max_tokens=24)
        assert "Paris" in reply.choices[0].message.content
        assert reply.model == served.worker.model_id == loaded.facts.name
        assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens <= 24
    finally:
        stop()
