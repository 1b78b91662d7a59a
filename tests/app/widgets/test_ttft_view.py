"""The "Before truncation" row forecasts from the estimate recent replies give, never from one reply's own rate
(issue 41: "~154 s" from a 1-token prefill at 2 tok/s)."""

from __future__ import annotations

from types import SimpleNamespace

from app.state.rate_estimate import RateKey, RecentRates
from app.widgets.ttft_view import TtftView

NOISY = SimpleNamespace(ttft_s=0.6, prefill_s=0.5, prefill_tokens=1, reused_tokens=300, prefill_tok_s=2.0,
                        context_tokens=308, context_max=2048, unknown=())


def test_truncation_forecast_waits_for_an_estimate_then_gives_its_range(qtbot):
    view = TtftView()
    qtbot.addWidget(view)
    view.show_metrics(NOISY, None)
    assert view.shown()["truncation"] == "1740 tokens left"  # no forecast from this reply's 1-token prefill
    rates = RecentRates()
    key = RateKey("m", "fp32", "cpu")
    for rate in (200.0, 308.0, 616.0):
        rates.add(key, rate, 64)
    view.set_prefill_estimate(rates.estimate(key))  # the shown reply's row follows the estimate
    assert view.shown()["truncation"] == ("1740 tokens left, then ~1000 ms (500 ms–1540 ms) to prefill the kept "
                                          "conversation again")
    view.reset()
    view.set_prefill_estimate(None)
    assert view.shown()["truncation"] == "—"


def test_the_cached_document_prefix_has_its_own_row_under_the_reused_tokens(qtbot):
    view = TtftView()
    qtbot.addWidget(view)
    view.show_started(SimpleNamespace(reuse_break=None, reused_tokens=300, document_prefix_tokens=290))
    view.show_metrics(NOISY, None)
    assert view.shown()["document"] == "290 of the reused tokens" and view.shown()["reused"] == "300 tokens, free"
    view.reset()
    view.show_started(SimpleNamespace(reuse_break=None, reused_tokens=300))  # a conversation's own cache, or a record
    view.show_metrics(NOISY, None)
    assert view.shown()["document"] == "—"
