"""Stop strings matched incrementally (issue 31, defect 4): the same answers however the text is split, and work
per character that does not grow with the reply or with the stop strings' length. Work is counted in bytecodes
run inside engine/serve/stops.py (``sys.settrace`` opcode events), never timed."""

from __future__ import annotations

import random
import sys

import openai
import pytest

from engine.errors import BadInputError
from engine.serve import stops as stops_module
from engine.serve.stops import MAX_STOP_CHARS, MAX_STOPS, StopMatcher, check_stops


def _feed(stops, deltas):
    matcher = StopMatcher(stops)
    shown = [matcher.push(d) for d in deltas]
    return shown, matcher.flush(), matcher


def _reference(stops, text):
    """What the whole text gives at once: cut at the first place a stop string ends (the longest ending there)."""
    ends = [(text.find(s) + len(s), -len(s), s) for s in stops if s and s in text]
    if not ends:
        return text, None
    end, _, stop = min(ends)
    return text[:end - len(stop)], stop


def _splits(text, rng):
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 6)))) if len(text) > 1 else []
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


@pytest.mark.parametrize("stops, text", [
    (["\nUser:"], "Paris.\nUser: more"),
    (["abcd", "bc"], "xxabcdyy"),  # "bc" ends first
    (["aab"], "aaaab!"),  # a partial match that must fall back, not restart
    (["abab"], "abaabababx"),  # overlapping with itself
    (["秒回", "😀x"], "你好😀😀x秒回"),  # unicode: characters, not bytes
    (["ababc", "bab"], "abababc"),
    (["STOP"], "a STray cat ST"),  # never completes: everything comes out at the end
    (["</s>", "\n\n"], "one\ntwo\n\nthree"),
])
def test_every_split_of_the_text_gives_the_answer_of_the_whole(stops, text):
    rng = random.Random(31)
    expected = _reference(stops, text)
    for _ in range(60):
        deltas = _splits(text, rng)
        shown, tail, matcher = _feed(stops, deltas)
        assert (matcher.text, matcher.matched) == expected, deltas
        assert "".join(shown) + tail == matcher.text  # what streamed is exactly the reply


def test_held_back_text_is_exactly_the_partial_match():
    matcher = StopMatcher(["Observation:"])
    assert matcher.push("I think. Obs") == "I think. "  # "Obs" might begin the stop string
    assert matcher.push("erv") == ""
    assert matcher.push("ed it") == "Observed it"  # it did not: let out whole
    assert matcher.push(" Observation: x") == " " and matcher.matched == "Observation:"
    assert matcher.push("more") == "" and matcher.flush() == "" and matcher.text == "I think. Observed it "


def test_stop_strings_past_the_caps_are_refused_with_one_line():
    assert check_stops(["", "a" * MAX_STOP_CHARS]) == ("a" * MAX_STOP_CHARS,)
    with pytest.raises(BadInputError, match=f"at most {MAX_STOP_CHARS}") as info:
        StopMatcher(["ok", "x" * (MAX_STOP_CHARS + 1)])
    assert "\n" not in str(info.value) and "stop string 2" in str(info.value)
    with pytest.raises(BadInputError, match=f"at most {MAX_STOPS} stop strings"):
        check_stops(["s"] * (MAX_STOPS + 1))


def _work(matcher, deltas) -> list[int]:
    """Bytecodes run inside stops.py for each push."""
    counts: list[int] = []
    count = 0

    def trace(frame, event, _arg):
        nonlocal count
        if frame.f_code.co_filename != stops_module.__file__:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        for delta in deltas:
            count = 0
            matcher.push(delta)
            counts.append(count)
    finally:
        sys.settrace(None)
    return counts


def test_work_per_character_stays_bounded_as_the_reply_and_the_stops_grow():
    # A model repeating itself against a long stop string that it keeps almost matching: the held-back tail
    # grows to the stop's length, and re-checking every prefix of it at each token was quadratic in it.
    reply = ["a"] * 1500
    long_stop = "a" * (MAX_STOP_CHARS - 1) + "b"
    long_work = _work(StopMatcher([long_stop] + [f"stop {i}" for i in range(MAX_STOPS - 1)]), reply)
    short_work = _work(StopMatcher(["ab"] + [f"stop {i}" for i in range(MAX_STOPS - 1)]), reply)
    late, early = sum(long_work[-300:]), sum(long_work[:300])
    assert late <= 1.5 * early, (early, late)  # as cheap at token 1,500 as at the start
    assert sum(long_work) <= 2 * sum(short_work), (sum(long_work), sum(short_work))  # the stop's length costs nothing
    # Text with no character of any stop string is let out without running the automata.
    plain = _work(StopMatcher(["Observation:"]), ["xyz "] * 200)
    assert max(plain) == max(plain[:5])


def test_the_server_refuses_a_stop_string_past_the_cap_and_keeps_serving(server):
    client = server.client()
    messages = [{"role": "user", "content": "Hello"}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=server.worker.model_id, messages=messages, max_tokens=2,
                                       stop=["ok", "x" * (MAX_STOP_CHARS + 1)])
    error = info.value.body
    assert info.value.status_code == 400 and error["param"] == "stop" and str(MAX_STOP_CHARS) in error["message"]
    # Sixteen stop strings, one of them at the cap, are still accepted (what the server took before).
    stops = ["y" * MAX_STOP_CHARS] + [f"never {i}" for i in range(MAX_STOPS - 1)]
    reply = client.chat.completions.create(model=server.worker.model_id, messages=messages, max_tokens=4, temperature=0, stop=stops)
    assert reply.choices[0].finish_reason in ("stop", "length")
