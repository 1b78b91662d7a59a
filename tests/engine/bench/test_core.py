"""engine.bench.core: warm-up apart, variants alternated per repetition, medians and ratios of the values
that exist, best-of timing with the device's synchronisation, the per-token clock."""

from __future__ import annotations

import pytest

from engine.bench import core


def test_measure_warms_up_once_then_rotates_the_variants_each_repetition():
    calls: list[tuple[str, str]] = []

    def scenario(name):
        def fn(variant):
            calls.append((name, variant))
            return {f"{name}_s": len(calls), "_tag": variant}
        return fn

    progress: list[str] = []
    measured = core.measure({"a": "a", "b": "b", "c": "c"}, [("x", scenario("x")), ("y", scenario("y"))], 2,
                            progress.append)
    warmup, timed = calls[:6], calls[6:]
    assert warmup == [("x", "a"), ("y", "a"), ("x", "b"), ("y", "b"), ("x", "c"), ("y", "c")]
    assert timed == [("x", "a"), ("x", "b"), ("x", "c"), ("y", "a"), ("y", "b"), ("y", "c"),
                     ("x", "b"), ("x", "c"), ("x", "a"), ("y", "b"), ("y", "c"), ("y", "a")]
    assert set(measured.warmup_s) == {"a", "b", "c"} and all(v >= 0 for v in measured.warmup_s.values())
    assert measured.runs["a"] == {"x_s": [7, 15], "_tag": ["a", "a", "a", "a"], "y_s": [10, 18]}
    assert progress[0] == "warm-up a" and progress[3] == "rep 1/2 x a" and progress[-1] == "rep 2/2 y a"


def test_rotated():
    assert core.rotated(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert core.rotated(["a", "b", "c"], 4) == ["b", "c", "a"]


def test_summarise_keeps_the_values_that_exist_and_divides_by_the_baseline():
    runs = {"baseline": {"t": [2.0, None, 4.0]}, "fast": {"t": [6.0, 9.0, 12.0]}, "none": {"t": [None]}}
    out = core.summarise(runs, {"t": ("s", "lower"), "absent": ("tok/s", "higher")})
    assert list(out) == ["t", "absent"]
    t = out["t"]
    assert (t["unit"], t["better"]) == ("s", "lower")
    assert t["runs"] == {"baseline": [2.0, 4.0], "fast": [6.0, 9.0, 12.0], "none": []}
    assert t["median"] == {"baseline": 3.0, "fast": 9.0, "none": None}
    assert t["ratio"] == {"fast": 3.0, "none": None}
    assert out["absent"]["median"] == {"baseline": None, "fast": None, "none": None}


def test_median_ratio_and_decode_rate():
    assert core.median([None, 3, 1, 2]) == 2 and core.median([None]) is None
    assert core.ratio(1, 4) == 0.25 and core.ratio(None, 4) is None and core.ratio(1, 0) is None
    assert core.decode_rate([1.0, 1.5, 2.0]) == pytest.approx(2.0)
    assert core.decode_rate([1.0]) is None and core.decode_rate([1.0, 1.0]) is None


def test_best_seconds_calls_once_untimed_and_syncs_after_each_call():
    events: list[str] = []
    best = core.best_seconds(lambda: events.append("fn"), 3, lambda: events.append("sync"))
    assert events == ["fn", "sync"] * 4
    assert 0 <= best < 1


class _Ids:
    """Stands in for the tensor of ids a streamer is given."""

    def __init__(self, *ids: int) -> None:
        self._ids = list(ids)

    def reshape(self, *_shape: int) -> "_Ids":
        return self

    def tolist(self) -> list[int]:
        return self._ids


def test_token_clock_skips_the_prompt_and_syncs_before_each_time():
    syncs: list[int] = []
    clock = core.TokenClock(lambda: syncs.append(len(clock.times)))
    clock.put(_Ids(5, 6, 7))  # the prompt
    clock.put(_Ids(1))
    clock.put(_Ids(2))
    clock.end()
    assert clock.ids == [1, 2] and len(clock.times) == 2 and syncs == [0, 1]
    assert clock.decode_tok_s is None or clock.decode_tok_s > 0



@pytest.mark.parametrize("rank, want", [(0, 0.001), (1, 0.01), (9, 0.03)])
def test_best_seconds_can_skip_the_fastest_pass(monkeypatch, rank, want):
    """rank 1 is the second best: one freak pass does not set the figure (engine/bench/membw.py)."""
    clock = [0.0]
    durations = iter([0.5, 0.03, 0.001, 0.02, 0.01])  # the untimed call, then four timed ones
    monkeypatch.setattr(core.time, "perf_counter", lambda: clock[0])

    def call() -> None:
        clock[0] += next(durations)

    assert core.best_seconds(call, 4, rank=rank) == pytest.approx(want)
