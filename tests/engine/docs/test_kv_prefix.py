"""A document's KV prefix kept across conversations (``engine.docs.kv_prefix``), on the tiny model: the boundary found
by tokenizing, a new session prefilling only the question, from memory and from a sealed file, and what must not
match or must be refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.docs.attach import ground_conversation
from engine.docs.kv_prefix import DocumentPrefixes, document_prefix_ids, prefix_key
from engine.events import Finished, Message, Started, Token
from engine.generate.context import render
from engine.generate.kv_store import KVStore
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model

GREEDY = SamplingConfig(temperature=0.0, top_k=0, top_p=1.0, repetition_penalty=1.0, max_new_tokens=8)
SYSTEM = Message("system", "Be brief.")
NOTES = "The KV cache stores keys and values.\nParis is the capital of France."


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


@pytest.fixture
def notes(tmp_path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text(NOTES, encoding="utf-8")
    return path


def grounded(loaded, question: str, path: Path, system: Message = SYSTEM) -> list[Message]:
    messages, used = ground_conversation(loaded.tokenizer, loaded.facts.context_length,
                                         [system, Message("user", question)], [str(path)], "whole",
                                         GREEDY.max_new_tokens)
    assert used.mode == "whole"
    return messages


def reply(session: ChatSession, messages) -> tuple[Started, list[int], Finished]:
    events = list(session.generate(messages, GREEDY))
    assert isinstance(events[0], Started) and isinstance(events[-1], Finished) and events[-1].error is None
    return events[0], [e.token_id for e in events if isinstance(e, Token)], events[-1]


def first_turn(loaded, prefixes: DocumentPrefixes, messages, question: str) -> tuple[int, ...]:
    """A first conversation's turn, its document prefix then kept."""
    ids = document_prefix_ids(loaded.tokenizer, messages, question)
    session = ChatSession(loaded)
    reply(session, messages)
    assert prefixes.keep(session, ids)
    return ids


def test_the_boundary_is_what_two_questions_on_the_same_document_share_and_ends_after_the_sources(loaded, notes):
    one = grounded(loaded, "What is the capital?", notes)
    other = grounded(loaded, "Hello?", notes)
    ids = document_prefix_ids(loaded.tokenizer, one, "What is the capital?")
    assert ids == document_prefix_ids(loaded.tokenizer, other, "Hello?")
    for messages in (one, other):  # each prompt, tokenized whole, starts with exactly these ids
        assert tuple(render(loaded.tokenizer, messages)[:len(ids)]) == ids
    text = loaded.tokenizer.decode(list(ids))
    assert "Paris is the capital of France." in text and text.rstrip().endswith("Question:")
    assert document_prefix_ids(loaded.tokenizer, [SYSTEM, Message("user", "Hello?")], "Hello?") is None  # not grounded


def test_a_new_conversation_prefills_only_its_question_and_answers_as_a_cold_run(loaded, notes):
    prefixes = DocumentPrefixes()  # memory only
    ids = first_turn(loaded, prefixes, grounded(loaded, "What is the capital?", notes), "What is the capital?")
    question = "Hello?"
    second = grounded(loaded, question, notes)
    warm = ChatSession(loaded)
    pending = prefixes.reopen(warm, document_prefix_ids(loaded.tokenizer, second, question))
    started, warm_tokens, _ = reply(warm, second)
    assert pending.hit is not None and pending.hit.source == "memory" and pending.hit.tokens == len(ids)
    assert started.reused_tokens == len(ids)
    assert started.prompt_tokens - started.reused_tokens == len(render(loaded.tokenizer, second)) - len(ids)
    cold_started, cold_tokens, _ = reply(ChatSession(loaded), second)
    assert cold_started.reused_tokens == 0
    assert warm_tokens == cold_tokens  # greedy: the same reply from the kept rows as from computing them


def test_a_prefix_on_disk_serves_a_new_instance_after_a_restart(loaded, notes, tmp_path):
    folder = tmp_path / "kv"
    first = DocumentPrefixes(lambda: KVStore(folder))
    ids = first_turn(loaded, first, grounded(loaded, "What is the capital?", notes), "What is the capital?")
    assert len(list(folder.glob("*.kv"))) == 1
    restarted = DocumentPrefixes(lambda: KVStore(folder))  # nothing in memory: a new process
    question = "Who are you?"
    second = grounded(loaded, question, notes)
    session = ChatSession(loaded)
    pending = restarted.reopen(session, document_prefix_ids(loaded.tokenizer, second, question))
    started, tokens, _ = reply(session, second)
    assert pending.hit is not None and pending.hit.source == "disk" and started.reused_tokens == len(ids)
    assert tokens == reply(ChatSession(loaded), second)[1]
    assert restarted.held() == [ids]  # held in memory from then on


