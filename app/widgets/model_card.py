"""The model card: the loaded model's architecture and what its KV cache costs, with the arithmetic shown.

Shows layers, hidden size, heads, KV heads (with a one-line GQA/MQA/MHA explanation), head dim,
vocabulary, context, the exact parameter count next to the usual estimate ``V·d + 12·L·d²``, KV bytes
per token in the GQA form and without GQA (``2·L·d·b``), and the KV memory of the current context and
of the full context window. All numbers come from ``ModelFacts`` (built by the loader from the real
model) and the context size the engine reports in its metrics; the widget only formats them.
Owns display only: no engine calls, no torch.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout,
                               QWidget)

from engine.models.model import ModelFacts
from engine.fmt import format_bytes


def fmt_count(value: int) -> str:
    return f"{value:,}"


def attention_explanation(facts: ModelFacts) -> str:
    """One line on what the KV-head count means for this model."""
    group = facts.heads // facts.kv_heads if facts.kv_heads else 0
    if facts.attention_kind == "MQA":
        return (f"MQA: all {facts.heads} query heads share one K/V head, so the cache is {facts.heads}× smaller "
                "than MHA.")
    if facts.attention_kind == "GQA":
        return (f"GQA: each group of {group} query heads shares one K/V head, so the cache is {group}× smaller "
                f"than with {facts.heads} K/V heads.")
    return f"MHA: every one of the {facts.heads} query heads has its own K/V head (no cache saving)."


def card_rows(facts: ModelFacts, context_tokens: int = 0) -> list[tuple[str, str]]:
    """(label, value) rows of the card for ``facts`` with ``context_tokens`` in the KV cache now."""
    L, d, V = facts.layers, facts.hidden_size, facts.vocab_size
    estimate = facts.param_estimate
    off = (estimate - facts.params) / facts.params * 100 if facts.params else 0.0
    per_token, per_token_no_gqa = facts.kv_bytes_per_token, facts.kv_bytes_per_token_no_gqa
    b = facts.kv_dtype_bytes
    full = facts.context_length
    return [
        ("Model", f"{facts.name} ({facts.architecture})"),
        ("Precision · device", f"{facts.precision} · {facts.device}"),
        ("Layers (L)", fmt_count(L)),
        ("Hidden size (d)", fmt_count(d)),
        ("Attention heads", fmt_count(facts.heads)),
        ("KV heads", f"{facts.kv_heads} ({facts.attention_kind})"),
        ("", attention_explanation(facts)),
        ("Head dim", fmt_count(facts.head_dim)),
        ("Vocabulary (V)", fmt_count(V)),
        ("Context length", f"{fmt_count(full)} tokens"),
        ("Parameters (exact)", fmt_count(facts.params)),
        ("Seeds' estimate V·d + 12·L·d²", f"{fmt_count(V)}·{d} + 12·{L}·{d}² = {fmt_count(estimate)} ({off:+.1f}%)"),
        ("Weights in memory", f"{format_bytes(facts.weights_bytes)} ({fmt_count(facts.weights_bytes)} B)"),
        ("KV bytes / token (GQA form)",
         f"2·{L}·{facts.kv_heads}·{facts.head_dim}·{b} = {fmt_count(per_token)} B ({format_bytes(per_token)})"),
        ("KV bytes / token (no-GQA form)",
         f"2·{L}·{d}·{b} = {fmt_count(per_token_no_gqa)} B ({format_bytes(per_token_no_gqa)})"),
        ("KV memory, current context",
         f"{fmt_count(context_tokens)} tokens → {format_bytes(context_tokens * per_token)}"
         f" (no GQA: {format_bytes(context_tokens * per_token_no_gqa)})"),
        ("KV memory, full context",
         f"{fmt_count(full)} tokens → {format_bytes(full * per_token)} (no GQA: {format_bytes(full * per_token_no_gqa)})"),
    ]


class ModelCard(QWidget):
    """The loaded model's card; follows ``model_loaded`` and the context size of the latest reply.

    Listens to the bridge's ``model_loaded(ModelFacts)``, ``stats_updated(Metrics)`` and
    ``generation_finished(Finished)`` (their ``context_tokens``); emits nothing.
    """

    def __init__(self, bridge: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._facts: ModelFacts | None = None
        self._context_tokens = 0
        self.placeholder = QLabel("Load a model to see its card.")
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["", "value"])
        self.table.horizontalHeader().setVisible(False)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.placeholder)
        layout.addWidget(self.table, 1)
        self.table.hide()
        bridge.model_loaded.connect(self.on_bridge_model_loaded)
        for name, slot in (("stats_updated", self.on_bridge_stats_updated),
                           ("generation_finished", self.on_bridge_generation_finished)):
            signal = getattr(bridge, name, None)
            if signal is not None:
                signal.connect(slot)
        facts = getattr(bridge, "facts", None)
        if isinstance(facts, ModelFacts):
            self.show_facts(facts)

    @property
    def rows(self) -> list[tuple[str, str]]:
        """What the table shows, as (label, value) pairs."""
        return [(self.table.item(r, 0).text(), self.table.item(r, 1).text()) for r in range(self.table.rowCount())]

    def show_facts(self, facts: ModelFacts, context_tokens: int = 0) -> None:
        self._facts = facts
        self._context_tokens = context_tokens
        self._refresh()

    def set_context_tokens(self, tokens: int) -> None:
        """Tokens in the KV cache now (from the engine's metrics)."""
        if tokens != self._context_tokens:
            self._context_tokens = tokens
            self._refresh()

    def _refresh(self) -> None:
        if self._facts is None:
            return
        rows = card_rows(self._facts, self._context_tokens)
        self.table.setRowCount(len(rows))
        for r, (label, value) in enumerate(rows):
            label_item = QTableWidgetItem(label)
            label_item.setFlags(Qt.ItemFlag.ItemIsEnabled)
            value_item = QTableWidgetItem(value)
            value_item.setToolTip(value)
            self.table.setItem(r, 0, label_item)
            self.table.setItem(r, 1, value_item)
        self.table.resizeRowsToContents()
        self.placeholder.hide()
        self.table.show()

    @Slot(object)
    def on_bridge_model_loaded(self, facts: object) -> None:
        if isinstance(facts, ModelFacts):
            self.show_facts(facts, 0)

    @Slot(object)
    def on_bridge_stats_updated(self, metrics: object) -> None:
        tokens = getattr(metrics, "context_tokens", None)
        if isinstance(tokens, int):
            self.set_context_tokens(tokens)

    @Slot(object)
    def on_bridge_generation_finished(self, finished: object) -> None:
        tokens = getattr(getattr(finished, "metrics", None), "context_tokens", None)
        if isinstance(tokens, int) and tokens > 0:  # a reply that never ran reports 0; keep the last figure
            self.set_context_tokens(tokens)
