"""``recorded_prompts``: the last user message of every prompt the engine builds, with the real ``build_prompt`` still
running (engine/generate/session.py). The documents tests (the CLI's --doc, the server's collections, the window's
attachments) read it to see what the model was asked. Owns nothing else."""

from __future__ import annotations

import pytest

from engine.generate import session as session_module


@pytest.fixture
def prompts(monkeypatch) -> list[str]:
    """The last user message of every prompt built while the test runs, in order."""
    seen: list[str] = []
    real = session_module.build_prompt

    def recording(tokenizer, messages, *args, **kwargs):
        seen.append(messages[-1].content)
        return real(tokenizer, messages, *args, **kwargs)

    monkeypatch.setattr(session_module, "build_prompt", recording)
    return seen
