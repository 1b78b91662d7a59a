"""The core's session pools (``engine.core.sessions``): routing a conversation to the session whose KV cache holds
its beginning (the server's ``SessionPool``, by prompt prefix)."""

from __future__ import annotations

import pytest

from engine.core.sessions import SessionPool
from engine.events import Message


class _Session:
    """Stands in for a ChatSession: the pool only hands it out, it never calls it."""


def _conversation(*contents: str) -> list[Message]:
    roles = ["user", "assistant"] * len(contents)
    return [Message(role, content) for role, content in zip(roles, contents)]


def test_the_next_turn_goes_to_the_session_holding_the_previous_one():
    pool = SessionPool(_Session, size=4)
    a = pool.route(_conversation("a1"))
    pool.remember(a, _conversation("a1"), "r1")
    b = pool.route(_conversation("b1"))
    pool.remember(b, _conversation("b1"), "r1")
    assert a is not b
    assert pool.route(_conversation("a1", "r1", "a2")) is a
    pool.remember(a, _conversation("a1", "r1", "a2"), "r2")
    assert pool.route(_conversation("b1", "r1", "b2")) is b


def test_a_regenerated_last_turn_reuses_its_session():
    pool = SessionPool(_Session, size=4)
    a = pool.route(_conversation("a1"))
    pool.remember(a, _conversation("a1"), "r1")
    assert pool.route(_conversation("a1")) is a  # the same question again: its prompt is in a's cache


def test_a_reply_that_did_not_finish_still_routes_its_retry():
    pool = SessionPool(_Session, size=4)
    a = pool.route(_conversation("a1"))
    pool.remember(a, _conversation("a1"), None)  # cancelled: the cache holds the prompt, not a reply
    assert pool.route(_conversation("a1")) is a


def test_a_full_pool_gives_the_least_recently_used_session_to_a_new_conversation():
    pool = SessionPool(_Session, size=2)
    a = pool.route(_conversation("a1"))
    pool.remember(a, _conversation("a1"), "r")
    b = pool.route(_conversation("b1"))
    pool.remember(b, _conversation("b1"), "r")
    assert pool.route(_conversation("a1", "r", "a2")) is a  # a is now the most recent
    pool.remember(a, _conversation("a1", "r", "a2"), "r")
    assert pool.route(_conversation("c1")) is b
    assert len(pool.slots) == 2


def test_a_session_being_rewritten_is_not_routed_to_by_its_old_contents():
    pool = SessionPool(_Session, size=2)
    a = pool.route(_conversation("a1"))
    pool.remember(a, _conversation("a1"), "r")
    assert pool.route(_conversation("a1", "r", "a2")) is a
    # a's request failed (no remember): its cache is unknown, so the same start gets a fresh session
    assert pool.route(_conversation("a1", "r", "a2")) is not a
    with pytest.raises(ValueError):
        SessionPool(_Session, size=0)


def test_the_conversation_cache_keeps_the_most_recent_few_and_says_which_were_evicted(monkeypatch):
    import engine.core.sessions as sessions

    monkeypatch.setattr(sessions, "MAX_SESSIONS", 2)
    cache = sessions.SessionCache()
    a, evicted = cache.take(1, _Session)
    assert not evicted
    cache.take(2, _Session)
    cache.take(3, _Session)  # over the bound: conversation 1, the least recently used, goes
    assert cache.kept() == [2, 3]
    again, evicted = cache.take(1, _Session)
    assert evicted and again is not a


def test_the_conversation_cache_respects_its_byte_bound_but_keeps_the_session_in_use(monkeypatch):
    import engine.core.sessions as sessions

    monkeypatch.setattr(sessions, "MAX_SESSION_KV_BYTES", 100)
    cache = sessions.SessionCache()
    cache.take(1, _Session)
    cache.measured(1, 80)
    cache.take(2, _Session)
    cache.measured(2, 500)  # alone over the bound: kept, the other goes
    assert cache.kept() == [2]


def test_a_forks_first_turn_takes_over_its_parents_session_and_forget_drops_one():
    from engine.core.sessions import SessionCache

    cache = SessionCache()
    parent, _ = cache.take(1, _Session)
    child, evicted = cache.take(2, _Session, prefix_from=1)
    assert child is parent and not evicted
    assert cache.take(1, _Session)[1]  # the parent prefills again: said as an eviction
    cache.forget(2)
    assert cache.kept() == [1]
