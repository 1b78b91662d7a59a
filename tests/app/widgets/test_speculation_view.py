"""The speculation rows' speed-up (app/widgets/speculation_view.py): only against a baseline measured under the same
conditions — plain decodes of live replies on the same model, precision and device, their median — else "—" with
"no baseline yet" in the tooltip (issue 41: "speed-up 0.16×" against an unrelated earlier reply)."""

from __future__ import annotations

from types import SimpleNamespace

from app.widgets.speculation_view import SpeculationView
from engine.events import Metrics

FACTS = SimpleNamespace(name="tiny", precision="bf16", device="cpu", remote=False)


def plain(rate: float, tokens: int = 32, precision: str = "bf16") -> Metrics:
    return Metrics(generated_tokens=tokens, decode_tok_s=rate, device="cpu", precision=precision)


def speculated(rate: float, precision: str = "bf16") -> Metrics:
    return Metrics(generated_tokens=32, decode_tok_s=rate, device="cpu", precision=precision,
                   speculation="prompt-lookup", draft_tokens=20, accepted_tokens=10, acceptance_rate=0.5,
                   tokens_per_step=1.5)


def view_for(qtbot) -> SpeculationView:
    view = SpeculationView()
    qtbot.addWidget(view)
    view.set_model_facts(FACTS)
    return view


def test_speed_up_is_against_the_median_of_plain_live_replies_under_the_same_conditions(qtbot):
    view = view_for(qtbot)
    for rate in (10.0, 30.0, 20.0):
        assert view.learn_plain(plain(rate))
    view.show_metrics(speculated(40.0), final=True)
    assert view.shown()["speedup"] == "2.00× (40.0 vs 20.0 tok/s)"  # the median, not the last (20, not 20 by luck)
    tip = view.values["speedup"].toolTip()
    assert "median 20.0 tok/s of 3 plain replies (from 10.0 to 30.0) on tiny, bf16, cpu" in tip


def test_no_baseline_from_another_precision_a_short_reply_or_a_reply_paged_back(qtbot):
    view = view_for(qtbot)
    assert not view.learn_plain(plain(5.0, tokens=3))  # 3 tokens measure the cost of a call, not a rate
    assert view.learn_plain(plain(50.0, precision="int8"))  # kept, but as int8's baseline
    view.show_metrics(plain(80.0), final=True)  # a stored record shown again: never a baseline
    view.show_metrics(speculated(8.0), final=True)
    assert view.shown()["speedup"] == "—"
    assert view.values["speedup"].toolTip().startswith("No baseline yet: no reply without speculation on tiny, bf16, cpu")


def test_a_baseline_survives_loading_another_model_and_back_but_not_a_server(qtbot):
    view = view_for(qtbot)
    assert view.learn_plain(plain(20.0))
    view.set_model_facts(SimpleNamespace(name="other", precision="bf16", device="cpu", remote=False))
    view.show_metrics(speculated(30.0), final=True)
    assert view.shown()["speedup"] == "—"  # another model's rate is no baseline
    view.set_model_facts(FACTS)
    view.show_metrics(speculated(30.0), final=True)
    assert view.shown()["speedup"].startswith("1.50×")
    view.set_model_facts(SimpleNamespace(name="tiny", precision="bf16", device="cpu", remote=True))
    assert not view.learn_plain(plain(20.0))
