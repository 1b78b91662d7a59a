"""The forecast shown while typing: its arithmetic (pure), and the real window measuring the prompt on the worker."""

from __future__ import annotations

import pytest

from app.state.rate_estimate import MIN_RATE_TOKENS, RateKey, RecentRates
from app.window.forecast import LEFT_OUT, REPLY_CUT, forecast
from app.window.prompt_meter import DEBOUNCE_MS, duration
from tests.app._gui_fixtures import REPLY_TIMEOUT_MS, make_window, send_and_wait, settings, store  # noqa: F401


def test_ttft_is_the_tokens_the_cache_does_not_hold_over_the_measured_prefill_rate():
    f = forecast(text_tokens=40, prompt_tokens=1200, cached_tokens=1000, context_max=8192, prefill_tok_s=2000.0)
    assert (f.reused_tokens, f.new_tokens) == (1000, 200)
    assert f.ttft_s == pytest.approx(0.1)  # 200 tokens at 2,000 tok/s
    assert f.context_tokens == 1200 and f.context_fraction == pytest.approx(1200 / 8192)
    assert f.warning is None and f.text_tokens == 40


def test_no_rate_measured_yet_means_no_ttft_and_an_unknown_context_no_fraction():
    for rate in (None, 0.0, -5.0):
        assert forecast(5, 50, 0, 2048, rate).ttft_s is None
    f = forecast(5, 50, 0, 0, 1000.0)
    assert f.context_fraction is None and f.new_tokens == 50 and f.ttft_s == pytest.approx(0.05)


def test_the_last_prompt_token_is_always_computed_and_a_stale_cache_cannot_count_more_than_the_prompt():
    f = forecast(3, 100, 100, 2048, 1000.0)  # the cache holds the whole prompt (a regenerate)
    assert (f.reused_tokens, f.new_tokens) == (99, 1) and f.ttft_s == pytest.approx(0.001)
    f = forecast(3, 100, 5000, 2048, 1000.0)  # more cached than the prompt: only the prompt's prefix is used
    assert (f.reused_tokens, f.new_tokens) == (99, 1)
    f = forecast(0, 0, 0, 2048, 1000.0)
    assert (f.reused_tokens, f.new_tokens, f.ttft_s) == (0, 0, 0.0)


def test_attached_pictures_are_their_own_part_added_to_the_context_and_all_computed_with_their_kv_bytes():
    f = forecast(40, 1200, 1000, 8192, 2000.0, image_tokens=(64, 17), kv_bytes_per_token=4096)
    assert f.context_tokens == 1200 + 81 and f.image_tokens == (64, 17)
    assert (f.reused_tokens, f.new_tokens) == (1000, 281)  # a new picture is never in the cache
    assert f.ttft_s == pytest.approx(281 / 2000) and f.image_kv_bytes == 81 * 4096
    f = forecast(3, 100, 100, 2048, 1000.0, image_tokens=(16,))  # the text all cached: the picture still computed
    assert (f.reused_tokens, f.new_tokens, f.image_kv_bytes) == (99, 17, None)  # a model that gives no KV bytes
    assert forecast(3, 100, 0, 2048, None).image_tokens == () and forecast(3, 100, 0, 2048, None).image_kv_bytes is None


def test_a_send_that_leaves_old_messages_out_warns_first():
    f = forecast(900, 7800, 0, 8192, 1000.0, dropped_turns=4, reply_budget=256, asked_budget=256)
    assert f.warning == (LEFT_OUT, 4) and f.left_out == 4
    f = forecast(900, 7800, 0, 8192, 1000.0, dropped_turns=0, reply_budget=256, asked_budget=256)
    assert f.warning is None  # it fits, reply included


def test_a_reply_squeezed_by_the_context_warns_with_its_room():
    f = forecast(8000, 8100, 0, 8192, 1000.0, dropped_turns=0, reply_budget=92, asked_budget=512)
    assert f.reply_cut and f.warning == (REPLY_CUT, 92)
    both = forecast(8000, 8100, 0, 8192, 1000.0, dropped_turns=2, reply_budget=92, asked_budget=512)
    assert both.warning == (LEFT_OUT, 2)  # losing history is the bigger news


