"""A pure-Python part of the server: stop strings over a stream of deltas (routing a conversation to its session:
tests/engine/core/test_sessions.py)."""

from __future__ import annotations

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
