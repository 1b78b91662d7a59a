"""``engine.core.models.ModelShelf``: one model per kind, a byte budget, the least recently used others unloaded."""

from __future__ import annotations

import pytest

from engine.core.models import ModelRecord, ModelShelf


def test_a_chat_model_and_an_embedder_are_held_side_by_side_and_reported():
    shelf = ModelShelf()
    chat, embedder = object(), object()
    assert shelf.put("chat", "tiny", chat, 1000) == ()
    assert shelf.put("embedding", "bge", embedder, 300) == ()
    assert shelf.records() == (ModelRecord("tiny", "chat", 1000), ModelRecord("bge", "embedding", 300))
    assert shelf.get("chat") is chat and shelf.get("embedding") is embedder and shelf.get("vision") is None
    assert shelf.total_bytes() == 1300


def test_a_new_model_of_a_kind_replaces_the_old():
    shelf = ModelShelf()
    shelf.put("chat", "a", object(), 10)
    new = object()
    shelf.put("chat", "b", new, 20)
    assert shelf.records() == (ModelRecord("b", "chat", 20),) and shelf.get("chat") is new


def test_past_the_budget_the_least_recently_used_other_is_unloaded_never_the_one_asked_for():
    shelf = ModelShelf(budget_bytes=1000)
    shelf.put("chat", "tiny", object(), 600)
    shelf.put("embedding", "bge", object(), 300)
    shelf.get("chat")  # the chat model is used: the embedder is now the least recently used
    unloaded = shelf.put("vision", "siglip", object(), 300)
    assert unloaded == (ModelRecord("bge", "embedding", 300),)
    assert [r.kind for r in shelf.records()] == ["chat", "vision"]
    alone = shelf.put("embedding", "huge", object(), 5000)  # alone over the budget: kept, the others go
    assert [r.kind for r in alone] == ["chat", "vision"]
    assert shelf.records() == (ModelRecord("huge", "embedding", 5000),)


def test_unknown_kinds_and_negative_budgets_are_refused():
    with pytest.raises(ValueError):
        ModelShelf().put("audio", "x", object(), 1)
    with pytest.raises(ValueError):
        ModelShelf(budget_bytes=-1)


def test_a_pinned_kind_is_never_unloaded_and_says_what_fits_beside_it():
    shelf = ModelShelf(budget_bytes=1000, pinned=frozenset({"chat"}))
    shelf.put("chat", "server-model", object(), 800)
    assert shelf.fits_beside_pinned("embedding", 200) and not shelf.fits_beside_pinned("embedding", 201)
    assert shelf.put("embedding", "big", object(), 500) == ()  # over the budget, but the chat model stays
    assert [r.kind for r in shelf.records()] == ["chat", "embedding"]


def test_the_machines_budget_is_a_fraction_of_its_ram_on_the_cpu():
    import psutil

    from engine.core.models import RAM_FRACTION, machine_budget_bytes

    assert machine_budget_bytes("cpu") == int(psutil.virtual_memory().total * RAM_FRACTION) > 0
    # No GPU to ask (or torch not imported): a CUDA device is judged by the RAM rather than failing.
    assert machine_budget_bytes("cuda") > 0
