"""Experiment 5: attention weights of one layer and head over a sentence, and whether they look healthy.

Capturing weights needs an attention that materialises them (``sdpa`` never does), and that is
slower, so the model is switched to it only for the capture and switched back before returning, even
on error (``PreTrainedModel.set_attn_implementation`` changes the config the attention layers read on
every call; no reload). Normal chat therefore keeps its fast kernel.

The capture attention (``CAPTURE_ATTENTION``, registered in transformers' ``AttentionInterface``) is
transformers' eager attention with one difference: it hands back the fp32 softmax it computed instead
of casting it to the model's dtype first. The layer's output is the same as eager's (it multiplies the
values by the probabilities cast to the model's dtype, as eager does), but the measures below work on
fp32 probabilities whether the model runs in fp32 or bf16, so the lab's numbers do not depend on what
``auto`` picked on this CPU. (Cast to bf16, rows summed to 1 only within 2e-3.) Hand-written because
transformers offers no switch for the dtype of the returned weights.

Measures, per head, over the query rows 1..n-1 (row 0 can only attend to itself):
- first-token mass: mean weight on token 0. Above ``SINK_THRESHOLD`` the head is an *attention sink*
  (most of every query's weight parked on the first token).
- normalised entropy: entropy of row i divided by log(i+1), its maximum under the causal mask, then
  averaged. 1.0 is perfectly uniform; at or above ``COLLAPSE_THRESHOLD`` the head has *collapsed*
  (it no longer picks out any token).
Owns the capture, the measures and the experiment's table; the token labels come from ``engine.lab.tokenview``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

from engine.errors import BadInputError
from engine.lab.results import ExperimentResult, Heatmap, Series
from engine.lab.runs import Progress, check_cancel, model_label, no_progress
from engine.lab.tokenview import TokenPiece, tokenize_view

SINK_THRESHOLD = 0.5  # more than half of every query's weight on token 0, on average
COLLAPSE_THRESHOLD = 0.9  # within 10% of the uniform distribution's entropy


CAPTURE_ATTENTION = "miaohui_eager_fp32"


def _eager_attention_fp32_probs(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                                **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention returning fp32 probabilities. query: (batch, heads, q, d); key/value: (batch,
    kv_heads, k, d); mask: additive (batch, 1, q, k). Returns (batch, q, heads, d) and (batch, heads, q, k)."""
    groups = query.shape[1] // key.shape[1]  # grouped-query attention: each K/V head serves ``groups`` heads
    keys = key.repeat_interleave(groups, dim=1) if groups > 1 else key
    values = value.repeat_interleave(groups, dim=1) if groups > 1 else value
    scores = torch.matmul(query, keys.transpose(2, 3)) * scaling  # (batch, heads, q, k)
    if attention_mask is not None:
        scores = scores + attention_mask[..., :keys.shape[-2]]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32)  # what eager computes, before its cast
    output = torch.matmul(probs.to(query.dtype), values).transpose(1, 2).contiguous()
    return output, probs


AttentionInterface.register(CAPTURE_ATTENTION, _eager_attention_fp32_probs)
ALL_MASK_ATTENTION_FUNCTIONS.register(CAPTURE_ATTENTION, eager_mask)  # the additive causal mask eager gets


@dataclass(frozen=True)
class Sentence:
    """A sentence with a reference to resolve: the pronoun and the phrase it refers to."""

    key: str
    text: str
    pronoun: str  # searched with spaces around it when it is a word, so "he" does not match "the"
    antecedent: str


SENTENCES = (
    Sentence("zh", "我昨天认识的那个人……他居然是我小学同学", "他", "那个人"),
    # The antecedent is not the first token, so its weight is not confused with the attention sink.
    Sentence("en", "Yesterday I met a man at the station... he turned out to be my primary school classmate.",
             " he ", "a man"),
)


@dataclass(frozen=True)
class AttentionCapture:
    """Attention weights of every layer for one text (queries × keys), and the tokens' labels."""

    pieces: tuple[TokenPiece, ...]
    weights: torch.Tensor  # (layers, heads, seq, seq), float32 whatever the model's dtype, rows sum to 1
    attn_implementation_used: str
    attn_implementation_restored: str


