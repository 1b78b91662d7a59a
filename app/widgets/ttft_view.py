"""The performance panel's "Why this TTFT" and "Context pressure" rows: where the wait for the first token went and
what a longer conversation will cost, from the reply's own figures.

Why this TTFT: a waterfall of the reply's time to first token — what lies outside the prefill (the chat
template, tokenisation, matching the cached prefix and choosing the first token: the engine measures them
together, TTFT − prefill), the tokens reused from the KV cache (free), and the tokens prefilled ÷ the measured
prefill rate — each part's share of the TTFT drawn as a bar. Context pressure: the KV-cache bytes of 1,000 more tokens (``ModelFacts.kv_bytes_per_token``),
the decode slow-down they bring where decoding is bound by reading memory (their bytes ÷ the bytes read per
token now, ``engine.bench.roofline``), the tokens left before the oldest turns are dropped, and what recomputing
the kept conversation would cost at the median prefill rate of recent replies of the same model, with its range
(``set_prefill_estimate``; never from this reply's rate alone, which a few-token prefill makes noise).
A vision turn's pictures get two rows: the tokens each became with their KV bytes (and how many a follow-up found
in the cache), and the vision encoder's time, a step of the waterfall (``show_images``, from ``ImagesEncoded``, or a
reopened reply's ``PerfRecord``).
The reused tokens that were a cached document prefix (a new conversation attaching files an earlier one put
whole into its prompt: ``ReplyStarted.document_prefix_tokens``) get a row of their own, under the reused ones.
Live while the prompt prefills: its progress in percent
(``PrefillProgress``), and where the prompt stopped matching the cache (``Started.reuse_break``: the marker and, for a
changed date or time, the hint; ``app.widgets.reuse_break_text`` words them).
Computes nothing the engine did not measure beyond
that arithmetic; "—" for what is not known (a server's reply).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QT_TRANSLATE_NOOP
from PySide6.QtWidgets import QLabel, QProgressBar, QSizePolicy, QVBoxLayout, QWidget

from app.history.perf import PerfRecord
from app.ui.metric_rows import metric_caption, metric_form, metric_value
from app.widgets.reuse_break_text import break_text
from engine.fmt import format_bytes

STEPS = (("before", QT_TRANSLATE_NOOP("TtftView", "Template, tokens, first pick")),
         ("reused", QT_TRANSLATE_NOOP("TtftView", "Reused from the cache")),
         ("document", QT_TRANSLATE_NOOP("TtftView", "Cached document prefix")),
         ("images", QT_TRANSLATE_NOOP("TtftView", "Image tokens")),
         ("encoder", QT_TRANSLATE_NOOP("TtftView", "Vision encoder")),
         ("prefill", QT_TRANSLATE_NOOP("TtftView", "Prefilled")),
         ("progress", QT_TRANSLATE_NOOP("TtftView", "Prefill progress")),
         ("break", QT_TRANSLATE_NOOP("TtftView", "Cache stopped matching")))
PRESSURE = (("kv_1000", QT_TRANSLATE_NOOP("TtftView", "KV per 1,000 tokens")),
            ("slowdown_1000", QT_TRANSLATE_NOOP("TtftView", "Decode per 1,000 tokens")),
            ("truncation", QT_TRANSLATE_NOOP("TtftView", "Before truncation")))
HELP = {
    "before": QT_TRANSLATE_NOOP("TtftView", "The TTFT outside the prefill: the chat template, tokenisation, finding "
                                            "how much of the prompt the KV cache already holds, and choosing the "
                                            "first token from the prefill's last logits."),
    "reused": QT_TRANSLATE_NOOP("TtftView", "Prompt tokens whose keys and values the cache kept from the last reply: "
                                            "they cost nothing. A changing prefix (a date in the system prompt) "
                                            "breaks reuse from its first token on."),
    "document": QT_TRANSLATE_NOOP("TtftView", "Of the reused tokens, those of documents put whole into the prompt "
                                              "that an earlier conversation attaching the same files computed: kept "
                                              "in memory and on disk, so a new conversation on them prefills only "
                                              "its question."),
    "images": QT_TRANSLATE_NOOP("TtftView", "The tokens each attached picture became (the vision-language model's "
                                            "own tiling), and the KV cache they take: they are prompt tokens like "
                                            "any other. A follow-up about the same picture at the same place reuses "
                                            "them from the cache."),
    "encoder": QT_TRANSLATE_NOOP("TtftView", "The vision tower and projector turning the pictures into those tokens' "
                                             "embeddings, once per picture; nothing when the cache held them all."),
    "prefill": QT_TRANSLATE_NOOP("TtftView", "The prompt tokens computed for this reply ÷ the measured prefill rate."),
    "progress": QT_TRANSLATE_NOOP("TtftView", "The share of this reply's new prompt tokens computed so far, "
                                              "chunk by chunk, before the first token."),
    "break": QT_TRANSLATE_NOOP("TtftView", "The first prompt token the KV cache held something else for: the "
                                           "tokens around it (⟦ ⟧ marks where they part) and the message it is in. "
                                           "Everything from there on was computed again. A value that changes "
                                           "every turn, such as a date in the system prompt, breaks reuse there "
                                           "each time: put it at the end or leave it out."),
    "kv_1000": QT_TRANSLATE_NOOP("TtftView", "The KV cache 1,000 more tokens of conversation will take: "
                                             "2 × layers × kv heads × head size × bytes, × 1,000."),
    "slowdown_1000": QT_TRANSLATE_NOOP("TtftView", "Where decoding is bound by reading memory, each token reads the "
                                                   "whole cache: 1,000 more tokens make every token this much slower "
                                                   "(their KV bytes ÷ the bytes read per token now)."),
    "truncation": QT_TRANSLATE_NOOP("TtftView", "Tokens left in the model's window. Past them the oldest turns are "
                                                "dropped (the system prompt kept), and the kept conversation is "
                                                "prefilled again: this long at the median prefill rate of recent "
                                                "replies of this model (the range: their fastest and slowest)."),
}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


class TtftView(QWidget):
    """Both sections' rows; ``show_metrics(metrics, bytes_per_token)`` fills them, ``reset`` clears them."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._kv_per_token: int | None = None
        self._estimate: Any = None  # app.state.rate_estimate.RateEstimate of the loaded model, None while unknown
        self._shown: tuple[Any, int | None] | None = None  # the figures the pressure rows were drawn from
        self._reused_images = 0  # of a vision turn's pictures, those the KV cache held (not encoded again)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.values: dict[str, QLabel] = {}
        self.bars: dict[str, QProgressBar] = {}
        self.captions: dict[str, QLabel] = {}
        for title, rows in ((self.tr("Why this TTFT"), STEPS), (self.tr("Context pressure"), PRESSURE)):
            heading = QLabel(title)
            heading.setObjectName("sectionTitle")
            layout.addWidget(heading)
            form = metric_form()
            for key, caption in rows:
                label = metric_caption(self.tr(caption), self.tr(HELP[key]))
                value = metric_value(self.tr(caption), self.tr(HELP[key]))
                field: QWidget = value
                if rows is STEPS and key not in ("break", "document", "images"):  # the waterfall: each step's share of the TTFT as a bar
                    bar = QProgressBar()
                    bar.setRange(0, 1000)
                    bar.setTextVisible(False)
                    bar.setFixedHeight(6)
                    bar.setAccessibleName(self.tr(caption))
                    bar.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
                    field = QWidget()  # never wider than the form gives it: the panel's width is the window's
                    field.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
                    column = QVBoxLayout(field)
                    column.setContentsMargins(0, 0, 0, 0)
                    column.setSpacing(1)
                    column.addWidget(value)
                    column.addWidget(bar)
                    self.bars[key] = bar
                form.addRow(label, field)
                self.values[key], self.captions[key] = value, label
            layout.addLayout(form)
        self.reset()

    def set_model_facts(self, facts: Any) -> None:
        per_token = getattr(facts, "kv_bytes_per_token", None) if facts is not None else None
        self._kv_per_token = int(per_token) if isinstance(per_token, int) and per_token > 0 else None

    def set_prefill_estimate(self, estimate: Any) -> None:
        """The prefill rate recent replies of the loaded model measured (``RateEstimate``; None: none yet)."""
        self._estimate = estimate
        if self._shown is not None:
            self._pressure(*self._shown)

    def reset(self) -> None:
        self._shown = None
        self._reused_images = 0
        for value in self.values.values():
            value.setText("—")
        for bar in self.bars.values():
            bar.setValue(0)

    def show_started(self, started: Any) -> None:
        """A reply's prompt is about to be prefilled: where it parted from the cache (``Started.reuse_break``)."""
        documents = getattr(started, "document_prefix_tokens", 0)  # app.runtime.worker.ReplyStarted
        if documents:
            self.values["document"].setText(self.tr("{n} of the reused tokens").format(n=documents))
        broke = getattr(started, "reuse_break", None)
        if broke is not None:
            self.values["break"].setText(break_text(self, broke))
        elif getattr(started, "reused_tokens", 0):
            self.values["break"].setText(self.tr("nowhere: the cache matched up to the new message"))

    def show_images(self, image_tokens: tuple[int, ...], encoder_s: float | None, reused_images: int = 0) -> None:
        """A vision turn's pictures: the tokens each became, their KV bytes, and the vision encoder's time (the
        pictures the cache held were not encoded again)."""
        if not image_tokens:
            return
        self._reused_images = reused_images  # the reply's ImagesEncoded said it; its Metrics do not
        tokens = " + ".join(str(n) for n in image_tokens)
        text = self.tr("{tokens} tokens").format(tokens=tokens)
        if self._kv_per_token:
            text += self.tr(" · KV {bytes}").format(bytes=format_bytes(self._kv_per_token * sum(image_tokens)))
        if reused_images:
            text += self.tr(" · {n} of {count} reused from the cache").format(n=reused_images, count=len(image_tokens))
        self.values["images"].setText(text)
        if encoder_s:
            self.values["encoder"].setText(_ms(encoder_s))
        elif reused_images == len(image_tokens):
            self.values["encoder"].setText(self.tr("not run: the cache held every picture"))

    def show_prefill(self, done: int, total: int) -> None:
        """``done`` of ``total`` new prompt tokens are computed (once per prefill chunk)."""
        share = 100 * done // total if total > 0 else 100
        self.values["progress"].setText(self.tr("{share} % ({done} of {total} tokens)").format(
            share=share, done=done, total=total))
        self.bars["progress"].setValue(10 * share)

    def shown(self) -> dict[str, str]:
        return {key: value.text() for key, value in self.values.items()}

    def show_metrics(self, m: Any, bytes_per_token: int | None) -> None:
        """Fill the rows from ``m`` (Metrics or a stored record; a name in ``m.unknown`` is not known)."""
        unknown = getattr(m, "unknown", None) or ()
        get = lambda name: None if name in unknown else getattr(m, name, None)  # noqa: E731
        self._waterfall(get)
        self._pressure(get, bytes_per_token)
        images, encoder_s = get("image_tokens"), get("vision_encoder_s")
        if images:  # a vision turn's: its Metrics, or the record kept of it (a reply reopened or paged back)
            reused = self._reused_images
            if isinstance(m, PerfRecord) and encoder_s is None:
                reused = len(images)  # a record keeps no ImagesEncoded: no encoder time means every picture was cached
            self.show_images(tuple(images), encoder_s, reused)

    def _waterfall(self, get: Any) -> None:
        ttft, prefill_s = get("ttft_s"), get("prefill_s")
        prefill_tokens, reused, rate = get("prefill_tokens"), get("reused_tokens") or 0, get("prefill_tok_s")
        v = self.values
        v["reused"].setText(self.tr("{n} tokens, free").format(n=reused) if prefill_tokens is not None else "—")
        if ttft is None or prefill_s is None:
            if prefill_tokens is not None and rate:
                v["prefill"].setText(self.tr("{n} tokens ÷ {rate} tok/s").format(n=prefill_tokens, rate=f"{rate:.0f}"))
            return
        # Where the TTFT went: the prefill and a vision turn's encoder are measured; the rest is everything around them.
        encoder = get("vision_encoder_s") or 0.0
        before = max(0.0, ttft - prefill_s - encoder)
        parts = {"before": before, "reused": 0.0, "encoder": encoder, "prefill": prefill_s}
        v["before"].setText(_ms(before))
        v["prefill"].setText(self.tr("{n} tokens ÷ {rate} tok/s = {time}").format(
            n=prefill_tokens, rate=f"{rate:.0f}" if rate else "—", time=_ms(prefill_s)))
        for key, seconds in parts.items():
            self.bars[key].setValue(int(1000 * seconds / ttft) if ttft > 0 else 0)

    def _pressure(self, get: Any, bytes_per_token: int | None) -> None:
        self._shown = (get, bytes_per_token)
        v = self.values
        per_1000 = self._kv_per_token * 1000 if self._kv_per_token else None
        v["kv_1000"].setText(format_bytes(per_1000) if per_1000 else "—")
        if per_1000 and bytes_per_token:
            v["slowdown_1000"].setText(self.tr("+{share} % time per token").format(
                share=f"{100 * per_1000 / bytes_per_token:.1f}"))
        used, limit, est = get("context_tokens"), get("context_max"), self._estimate
        if used is not None and limit:
            text = self.tr("{n} tokens left").format(n=max(0, int(limit) - int(used)))
            if est is not None:
                typical, fast, slow = est.seconds(int(used))
                text += self.tr(", then ~{time} ({low}–{high}) to prefill the kept conversation again").format(
                    time=_ms(typical), low=_ms(fast), high=_ms(slow))
            v["truncation"].setText(text)
