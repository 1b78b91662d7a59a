"""The performance panel shows an engine Metrics snapshot faithfully and keeps it after the reply."""

from __future__ import annotations

import dataclasses

import pytest

from app.widgets.perf_panel import PerfPanel
from engine.fmt import format_bytes
from engine.events import Metrics
from engine.models.model import ModelFacts
from tests.app._gui_fixtures import make_window, settings, store, styled  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.qt_log_ignore("propagateSizeHints"), pytest.mark.qt_log_level_fail("WARNING")]

FACTS = ModelFacts(name="SmolLM2-135M-Instruct", source="x", architecture="LlamaForCausalLM", layers=30,
                   hidden_size=576, heads=9, kv_heads=3, head_dim=64, vocab_size=49152, context_length=8192,
                   params=134_515_008, weights_bytes=269_030_016, precision="bf16", device="cpu", kv_dtype_bytes=2)


def _metrics(tokens: int, dropped: int = 0) -> Metrics:
    per_token = FACTS.kv_bytes_per_token
    context = 40 + tokens
    return Metrics(prompt_tokens=40, prefill_tokens=40, generated_tokens=tokens, ttft_s=0.086, prefill_s=0.025,
                   prefill_tok_s=1600.0, decode_tok_s=41.8, itl_s=tuple([0.025] * (tokens - 1)), tpot_s=0.0239,
                   e2e_s=0.086 + 0.025 * (tokens - 1), kv_cache_bytes=per_token * context,
                   kv_cache_bytes_allocated=per_token * context, kv_cache_bytes_formula=per_token * context,
                   kv_cache_bytes_formula_no_gqa=FACTS.kv_bytes_per_token_no_gqa * context,
                   weights_bytes=FACTS.weights_bytes, peak_memory_bytes=900 << 20, context_tokens=context,
                   context_max=8192, dropped_turns=dropped, device="cpu", precision="bf16")


@pytest.fixture
def panel(qtbot):
    widget = PerfPanel()
    qtbot.addWidget(widget)
    widget.show()
    yield widget
    # matplotlib queues an idle redraw and a repaint on resize; let them run while the canvas exists,
    # or they can fire during interpreter shutdown on a deleted widget (segfault when these tests run last).
    qtbot.wait(50)


def test_panel_shows_every_figure_and_keeps_them(panel):
    panel.set_model_facts(FACTS)
    panel.reset()
    panel.show_metrics(_metrics(10))
    first_kv = panel.displayed()["kv"]
    panel.show_metrics(_metrics(128), final=True)
    shown = panel.displayed()
    assert shown["ttft"] == "86 ms"
    assert shown["prefill"] == "40 tok · 1600.0 tok/s"
    assert shown["decode_avg"] == "41.8 tok/s" and shown["decode_now"] == "40.0 tok/s"
    assert shown["tokens"] == "128"
    assert shown["kv"] == format_bytes(FACTS.kv_bytes_per_token * 168) != first_kv  # grew with the reply
    assert shown["kv_formula"] == shown["kv"]
    assert shown["kv_no_gqa"] == format_bytes(FACTS.kv_bytes_per_token_no_gqa * 168)  # 3x: GQA's saving visible
    assert shown["kv_share"].endswith("B") and "%" in shown["kv_share"]
    assert shown["weights"] == "256.6 MiB" and shown["peak"] == "900.0 MiB"
    assert shown["device"] == "cpu" and shown["precision"] == "bf16"
    assert shown["context"].startswith("168 / 8192 tokens")
    assert shown["chart_points"] == "127"
    assert panel._dropped.isHidden()


def test_dropped_turns_are_announced_and_reset_clears_reply_figures(panel):
    panel.set_model_facts(FACTS)
    panel.show_metrics(_metrics(5, dropped=3), final=True)
    assert not panel._dropped.isHidden() and "3 oldest messages dropped" in panel._dropped.text()
    panel.reset()
    shown = panel.displayed()
    assert shown["ttft"] == "—" and shown["kv"] == "—" and shown["chart_points"] == "0"
    assert shown["device"] == "cpu" and shown["weights"] == "256.6 MiB"  # the model's facts stay


def _values_fit(panel: PerfPanel) -> list[str]:
    """Value labels whose right edge runs past the panel's visible width."""
    viewport = panel.scroll_area.viewport().width()
    cut = []
    for key, label in panel._values.items():
        if label.isHidden():
            continue  # a row not shown (the server's figures, with a local model) is cut nowhere
        right = label.mapTo(panel.scroll_area.viewport(), label.rect().topRight()).x()
        if right > viewport:
            cut.append(f"{key} ends at {right} > {viewport}")
    return cut


def _long_metrics() -> Metrics:
    """The longest value text the panel shows: a large, mostly empty cache ("… (allocated …)")."""
    m = _metrics(128)
    return dataclasses.replace(m, kv_cache_bytes_allocated=37 * m.kv_cache_bytes)


def test_values_wrap_within_the_narrowest_panel_with_no_sideways_scroll_bar(styled, panel, qtbot):
    panel.set_model_facts(FACTS)
    panel.show_metrics(_long_metrics(), final=True)
    panel.resize(panel.minimumWidth(), 800)
    qtbot.wait(50)
    assert "allocated" in panel.displayed()["kv"]
    assert not panel.scroll_area.horizontalScrollBar().isVisible()
    assert _values_fit(panel) == []
    kv = panel._values["kv"]
    assert kv.toolTip().startswith(f"<p>{kv.text()}</p><p>")  # the whole value readable on hover, then its meaning



@pytest.mark.parametrize("size", [(1280, 800), (1440, 900)])
def test_side_panel_fits_in_the_window(make_window, qtbot, styled, size):
    window = make_window(loaded=False)
    window.resize(*size)
    window.show()
    window.perf_panel.set_model_facts(FACTS)
    window.perf_panel.show_metrics(_long_metrics(), final=True)
    qtbot.wait(100)
    assert window.perf_dock.width() >= window.perf_panel.minimumWidth()
    assert not window.perf_panel.scroll_area.horizontalScrollBar().isVisible()
    assert _values_fit(window.perf_panel) == []


def test_a_servers_figures_fit_and_what_it_cannot_know_reads_as_a_dash(styled, panel, qtbot):
    from engine.remote.server_metrics import Histogram, ServerFigures
    from engine.remote.session import UNKNOWN_ALWAYS

    panel.show_metrics(dataclasses.replace(_metrics(16), unknown=UNKNOWN_ALWAYS), final=True)
    panel.show_server(ServerFigures(kv_cache_usage=0.375, kv_cache_metric="vllm:kv_cache_usage_perc",
                                    ttft=Histogram("vllm:time_to_first_token_seconds", 2.0, 0.5)))
    panel.resize(panel.minimumWidth(), 800)
    qtbot.wait(50)
    shown = panel.displayed()
    assert shown["server_kv"] == "37.5 % in use (vllm)"
    assert panel._values["server_kv"].toolTip().startswith("vllm:kv_cache_usage_perc on the server's /metrics")
    assert shown["server_ttft"] == "250 ms (mean of 2 request(s))"
    assert shown["kv"] == shown["kv_formula"] == shown["peak"] == "—" and shown["ttft"] != "—"
    assert _values_fit(panel) == []
    panel.show_server(None)
    assert panel.displayed()["server_kv"] == panel.displayed()["server_ttft"] == "not reported by this server"
    panel.show_server(None, remote=False)
    assert panel._values["server_kv"].isHidden() and panel._values["server_ttft"].isHidden()