def capture_attention(loaded, text: str) -> AttentionCapture:
    """Run one forward over ``text`` with the capture attention and return every layer's weights."""
    model = loaded.model
    view = tokenize_view(loaded.tokenizer, text)
    if not view.pieces:
        raise BadInputError("nothing to look at: the text has no tokens")
    device = next(model.parameters()).device
    input_ids = torch.tensor([[p.token_id for p in view.pieces]], dtype=torch.long, device=device)  # (1, seq)
    previous = model.config._attn_implementation
    try:
        if previous != CAPTURE_ATTENTION:
            model.set_attn_implementation(CAPTURE_ATTENTION)
        used = model.config._attn_implementation
        with torch.inference_mode():
            out = model(input_ids=input_ids, output_attentions=True, use_cache=False)
        # out.attentions: one (1, heads, seq, seq) per layer
        weights = torch.stack([a[0].float().cpu() for a in out.attentions])  # (layers, heads, seq, seq)
    finally:
        if model.config._attn_implementation != previous:
            model.set_attn_implementation(previous)
    return AttentionCapture(pieces=view.pieces, weights=weights, attn_implementation_used=used,
                            attn_implementation_restored=model.config._attn_implementation)


def first_token_mass(weights):
    """Mean weight on key 0 over query rows 1..n-1, per head: (..., seq, seq) -> (...)."""
    if weights.shape[-1] < 2:
        return weights[..., 0, 0] * 0.0
    return weights[..., 1:, 0].mean(dim=-1)


def normalised_entropy(weights):
    """Row entropy ÷ log(i+1) under the causal mask, averaged over rows 1..n-1: (..., seq, seq) -> (...)."""
    seq = weights.shape[-1]
    if seq < 2:
        return weights[..., 0, 0] * 0.0
    rows = weights[..., 1:, :].clamp_min(0.0)  # (..., seq-1, seq)
    entropy = -(rows * torch.log(rows.clamp_min(1e-12))).sum(dim=-1)  # (..., seq-1); 0·log 0 counted as 0
    max_entropy = torch.log(torch.arange(2, seq + 1, dtype=rows.dtype))  # log(i+1) for rows i = 1..n-1
    return (entropy / max_entropy).mean(dim=-1)


def verdict(sink: float, entropy: float) -> str:
    if sink > SINK_THRESHOLD:
        return "attention sink"
    if entropy >= COLLAPSE_THRESHOLD:
        return "collapse (near-uniform)"
    return "focused"


def _span_indices(pieces: tuple[TokenPiece, ...], start: int, end: int) -> list[int]:
    return [p.index for p in pieces if p.start < end and p.end > start]


