"""The model card: the loaded model's architecture and what its KV cache costs, with the arithmetic shown.

Shows layers, hidden size, heads, KV heads (with a one-line GQA/MQA/MHA explanation), head dim,
vocabulary, context, the exact parameter count next to the usual estimate ``V·d + 12·L·d²``, KV bytes
per token in the GQA form and without GQA (``2·L·d·b``; with an int8 KV cache each head's ``head_dim·1 + 2``
bytes: one byte per element and its scale), and the KV memory of the current context and
of the full context window. All numbers come from ``ModelFacts`` (built by the loader from the real
model) and the context size the engine reports in its metrics; the widget only formats them.
Owns display only: no engine calls, no torch.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, Slot
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout,
                               QWidget)

from app.ui import accessibility
from app.ui.precision_reason import auto_reason
from engine.fmt import format_bytes, outside_text
from engine.inputs import KV_SCALE_BYTES
from engine.models.model import ModelFacts


def fmt_count(value: int) -> str:
    return f"{value:,}"


def attention_explanation(facts: ModelFacts) -> str:
    """One line on what the KV-head count means for this model."""
    translate = QCoreApplication.translate
    group = facts.heads // facts.kv_heads if facts.kv_heads else 0
    if facts.attention_kind == "MQA":
        return translate("ModelCard", "MQA: all {heads} query heads share one K/V head, so the cache is {heads}× "
                                      "smaller than MHA.").format(heads=facts.heads)
    if facts.attention_kind == "GQA":
        return translate("ModelCard", "GQA: each group of {group} query heads shares one K/V head, so the cache is "
                                      "{group}× smaller than with {heads} K/V heads.").format(group=group,
                                                                                             heads=facts.heads)
    return translate("ModelCard", "MHA: every one of the {heads} query heads has its own K/V head (no cache "
                                  "saving).").format(heads=facts.heads)


def runner_text(facts: ModelFacts) -> str:
    """Which forward pass a chat gets (``ModelFacts.runner``) and, for the plain one, the engine's reason; "" when
    the facts do not say. The reason may quote the model's own config (its model_type): shown as outside text."""
    translate = QCoreApplication.translate
    runner = getattr(facts, "runner", None)
    if runner == "fast":
        return translate("ModelCard", "fast path")
    if runner == "plain":
        reason = getattr(facts, "runner_reason", None) or ""
        return translate("ModelCard", "plain (transformers' forward): {reason}").format(reason=outside_text(reason))
    return ""


