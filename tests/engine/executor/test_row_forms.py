"""``one_row``: a dense projection's one-row form, chosen by timing among the forms giving ``F.linear``'s bits."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from engine.executor import row_forms


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch):
    monkeypatch.setattr(row_forms, "_FORMS", {})
    monkeypatch.delenv(row_forms.FORM_ENV, raising=False)


def _clock(slow: str, forms_in_order: list[str]):
    """A clock under which the form ``slow`` takes 1000 units a call and every other form 1 (forms are timed in
    ``forms_in_order``, interleaved, each call reading the clock twice)."""
    ticks = itertools.count()
    state = {"t": 0.0}
    order = itertools.cycle(forms_in_order)
    current = {"name": None}

    def clock() -> float:
        if next(ticks) % 2 == 0:
            current["name"] = next(order)
            return state["t"]
        state["t"] += 1000.0 if current["name"] == slow else 1.0  # whole numbers: differences exact
        return state["t"]
    return clock


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chosen_form_gives_linear_bits_on_one_row_and_many(dtype):
    weight = torch.randn(48, 32).to(dtype)
    form = row_forms.one_row(weight)
    x = torch.randn(5, 32).to(dtype)
    assert torch.equal(form(x), F.linear(x, weight))  # several rows: F.linear itself
    for i in range(5):
        assert torch.equal(form(x[i:i + 1]), F.linear(x[i:i + 1], weight))


def test_a_faster_exact_form_wins_and_is_cached(monkeypatch):
    weight = torch.randn(16, 8)
    calls = []
    monkeypatch.setattr(row_forms, "_candidates", lambda w, b, packed_ok: {
        "linear": lambda x: F.linear(x, w), "mv": lambda x: calls.append(1) or torch.mv(w, x[0]).unsqueeze(0)})
    monkeypatch.setattr(row_forms, "_fastest", lambda forms, probes, clock: "mv")
    form = row_forms.one_row(weight)
    form(torch.randn(1, 8))
    assert calls  # the one-row call went through the chosen form
    assert row_forms.chosen() == {"mv": 1}


def test_fastest_times_only_exact_forms_and_keeps_linear_on_a_tie():
    weight = torch.randn(16, 8)
    probes = row_forms._probe_rows(8, torch.float32, 0)
    wrong = {"linear": lambda x: F.linear(x, weight), "off": lambda x: F.linear(x, weight) + 1.0}
    assert row_forms._fastest(wrong, probes, _clock("linear", ["linear"])) == "linear"  # "off" never timed
    same = {"linear": lambda x: F.linear(x, weight), "copy": lambda x: F.linear(x, weight).clone()}
    assert row_forms._fastest(same, probes, _clock("linear", ["linear", "copy"])) == "copy"
    assert row_forms._fastest(same, probes, _clock("copy", ["linear", "copy"])) == "linear"
    assert row_forms._fastest(same, probes, _clock("none", ["linear", "copy"])) == "linear"  # a tie


def test_env_keeps_linear_and_other_weights_are_left_alone(monkeypatch):
    weight = torch.randn(16, 8)
    monkeypatch.setenv(row_forms.FORM_ENV, "linear")
    row_forms.one_row(weight)
    assert row_forms.chosen() == {}
    monkeypatch.delenv(row_forms.FORM_ENV)
    row_forms.one_row(torch.randint(0, 3, (16, 8)))  # not floating: F.linear, nothing measured
    assert row_forms.chosen() == {}


def test_packed_copies_only_within_the_memory_share(monkeypatch):
    class Memory:
        available = 1000

    import psutil
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory())
    small, large = torch.zeros(10, dtype=torch.float32), torch.zeros(1000, dtype=torch.float32)  # 40 and 4000 bytes
    assert row_forms.packed_affordable([small, small, "not a tensor"])  # counted once: 40 <= 150
    assert not row_forms.packed_affordable([large])
    assert not row_forms.packed_affordable([])
