"""engine/docs/forecast.py: both documents choices counted before sending, exact against the tokenizer and the chat
template (the tiny model's byte-level BPE with ChatML; one test with the real default model's tokenizer), the same
choice and source tokens as the send's ``ground_conversation``, the KV cache's prefix, and the files read once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.docs.attach import ground_conversation
from engine.docs.forecast import AttachedIndex, forecast_documents
from engine.docs.grounding import document_sources, grounded_message
from engine.docs.readers import read_document
from engine.errors import BadInputError
from engine.events import Message
from engine.generate.context import render
from engine.generate.measure import shared_prefix
from tests.helpers.documents import make_pdf
from tests.helpers.tiny_model import build_tiny_tokenizer

SHORT = "The Lyon warehouse closed in March."
QUESTION = "When did the Lyon warehouse close?"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def sites(count: int) -> str:
    body = [f"## Site {i}\n\nThe site number {i} stores paper and ink." for i in range(count)]
    body[7] = f"## Lyon\n\n{SHORT}"
    return "# Sites\n\n" + "\n\n".join(body)


def test_a_small_pdf_fits_whole_and_both_choices_are_counted_exactly(home, tokenizer, tmp_path):
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(make_pdf(["Intro page.", SHORT]))
    messages = [Message("system", "Be brief."), Message("user", QUESTION)]
    f = forecast_documents(tokenizer, 4096, messages, [str(pdf)], "auto", 64)

    whole = document_sources(read_document(pdf))
    frame = tokens(tokenizer, grounded_message(QUESTION, []))
    assert f.chosen == "whole" and f.reason is None and f.retrieval == "keyword"
    assert f.whole is not None and f.whole.fits and f.whole.passages == 2
    assert f.whole.source_tokens == tokens(tokenizer, grounded_message(QUESTION, whole)) - frame
    assert f.whole.prompt_tokens == len(render(tokenizer, [messages[0], Message("user", grounded_message(
        QUESTION, whole))]))
    assert f.whole.cached_tokens == 0 and f.whole.new_tokens == f.whole.prompt_tokens  # nothing cached yet
    assert f.retrieve is not None and f.retrieve.fits and 1 <= f.retrieve.passages <= 2
    assert 0 < f.retrieve.source_tokens <= f.whole.source_tokens
    room = 4096 - len(render(tokenizer, [messages[0], Message("user", grounded_message(QUESTION, []))])) - 64
    assert f.room == room
    data = f.as_json()
    assert data["whole_tokens"] == f.whole.source_tokens and data["retrieve_tokens"] == f.retrieve.source_tokens
    assert data["chosen"] == "whole" and data["whole"]["prefill_tokens"] == f.whole.prompt_tokens


def test_too_large_for_the_context_auto_retrieves_and_says_why(home, tokenizer, tmp_path):
    notes = tmp_path / "sites.md"
    notes.write_text(sites(40), encoding="utf-8")
    messages = [Message("user", QUESTION)]
    f = forecast_documents(tokenizer, 1024, messages, [str(notes)], "auto", 4)
    assert f.chosen == "retrieve"
    assert f.whole is not None and not f.whole.fits and f.whole.source_tokens > f.room
    assert f.reason == (f"the documents are {f.whole.source_tokens} tokens but {f.room} fit beside the conversation "
                        f"and the reply (context 1024)")
    assert f.retrieve is not None and f.retrieve.fits and 0 < f.retrieve.source_tokens <= f.room
    assert f.whole.prompt_tokens > 1024 > f.retrieve.prompt_tokens  # the whole prompt was counted all the same
    # the very choice and tokens the send's grounding takes
    _, used = ground_conversation(tokenizer, 1024, messages, [str(notes)], "auto", 4)
    assert used.mode == "retrieve" and used.source_tokens == f.retrieve.source_tokens
    assert len(used.sources) == f.retrieve.passages and SHORT in used.sources[0].text


@pytest.mark.parametrize("mode", ["whole", "retrieve"])
def test_a_forced_choice_is_the_chosen_one_and_matches_the_send(home, tokenizer, tmp_path, mode):
    notes = tmp_path / "notes.md"
    notes.write_text(sites(10), encoding="utf-8")
    messages = [Message("user", QUESTION)]
    f = forecast_documents(tokenizer, 4096, messages, [str(notes)], mode, 16)
    assert f.chosen == mode and f.whole is not None and f.retrieve is not None
    grounded, used = ground_conversation(tokenizer, 4096, messages, [str(notes)], mode, 16)
    chosen = f.whole if mode == "whole" else f.retrieve
    assert used.source_tokens == chosen.source_tokens
    assert len(render(tokenizer, grounded)) == chosen.prompt_tokens


def test_a_follow_up_finds_the_earlier_turns_document_in_the_kv_cache(home, tokenizer, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text(sites(10), encoding="utf-8")
    whole = document_sources(read_document(notes))
    first = [Message("user", grounded_message(QUESTION, whole)), Message("assistant", "In March [1].")]
    cached = render(tokenizer, first)[:-2]  # the KV cache holds the first turn (not the template's last markup)
    messages = first + [Message("user", "And which site stores ink?")]
    f = forecast_documents(tokenizer, 8192, messages, [str(notes)], "auto", 16, cached_ids=cached)
    assert f.whole is not None and f.retrieve is not None
    for choice in (f.whole, f.retrieve):
        ids = render(tokenizer, messages[:-1] + [Message("user", grounded_message(
            messages[-1].content, whole if choice is f.whole else []))])
        assert choice.cached_tokens == shared_prefix(cached, ids) > tokens(tokenizer, whole[0].text)
        assert choice.new_tokens == choice.prompt_tokens - choice.cached_tokens
    assert f.retrieve.new_tokens < f.whole.new_tokens


def test_the_index_reads_a_file_again_only_when_it_changed(home, tokenizer, tmp_path, monkeypatch):
    import engine.docs.readers as readers

    reads: list[str] = []
    real_read = readers.read_document
    monkeypatch.setattr(readers, "read_document", lambda path, *a, **k: reads.append(path.name) or real_read(
        path, *a, **k))  # the real reader, its calls counted
    notes = tmp_path / "notes.txt"
    notes.write_text("The kettle boils in ninety seconds.", encoding="utf-8")
    index = AttachedIndex()
    try:
        first = index.whole([str(notes)])
        assert index.whole([str(notes)]) == first and reads == ["notes.txt"]  # each pause in typing: not again
        found, kind = index.search("kettle", [str(notes)], ())
        assert kind == "keyword" and "ninety" in found[0].text
        notes.write_text("The kettle boils in two minutes now.", encoding="utf-8")
        os.utime(notes, ns=(notes.stat().st_atime_ns, notes.stat().st_mtime_ns + 10_000_000))
        assert "two minutes" in index.whole([str(notes)])[0].text
        found, _ = index.search("kettle", [str(notes)], ())
        assert "two minutes" in found[0].text and "ninety" not in found[0].text
        stores = list(Path(index._folder.name).glob("attached-*.sqlite3"))
        assert len(stores) == 1  # the index of the file as it was is gone
    finally:
        index.close()


def test_nothing_attached_is_refused_and_only_collections_are_retrieved_even_in_whole_mode(home, tokenizer,
                                                                                        tmp_path):
    from engine import paths
    from engine.docs.index import index_paths
    from engine.docs.store import DocumentStore

    with pytest.raises(BadInputError, match="attach a file"):
        forecast_documents(tokenizer, 4096, [Message("user", QUESTION)], [], "auto", 16)
    notes = tmp_path / "sites.md"
    notes.write_text(sites(12), encoding="utf-8")
    with DocumentStore(paths.documents_path()) as store:
        index_paths(store, "notes", [notes])
    for mode in ("auto", "whole", "retrieve"):
        f = forecast_documents(tokenizer, 4096, [Message("user", QUESTION)], [], mode, 16, collections=["notes"])
        assert f.chosen == "retrieve" and f.whole is None and f.retrieve is not None
        assert f.requested == ("retrieve" if mode == "whole" else mode)
        assert f.retrieve.passages >= 1 and f.retrieve.cached_tokens == 0 and f.reason is None


def test_the_real_default_models_tokenizer_counts_the_same_way(home, default_model_dir, tmp_path):
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained(default_model_dir)
    notes = tmp_path / "notes.md"
    notes.write_text(sites(12), encoding="utf-8")
    messages = [Message("user", QUESTION)]
    f = forecast_documents(real, 8192, messages, [str(notes)], "auto", 256)
    _, used = ground_conversation(real, 8192, messages, [str(notes)], "auto", 256)
    assert f.chosen == used.mode == "whole" and f.whole is not None
    assert f.whole.source_tokens == used.source_tokens
    assert f.retrieve is not None and f.retrieve.source_tokens < f.whole.source_tokens


def test_the_send_grounds_from_the_index_the_forecast_made_without_reading_or_indexing_again(
        home, tokenizer, tmp_path, monkeypatch):
    import engine.docs.index as index_module
    import engine.docs.readers as readers

    notes = tmp_path / "sites.md"
    notes.write_text(sites(40), encoding="utf-8")
    messages = [Message("user", QUESTION)]
    plain = ground_conversation(tokenizer, 1024, messages, [str(notes)], "auto", 4)  # no index: reads, indexes
    calls: list[str] = []
    real_read, real_index = readers.read_document, index_module.index_paths
    monkeypatch.setattr(readers, "read_document", lambda *a, **k: calls.append("read") or real_read(*a, **k))
    monkeypatch.setattr(index_module, "index_paths", lambda *a, **k: calls.append("index") or real_index(*a, **k))
    index = AttachedIndex()
    try:
        f = forecast_documents(tokenizer, 1024, messages, [str(notes)], "auto", 4, index=index)
        assert calls == ["read", "index"]
        grounded = ground_conversation(tokenizer, 1024, messages, [str(notes)], "auto", 4, index=index)
        assert calls == ["read", "index"]  # the send found both made
        assert grounded[0] == plain[0] and grounded[1].sources == plain[1].sources
        assert grounded[1].source_tokens == f.retrieve.source_tokens
    finally:
        index.close()