def card_rows(facts: ModelFacts, context_tokens: int = 0) -> list[tuple[str, str]]:
    """(label, value) rows of the card for ``facts`` with ``context_tokens`` in the KV cache now."""
    L, d, V = facts.layers, facts.hidden_size, facts.vocab_size
    estimate = facts.param_estimate
    off = (estimate - facts.params) / facts.params * 100 if facts.params else 0.0
    per_token, per_token_no_gqa = facts.kv_bytes_per_token, facts.kv_bytes_per_token_no_gqa
    b = facts.kv_dtype_bytes
    full = facts.context_length
    int8 = getattr(facts, "kv_precision", "auto") == "int8"  # 1 byte per element + a 2-byte scale per head

    def element(head_dim: int) -> str:
        return f"({head_dim}·1 + {KV_SCALE_BYTES})" if int8 else f"{head_dim}·{b}"

    no_gqa = f"{facts.heads}·{element(d // facts.heads)}" if int8 else f"{d}·{b}"

    translate = QCoreApplication.translate

    def kv_memory(tokens: int) -> str:
        return translate("ModelCard", "{tokens} tokens → {bytes} (no GQA: {no_gqa})").format(
            tokens=fmt_count(tokens), bytes=format_bytes(tokens * per_token),
            no_gqa=format_bytes(tokens * per_token_no_gqa))

    return [
        (translate("ModelCard", "Model"), f"{facts.name} ({facts.architecture})"),
        (translate("ModelCard", "Precision · device"), f"{facts.precision} · {facts.device}"
         + (" · " + translate("ModelCard", "int8 KV cache") if int8 else "")),
        *([("", why)] if (why := auto_reason(facts)) else []),  # why `auto` chose this precision
        *([(translate("ModelCard", "Runner"), runner)] if (runner := runner_text(facts)) else []),
        (translate("ModelCard", "Layers (L)"), fmt_count(L)),
        (translate("ModelCard", "Hidden size (d)"), fmt_count(d)),
        (translate("ModelCard", "Attention heads"), fmt_count(facts.heads)),
        (translate("ModelCard", "KV heads"), f"{facts.kv_heads} ({facts.attention_kind})"),
        ("", attention_explanation(facts)),
        (translate("ModelCard", "Head dim"), fmt_count(facts.head_dim)),
        (translate("ModelCard", "Vocabulary (V)"), fmt_count(V)),
        (translate("ModelCard", "Context length"),
         translate("ModelCard", "{tokens} tokens").format(tokens=fmt_count(full))),
        (translate("ModelCard", "Parameters (exact)"), fmt_count(facts.params)),
        (translate("ModelCard", "Seeds' estimate V·d + 12·L·d²"),
         f"{fmt_count(V)}·{d} + 12·{L}·{d}² = {fmt_count(estimate)} ({off:+.1f}%)"),
        (translate("ModelCard", "Weights in memory"),
         f"{format_bytes(facts.weights_bytes)} ({fmt_count(facts.weights_bytes)} B)"),
        (translate("ModelCard", "KV bytes / token (GQA form)"),
         f"2·{L}·{facts.kv_heads}·{element(facts.head_dim)} = {fmt_count(per_token)} B ({format_bytes(per_token)})"),
        (translate("ModelCard", "KV bytes / token (no-GQA form)"),
         f"2·{L}·{no_gqa} = {fmt_count(per_token_no_gqa)} B ({format_bytes(per_token_no_gqa)})"),
        (translate("ModelCard", "KV memory, current context"), kv_memory(context_tokens)),
        (translate("ModelCard", "KV memory, full context"), kv_memory(full)),
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
        self.placeholder = QLabel(self.tr("Load a model to see its card."))
        self.placeholder.setTextFormat(Qt.TextFormat.PlainText)  # it may name a server's model: never markup
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["", "value"])
        self.table.horizontalHeader().setVisible(False)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)  # labels: _fit_label_column
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideNone)  # values wrap in the dock (tooltips have them whole)
        # Rows follow their contents at the width the value column has now (the dock resized, the tab first shown):
        # measured once, while the tab was hidden, they cut long values off.
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.viewport().installEventFilter(self)  # its width sets the labels' (_fit_label_column)
        accessibility.name(self.table, self.tr("Model card"),
                           self.tr("The loaded model's architecture and what its KV cache costs"))
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
        self.placeholder.hide()
        self.table.show()
        if [label for label, _ in self.rows] == [label for label, _ in rows]:
            # The same card with another context size (every few tokens while a reply streams): only the
            # changed values are set; rebuilding every item and re-measuring the label column cost ~1 ms each time.
            for r, (_, value) in enumerate(rows):
                item = self.table.item(r, 1)
                if item.text() != value:
                    item.setText(value)
                    item.setToolTip(value)
            return
        self.table.setRowCount(len(rows))
        for r, (label, value) in enumerate(rows):
            label_item = QTableWidgetItem(label)
            label_item.setFlags(Qt.ItemFlag.ItemIsEnabled)
            value_item = QTableWidgetItem(value)
            value_item.setToolTip(value)
            self.table.setItem(r, 0, label_item)
            self.table.setItem(r, 1, value_item)
        self._fit_label_column()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        if watched is self.table.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_label_column()
        return super().eventFilter(watched, event)

    def _fit_label_column(self) -> None:
        """Labels as wide as they need, up to 45 % of the table; past it they wrap, so the values keep room."""
        limit = max(80, int(self.table.viewport().width() * 0.45))
        self.table.setColumnWidth(0, min(self.table.sizeHintForColumn(0), limit))

    @Slot(object)
    def on_bridge_model_loaded(self, facts: object) -> None:
        if isinstance(facts, ModelFacts):
            self.show_facts(facts, 0)
        else:  # a server's model (engine.remote): the API shares nothing of its architecture
            self._facts = None
            self.table.hide()
            self.placeholder.setWordWrap(True)
            self.placeholder.setText(self.tr("{name} runs on a server: its architecture is not shared through the "
                                             "API.").format(name=outside_text(getattr(facts, "name", ""))))
            self.placeholder.show()

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
