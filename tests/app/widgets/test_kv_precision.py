"""The KV cache's precision in the window: chosen in the model bar (kept in the settings), loaded with the model, shown
on the model card with its own arithmetic, and counted by the Models window's fit estimate."""

from __future__ import annotations

from dataclasses import replace

from app.library.fit_panel import FitPanel
from app.widgets.model_bar import ModelBar
from app.widgets.model_card import card_rows
from engine.fmt import format_bytes
from engine.library.arch import Architecture
from engine.library.fit import Memory
from tests.app._gui_fixtures import LOAD_TIMEOUT_MS, make_window, settings, store  # noqa: F401 (fixtures)
from tests.app.widgets.test_model_card import SMOLLM2

SMOLLM2_ARCH = Architecture(source="config.json", model_type="llama", layers=30, hidden_size=576, heads=9, kv_heads=3,
                            head_dim=64, vocab_size=49152, context_length=8192, intermediate_size=1536,
                            tied_embeddings=True)


def test_the_bar_keeps_the_choice_and_a_bad_stored_value_reads_as_auto(qtbot, settings):
    bar = ModelBar(settings)
    qtbot.addWidget(bar)
    assert bar.kv_precision() == "auto" and settings.kv_precision() == "auto"
    bar.kv_combo.setCurrentText("int8")
    assert settings.kv_precision() == "int8"
    again = ModelBar(settings)
    qtbot.addWidget(again)
    assert again.kv_precision() == "int8"
    settings._q.setValue("model/kv_precision", "int3")
    assert settings.kv_precision() == "auto"


def test_the_card_shows_the_int8_arithmetic():
    rows = dict(card_rows(replace(SMOLLM2, kv_precision="int8"), context_tokens=1000))
    # 2 · 30 layers · 3 KV heads · (64 elements · 1 byte + a 2-byte scale) = 11,880 B, about half of bf16's 23,040
    assert rows["KV bytes / token (GQA form)"].startswith("2·30·3·(64·1 + 2) = 11,880 B")
    assert rows["KV bytes / token (no-GQA form)"].startswith("2·30·9·(64·1 + 2) = 35,640 B")
    assert rows["Precision · device"] == "bf16 · cpu · int8 KV cache"
    assert format_bytes(11_880 * 1000) in rows["KV memory, current context"]
    assert dict(card_rows(SMOLLM2))["KV bytes / token (GQA form)"].startswith("2·30·3·64·2 = 23,040 B")


def test_the_fit_estimate_counts_the_chosen_kv_precision(qtbot):
    panel = FitPanel()
    qtbot.addWidget(panel)
    panel.set_architecture(SMOLLM2_ARCH, "SmolLM2-135M", memory=Memory("cpu", 64 << 30, "test"))
    dense = {p: est.kv_bytes for p, est in panel.estimates.items()}
    panel.set_kv_precision("int8")
    assert {est.kv_bytes for est in panel.estimates.values()} == {11_880 * 4096}
    assert set(dense.values()) >= {23_040 * 4096}
    assert panel.table.horizontalHeaderItem(2).text() == "int8 KV cache at 4,096 tokens"


def test_a_load_from_the_window_asks_for_the_chosen_kv_cache(qtbot, make_window, tiny_model_dir):
    window = make_window(loaded=False)
    window.model_bar.kv_combo.setCurrentText("int8")
    with qtbot.waitSignal(window.model_ready, timeout=LOAD_TIMEOUT_MS):
        window.load_model(str(tiny_model_dir), "fp32", "cpu")
    facts = window.controller.facts
    assert facts.kv_precision == "int8" and facts.kv_bytes_per_token == 2 * 2 * 2 * (16 + 2)