def test_another_document_or_system_prompt_does_not_match(loaded, notes, tmp_path):
    prefixes = DocumentPrefixes(lambda: KVStore(tmp_path / "kv"))
    first_turn(loaded, prefixes, grounded(loaded, "What is the capital?", notes), "What is the capital?")
    other_file = tmp_path / "other.txt"
    other_file.write_text(NOTES.replace("Paris", "Lyon"), encoding="utf-8")
    identity = ChatSession(loaded).kv_identity()
    for messages in (grounded(loaded, "Hello?", other_file),
                     grounded(loaded, "Hello?", notes, Message("system", "Be kind."))):
        ids = document_prefix_ids(loaded.tokenizer, messages, "Hello?")
        assert ids is not None and prefixes.find(ids, identity) is None
        session = ChatSession(loaded)
        pending = prefixes.reopen(session, ids)
        started, _, _ = reply(session, messages)
        assert pending.hit is None and started.reused_tokens == 0


def test_the_memory_budget_drops_the_least_recently_used_prefix(loaded, notes, tmp_path):
    prefixes = DocumentPrefixes()
    a = first_turn(loaded, prefixes, grounded(loaded, "Hello?", notes), "Hello?")
    one = prefixes.held_bytes
    prefixes.memory_bytes = 2 * one + one // 2  # room for two
    others = []
    for name in ("b", "c"):
        path = tmp_path / f"{name}.txt"
        path.write_text(NOTES.replace("Paris", name.upper()), encoding="utf-8")
        messages = grounded(loaded, "Hello?", path)
        others.append(document_prefix_ids(loaded.tokenizer, messages, "Hello?"))
        if name == "c":  # a was used since b was kept: b is now the least recently used
            assert prefixes.find(a, ChatSession(loaded).kv_identity()) is not None
        first_turn(loaded, prefixes, messages, "Hello?")
    assert prefixes.held() == [a, others[1]]
    assert prefixes.held_bytes <= prefixes.memory_bytes


def test_a_tampered_file_is_refused_cleanly_and_the_reply_computes_its_prompt(loaded, notes, tmp_path):
    folder = tmp_path / "kv"
    first_turn(loaded, DocumentPrefixes(lambda: KVStore(folder)), grounded(loaded, "What is the capital?", notes),
               "What is the capital?")
    (path,) = folder.glob("*.kv")
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # one flipped byte in the rows
    path.write_bytes(bytes(data))
    restarted = DocumentPrefixes(lambda: KVStore(folder))
    messages = grounded(loaded, "Hello?", notes)
    session = ChatSession(loaded)
    pending = restarted.reopen(session, document_prefix_ids(loaded.tokenizer, messages, "Hello?"))
    started, tokens, _ = reply(session, messages)
    assert pending.hit is None and started.reused_tokens == 0
    assert len(restarted.discarded) == 1 and "MAC does not verify" in restarted.discarded[0]
    assert not path.exists()  # the store's own damaged file is deleted
    assert tokens == reply(ChatSession(loaded), messages)[1]


def test_the_key_names_the_model_and_its_precisions(loaded):
    identity = ChatSession(loaded).kv_identity()
    ids = tuple(range(40))
    assert prefix_key(ids, identity) != prefix_key(ids, type(identity)(**{**vars(identity), "kv_precision": "int8"}))
    assert prefix_key(ids, identity) != prefix_key(ids, type(identity)(**{**vars(identity), "model": "0" * 64}))


def test_a_conversations_own_saved_cache_is_tried_first_and_the_document_prefix_after_it(loaded, notes):
    prefixes = DocumentPrefixes()
    ids = first_turn(loaded, prefixes, grounded(loaded, "What is the capital?", notes), "What is the capital?")
    messages = grounded(loaded, "Hello?", notes)
    own = ChatSession(loaded)
    reply(own, messages)
    own_rows = own.snapshot()  # the conversation's own cache: its question and reply too
    tried = []
    for saved in (None, own_rows):  # no usable file of its own, then one
        session = ChatSession(loaded)
        session.reopen_with(lambda saved=saved: tried.append(saved) or saved)  # what engine.core.kv_persist arranges
        pending = prefixes.reopen(session, document_prefix_ids(loaded.tokenizer, messages, "Hello?"))
        started, _, _ = reply(session, messages)
        if saved is None:
            assert pending.hit is not None and started.reused_tokens == len(ids)
        else:
            assert pending.hit is None and started.reused_tokens == started.prompt_tokens - 1
    assert tried == [None, own_rows]


def test_only_a_first_turn_keeps_or_looks_up_a_document_prefix(loaded, notes):
    prefixes = DocumentPrefixes()
    first = grounded(loaded, "Hello?", notes)
    fresh = ChatSession(loaded)
    pending = prefixes.prepare(fresh, first, "Hello?")
    assert pending is not None and pending.ids == document_prefix_ids(loaded.tokenizer, first, "Hello?")
    later = [SYSTEM, Message("user", "Hi"), Message("assistant", "Hello."), first[-1]]
    assert prefixes.prepare(ChatSession(loaded), later, "Hello?") is None  # its prefix is this conversation's alone
