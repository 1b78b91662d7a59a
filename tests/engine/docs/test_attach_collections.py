"""``ground_conversation`` with a conversation's collections (the window's 📚 choice): the question is grounded in
passages searched in the real store of the data folder, a collection is retrieved even when the conversation's mode
says "whole" (whole means attached files), and a collection removed since it was picked is its one-line error."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from engine import paths
from engine.docs.attach import ground_conversation
from engine.docs.index import index_paths
from engine.docs.store import DocumentStore
from engine.errors import CollectionNotFoundError
from engine.events import Message


@pytest.fixture
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def test_collections_ground_the_question_retrieved_even_in_whole_mode(home, tmp_path, tokenizer):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "tea.md").write_text("# Tea\n\nThe kettle boils water in ninety seconds.", encoding="utf-8")
    (folder / "lamp.md").write_text("# Lamps\n\nThe hall lamp is blue.", encoding="utf-8")
    with DocumentStore(paths.documents_path()) as store:
        index_paths(store, "notes", [folder])
    question = [Message("user", "How fast does the kettle boil?")]
    messages, used = ground_conversation(tokenizer, 256, question, (), "whole", 4, collections=("notes",))
    assert used.mode == "retrieve" and used.retrieval == "keyword"
    assert used.sources[0].path.endswith("tea.md") and "ninety seconds" in messages[-1].content
    assert messages[-1].content.endswith("Question: How fast does the kettle boil?")
    with pytest.raises(CollectionNotFoundError, match="no collection named gone"):
        ground_conversation(tokenizer, 256, question, (), "auto", 4, collections=("gone",))