def run_attention(loaded, cancel: threading.Event, *, layer: int | None = None, head: int = 0,
                  sentences: tuple[Sentence, ...] = SENTENCES, progress: Progress = no_progress) -> ExperimentResult:
    """Heatmaps of ``layer``/``head`` (default: the middle layer, head 0) and the health of every head."""
    started = time.perf_counter()
    facts = loaded.facts
    layer = facts.layers // 2 if layer is None else layer
    if not 0 <= layer < facts.layers or not 0 <= head < facts.heads:
        raise BadInputError(f"layer must be 0..{facts.layers - 1} and head 0..{facts.heads - 1}")
    rows, heatmaps, series, flags = [], [], [], []
    summary: dict[str, object] = {"layer": layer, "head": head, "sink_threshold": SINK_THRESHOLD,
                                  "collapse_threshold": COLLAPSE_THRESHOLD}
    for i, sentence in enumerate(sentences):
        check_cancel(cancel, "attention experiment")
        progress(i / len(sentences), f"attention: capturing {sentence.key}")
        capture = capture_attention(loaded, sentence.text)
        weights = capture.weights  # (layers, heads, seq, seq)
        summary["attn_implementation_during_capture"] = capture.attn_implementation_used
        summary["attn_implementation_after"] = capture.attn_implementation_restored
        sinks = first_token_mass(weights)  # (layers, heads)
        entropies = normalised_entropy(weights)  # (layers, heads)
        p_start = sentence.text.index(sentence.pronoun) + (len(sentence.pronoun) - len(sentence.pronoun.lstrip()))
        p_tokens = _span_indices(capture.pieces, p_start, p_start + len(sentence.pronoun.strip()))
        a_start = sentence.text.index(sentence.antecedent)
        a_tokens = _span_indices(capture.pieces, a_start, a_start + len(sentence.antecedent))
        q = p_tokens[-1]  # the pronoun's last token has seen all of it
        to_antecedent = weights[:, :, q, a_tokens].sum(dim=-1)  # (layers, heads)
        for li in range(weights.shape[0]):
            for hi in range(weights.shape[1]):
                s, e = float(sinks[li, hi]), float(entropies[li, hi])
                rows.append((sentence.key, li, hi, round(s, 4), round(e, 4), round(float(to_antecedent[li, hi]), 4),
                             verdict(s, e)))
        labels = tuple(p.label for p in capture.pieces)
        chosen = weights[layer, head]  # (seq, seq)
        heatmaps.append(Heatmap(title=f"{sentence.text[:16]}… (layer {layer}, head {head})",
                                matrix=tuple(tuple(round(float(v), 5) for v in row) for row in chosen.tolist()),
                                row_labels=labels, col_labels=labels))
        layers_x = tuple(float(li) for li in range(weights.shape[0]))
        series.append(Series(f"first-token mass, {sentence.key}", layers_x, tuple(sinks.mean(dim=1).tolist()),
                             "layer", "mean over heads", panel=0))
        series.append(Series(f"normalised entropy, {sentence.key}", layers_x, tuple(entropies.mean(dim=1).tolist()),
                             "layer", "mean over heads", panel=0))
        n_heads = sinks.numel()
        n_sink = int((sinks > SINK_THRESHOLD).sum())
        n_collapse = int(((entropies >= COLLAPSE_THRESHOLD) & (sinks <= SINK_THRESHOLD)).sum())
        chosen_sink, chosen_entropy = float(sinks[layer, head]), float(entropies[layer, head])
        best = int(to_antecedent.argmax())
        best_layer, best_head = divmod(best, weights.shape[1])
        row_q = weights[layer, head, q]  # (seq,)
        top = sorted(range(row_q.shape[0]), key=lambda k: -float(row_q[k]))[:3]
        summary.update({
            f"{sentence.key}_tokens": len(capture.pieces),
            f"{sentence.key}_chosen_first_token_mass": round(chosen_sink, 4),
            f"{sentence.key}_chosen_normalised_entropy": round(chosen_entropy, 4),
            f"{sentence.key}_chosen_verdict": verdict(chosen_sink, chosen_entropy),
            f"{sentence.key}_heads_sink": f"{n_sink}/{n_heads}",
            f"{sentence.key}_heads_collapsed": f"{n_collapse}/{n_heads}",
            f"{sentence.key}_pronoun_top3": ", ".join(f"{labels[k]} {float(row_q[k]):.2f}" for k in top),
            f"{sentence.key}_best_head_for_antecedent": f"layer {best_layer} head {best_head} "
                                                        f"({float(to_antecedent[best_layer, best_head]):.2f})",
        })
        if n_sink:
            flags.append(f"{sentence.key}: {n_sink} of {n_heads} heads put more than {SINK_THRESHOLD:.0%} of their "
                         f"weight on the first token (attention sink)")
        if n_collapse:
            flags.append(f"{sentence.key}: {n_collapse} of {n_heads} heads are near-uniform (normalised entropy ≥ "
                         f"{COLLAPSE_THRESHOLD}; collapse)")
        verdict_chosen = verdict(chosen_sink, chosen_entropy)
        if verdict_chosen != "focused":
            flags.append(f"{sentence.key}: the chosen head (layer {layer}, head {head}) shows {verdict_chosen}")
    progress(1.0, "attention: done")
    return ExperimentResult(
        key="attention", title=f"Attention: layer {layer}, head {head}",
        columns=("sentence", "layer", "head", "first_token_mass", "normalised_entropy", "pronoun_to_antecedent",
                 "verdict"),
        rows=tuple(rows), series=tuple(series), heatmaps=tuple(heatmaps), summary=summary, flags=tuple(flags),
        notes=(f"first-token mass = mean weight on token 0 over query rows 1..n-1; sink if > {SINK_THRESHOLD}",
               "normalised entropy = row entropy / log(row length), mean over rows 1..n-1; "
               f"collapse if ≥ {COLLAPSE_THRESHOLD} (1.0 = uniform)",
               "pronoun_to_antecedent = weight from the pronoun's last token to the antecedent's tokens",
               "a sink on the first token is common in trained models (it parks unused weight); the flag says "
               "where it dominates",
               "weights captured with eager attention (fp32 softmax) for this experiment only; the model is switched back after"),
        model=model_label(loaded), elapsed_s=time.perf_counter() - started)