def test_a_forecast_from_recent_rates_gives_the_median_and_the_range_they_spread_over():
    rates = RecentRates()
    key = RateKey("m", "fp32", "cpu")
    assert not rates.add(key, 2.0, 1)  # issue 41: a 1-token prefill at 2 tok/s is the cost of a call, not a rate
    assert rates.estimate(key) is None
    for rate in (1000.0, 400.0, 800.0):
        assert rates.add(key, rate, MIN_RATE_TOKENS)
    assert rates.estimate(RateKey("m", "int8", "cpu")) is None  # another precision: not this one's rate
    f = forecast(3, 400, 0, 2048, rates.estimate(key))
    assert f.ttft_s == pytest.approx(0.5) and (f.ttft_low_s, f.ttft_high_s) == pytest.approx((0.4, 1.0))
    assert f.rate_samples == 3


def test_durations_read_in_ms_under_a_second():
    assert (duration(0.0456), duration(0.9994), duration(1.25)) == ("46 ms", "999 ms", "1.2 s")



@pytest.mark.qt_log_ignore("propagateSizeHints")
@pytest.mark.qt_log_level_fail("WARNING")
def test_typing_shows_the_count_then_after_a_reply_a_ttft_forecast_and_a_warning_before_an_overflow(qtbot, make_window,
                                                                                                  tiny_model_dir):
    window = make_window(max_new_tokens=8)
    meter, composer = window.prompt_meter, window.composer
    with qtbot.waitSignal(meter.forecast_shown, timeout=REPLY_TIMEOUT_MS,
                          check_params_cb=lambda f: f is not None) as shown:
        qtbot.keyClicks(window.prompt, "How does a KV cache work?")
    first = shown.args[0]
    assert first.text_tokens > 0 and first.context_tokens > first.text_tokens and first.ttft_s is None
    assert first.context_max == window.controller.facts.context_length and first.reused_tokens == 0
    label = composer.forecast_label.text()
    assert composer.forecast_label.isVisible() and f"message: {first.text_tokens} tokens" in label
    assert f"of {first.context_max:,} tokens" in label and "TTFT forecast after the first reply" in label
    assert not composer.forecast_warning.isVisible()

    assert send_and_wait(qtbot, window, window.prompt.toPlainText()) == "length"
    assert window.prompt.toPlainText() == "" and not composer.forecast_label.isVisible()
    assert meter.estimate.median == window.last_metrics.prefill_tok_s > 0 and meter.estimate.samples == 1
    with qtbot.waitSignal(meter.forecast_shown, timeout=REPLY_TIMEOUT_MS,
                          check_params_cb=lambda f: f is not None) as shown:
        qtbot.keyClicks(window.prompt, "And prefill?")
    after = shown.args[0]
    assert after.reused_tokens > 0  # the conversation's cache holds the first turn: only the rest is computed
    assert after.new_tokens == after.context_tokens - after.reused_tokens
    assert after.ttft_s == pytest.approx(after.new_tokens / meter.estimate.median)
    assert "TTFT forecast: ~" in composer.forecast_label.text() and " ms" in composer.forecast_label.text()
    assert "median prefill rate of the last 1 replies" in composer.forecast_label.toolTip()

    # A message that pushes the first turn out of the tiny model's context: warned before sending.
    from transformers import AutoTokenizer

    per_word = len(AutoTokenizer.from_pretrained(tiny_model_dir).encode(" cache", add_special_tokens=False))
    room = after.context_max - after.context_tokens
    long = "cache" + " cache" * ((room + 10) // per_word)
    with qtbot.waitSignal(meter.forecast_shown, timeout=REPLY_TIMEOUT_MS,
                          check_params_cb=lambda f: f is not None and f.left_out > 0) as shown:
        window.prompt.setPlainText(long)
    history = window.controller.conversation_for_engine()  # the first question (and its reply, unless blank)
    assert shown.args[0].left_out == len(history) >= 1 and shown.args[0].reply_budget == 8
    assert composer.forecast_warning.isVisible()
    assert (f"leaves out the {len(history)} oldest messages" if len(history) > 1 else
            "leaves out the oldest message") in composer.forecast_warning.text()


@pytest.mark.qt_log_ignore("propagateSizeHints")
@pytest.mark.qt_log_level_fail("WARNING")
def test_typing_is_measured_once_per_pause_never_on_the_gui_thread_per_keystroke(qtbot, make_window, monkeypatch):
    window = make_window()
    submitted = []
    real = window.bridge.measure_prompt
    monkeypatch.setattr(window.bridge, "measure_prompt", lambda *a: submitted.append(a) or real(*a))
    with qtbot.waitSignal(window.prompt_meter.forecast_shown, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClicks(window.prompt, "a quick question about tokens")
    qtbot.wait(DEBOUNCE_MS + 100)
    assert len(submitted) == 1  # one measurement for the whole burst of keystrokes
