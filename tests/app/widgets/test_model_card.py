"""The model card: its arithmetic on known facts, and the widget following the real bridge and tiny model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.runtime.bridge import Bridge
from app.widgets.model_card import ModelCard, attention_explanation, card_rows
from engine.events import Finished, Metrics
from engine.models.model import ModelFacts
from engine.remote.client import RemoteFacts
from tests.app._gui_fixtures import loaded_bridge  # noqa: F401 (fixture)

pytestmark = pytest.mark.qt_log_ignore("propagateSizeHints")

# The default model's facts (docs: 30 layers, hidden 576, 9 heads, 3 KV heads, head_dim 64, vocab 49152).
SMOLLM2 = ModelFacts(name="SmolLM2-135M-Instruct", source="/models/SmolLM2", architecture="LlamaForCausalLM",
                     layers=30, hidden_size=576, heads=9, kv_heads=3, head_dim=64, vocab_size=49152,
                     context_length=8192, params=134_515_008, weights_bytes=269_030_016, precision="bf16",
                     device="cpu", kv_dtype_bytes=2)


def test_card_rows_show_the_parameter_and_kv_arithmetic():
    rows = dict(card_rows(SMOLLM2, context_tokens=1000))
    assert rows["Layers (L)"] == "30" and rows["Hidden size (d)"] == "576"
    assert rows["KV heads"] == "3 (GQA)" and rows["Head dim"] == "64"
    assert rows["Parameters (exact)"] == "134,515,008"
    # V·d + 12·L·d² = 49152·576 + 12·30·576² = 28,311,552 + 119,439,360
    assert rows["Seeds' estimate V·d + 12·L·d²"] == "49,152·576 + 12·30·576² = 147,750,912 (+9.8%)"
    assert rows["KV bytes / token (GQA form)"] == "2·30·3·64·2 = 23,040 B (22.5 KiB)"
    assert rows["KV bytes / token (no-GQA form)"] == "2·30·576·2 = 69,120 B (67.5 KiB)"
    assert rows["KV memory, current context"] == "1,000 tokens → 22.0 MiB (no GQA: 65.9 MiB)"
    assert rows["KV memory, full context"] == "8,192 tokens → 180.0 MiB (no GQA: 540.0 MiB)"
    assert "each group of 3 query heads shares one K/V head" in rows[""]


def test_attention_explanations():

    assert attention_explanation(replace(SMOLLM2, kv_heads=1)).startswith("MQA: all 9 query heads share one")
    assert attention_explanation(replace(SMOLLM2, kv_heads=9)).startswith("MHA:")


def test_card_follows_the_loaded_model_and_its_context(qtbot, loaded_bridge):
    card = ModelCard(loaded_bridge)  # built after the load: it reads bridge.facts
    qtbot.addWidget(card)
    facts = loaded_bridge.facts
    rows = dict(card.rows)
    assert card.table.isVisibleTo(card) and not card.placeholder.isVisibleTo(card)
    assert rows["Layers (L)"] == str(facts.layers) == "2"
    assert rows["KV heads"] == "2 (GQA)" and rows["Attention heads"] == "4"
    assert rows["Parameters (exact)"] == f"{facts.params:,}"
    per_token = 2 * 2 * 2 * 16 * facts.kv_dtype_bytes  # 2·L·kv_heads·head_dim·bytes
    assert rows["KV bytes / token (GQA form)"].endswith(f"= {per_token:,} B ({per_token} B)")
    assert rows["KV memory, current context"].startswith("0 tokens")

    context_row = [label for label, _ in card.rows].index("KV memory, current context")
    value_item = card.table.item(context_row, 1)
    loaded_bridge.stats_updated.emit(Metrics(context_tokens=100))
    assert dict(card.rows)["KV memory, current context"].startswith("100 tokens")
    assert card.table.item(context_row, 1) is value_item  # a streaming reply's update sets a value, rebuilds nothing
    assert value_item.toolTip() == value_item.text()
    loaded_bridge.generation_finished.emit(Finished(reason="eos", text="", metrics=Metrics(context_tokens=120)))
    assert dict(card.rows)["KV memory, current context"].startswith("120 tokens")


def test_card_waits_for_a_model(qtbot, home):
    bridge = Bridge()
    try:
        card = ModelCard(bridge)
        qtbot.addWidget(card)
        assert card.rows == [] and card.placeholder.isVisibleTo(card)
        bridge.model_loaded.emit(SMOLLM2)
        assert dict(card.rows)["Vocabulary (V)"] == "49,152"
        # A server's model hides the card; the next local model (same rows, other values) shows it again.
        bridge.model_loaded.emit(RemoteFacts(name="served", source="http://127.0.0.1:8000/v1", device="remote: 127.0.0.1:8000",
                                               precision="served", context_length=4096))
        assert not card.table.isVisibleTo(card) and card.placeholder.isVisibleTo(card)
        bridge.model_loaded.emit(replace(SMOLLM2, vocab_size=32_000))
        assert card.table.isVisibleTo(card) and not card.placeholder.isVisibleTo(card)
        assert dict(card.rows)["Vocabulary (V)"] == "32,000"
    finally:
        assert bridge.shutdown(5000) is True
