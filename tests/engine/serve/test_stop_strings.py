"""The two pure-Python parts of the server: stop strings over a stream of deltas, and routing a conversation to
the session whose KV cache holds its beginning."""

from __future__ import annotations

import pytest

from engine.events import Message
from engine.serve.sessions import SessionPool
from engine.serve.stops import StopMatcher


def _feed(stops, deltas):
    matcher = StopMatcher(stops)
    shown = [matcher.push(d) for d in deltas]
    return shown, matcher.flush(), matcher


def test_no_stop_strings_pass_everything_through():
    shown, tail, matcher = _feed([], ["Hel", "lo"])
    assert shown == ["Hel", "lo"] and tail == "" and matcher.text == "Hello" and matcher.matched is None


def test_a_stop_string_split_across_deltas_is_held_back_then_cut():
    shown, tail, matcher = _feed(["\nUser:"], ["Paris.", "\nUs", "er:", " more"])
    assert shown == ["Paris.", "", "", ""] and tail == ""
    assert matcher.text == "Paris." and matcher.matched == "\nUser:"


def test_a_held_back_start_that_does_not_complete_is_let_out():
    shown, tail, matcher = _feed(["STOP"], ["a ST", "ray", " cat ST"])
    assert shown == ["a ", "STray", " cat "] and tail == "ST" and matcher.text == "a STray cat ST"


def test_the_earliest_of_several_stops_wins_and_nothing_after_it_shows():
    shown, tail, matcher = _feed(["world", "lo w"], ["hello world", "!"])
    assert matcher.text == "hel" and matcher.matched == "lo w" and shown[1] == "" and tail == ""


def test_a_stop_inside_one_delta_cuts_at_its_start():
    assert _feed(["."], ["Paris. Then"])[2].text == "Paris"
    assert _feed(["Paris"], ["Paris"])[2].text == ""


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
