"""Experiment "whole text vs retrieval": what putting a document whole into the prompt costs against retrieving.

For a real document (Vim's tutor, ``engine.bench.corpus``) cut to several lengths, in English and Chinese, one
question is answered twice on fresh sessions: with the whole cut text as its one source, and with the passages
retrieved from it (indexed into a store in a temporary folder, searched, kept while they fit). Each row has the
prompt and prefill tokens, TTFT, the KV cache's bytes, and for retrieval the seconds searching took (indexing is
a one-off per document and is its own column). Whole text that does not fit the context is a row without
figures, which is the policy's reason to retrieve.

Why: the seeds say prefill is O(n²) and the KV cache grows with every token, so a long document put whole costs
more with every page while retrieval's prompt stays bounded by the passages kept; this shows by how much on the
user's own model. Owns the plan and the table; the prompt is ``engine.docs.grounding``'s, the timings ``Metrics``'.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from engine.bench import corpus
from engine.docs.chunking import ChunkConfig
from engine.docs.grounding import Budget, Source, ground, grounded_message, hit_sources
from engine.errors import ContextTooLongError
from engine.events import Message
from engine.inputs import SamplingConfig
from engine.lab.results import ExperimentResult, Series
from engine.lab.runs import Progress, check_cancel, generate_once, model_label, no_progress

QUESTIONS = {"en": "How do I delete a word and then undo it?", "zh": "如何删除一个单词，又如何撤销？"}
LENGTHS_FULL = (1_000, 2_000, 4_000, 8_000, 16_000)  # characters of the document
LENGTHS_QUICK = (1_000, 4_000, 12_000)
PASSAGES = 4  # retrieved passages asked for (the budget keeps those that fit)
COLUMNS = ("language", "chars", "mode", "prompt_tokens", "prefill_tokens", "source_tokens", "ttft_s",
           "kv_cache_bytes", "retrieval_s", "index_s", "note")


def run_docs_vs_retrieval(loaded, cancel: threading.Event, *, lengths: Sequence[int] = LENGTHS_FULL,
                          embedder=None, chunking: ChunkConfig = ChunkConfig(), passages: int = PASSAGES,
                          progress: Progress = no_progress) -> ExperimentResult:
    """``embedder``: the passages' embedding model (None: keyword retrieval alone, as the app without one)."""
    from engine.docs.attach import token_counter
    from engine.docs.index import index_paths
    from engine.docs.retrieve import search
    from engine.docs.store import DocumentStore
    from engine.generate.context import render

    started = time.perf_counter()
    tokenizer = loaded.tokenizer
    count = token_counter(tokenizer)
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=1)  # TTFT only
    progress(0.0, "whole vs retrieval: warm-up")
    generate_once(loaded, "Hi", config, cancel)
    plans = [(lang, chars) for lang in ("en", "zh") for chars in sorted(lengths)]
    rows: list[tuple] = []
    points: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="miaohui-lab-docs-") as folder:
        for i, (lang, chars) in enumerate(plans):
            check_cancel(cancel, "experiment")
            question = QUESTIONS[lang]
            document = corpus.cut(corpus.text(lang), chars)
            name = f"{Path(corpus.TEXTS[lang]).stem}-{chars}.txt"
            path = Path(folder) / name
            path.write_text(document, encoding="utf-8")
            frame = render(tokenizer, [Message("user", grounded_message(question, []))])
            budget = Budget(context_tokens=loaded.facts.context_length or 0, conversation_tokens=len(frame),
                            reply_tokens=config.max_new_tokens)
            whole = [Source(path=name, page=None, text=document, score=None)]
            progress(i / len(plans), f"whole vs retrieval: {lang}, {len(document)} characters, whole")
            try:
                grounding = ground(question, whole, list, "whole", budget, count)
            except ContextTooLongError as exc:
                rows.append((lang, len(document), "whole", None, None, None, None, None, None, None, str(exc)))
            else:
                m = generate_once(loaded, grounding.message, config, cancel).metrics
                rows.append((lang, len(document), "whole", m.prompt_tokens, m.prefill_tokens, grounding.source_tokens,
                             _r(m.ttft_s), m.kv_cache_bytes, None, None, ""))
                points.setdefault((lang, "whole"), []).append((len(document), m.ttft_s or 0.0, m.prefill_tokens,
                                                               m.kv_cache_bytes))
            progress((i + 0.5) / len(plans), f"whole vs retrieval: {lang}, {len(document)} characters, retrieved")
            t0 = time.perf_counter()
            with DocumentStore(Path(folder) / f"{lang}-{chars}.sqlite3") as store:
                index_paths(store, "lab", [path], embedder=embedder, chunking=chunking)
                index_s = time.perf_counter() - t0
                found = search(store, question, ["lab"], k=passages, embedder=embedder)
            grounding = ground(question, whole, lambda: hit_sources(found.hits), "retrieve", budget, count)
            m = generate_once(loaded, grounding.message, config, cancel).metrics
            rows.append((lang, len(document), "retrieve", m.prompt_tokens, m.prefill_tokens, grounding.source_tokens,
                         _r(m.ttft_s), m.kv_cache_bytes, _r(found.seconds), _r(index_s),
                         f"{len(grounding.sources)} passages, {found.mode}"))
            points.setdefault((lang, "retrieve"), []).append((len(document), (m.ttft_s or 0.0) + found.seconds,
                                                              m.prefill_tokens, m.kv_cache_bytes))
    progress(1.0, "whole vs retrieval: done")
    series = []
    for (lang, mode), values in sorted(points.items()):
        x = tuple(float(v[0]) for v in values)
        label = f"{lang}, {mode}"
        series += [Series(label, x, tuple(v[1] for v in values), "document characters", "TTFT (s)", panel=0),
                   Series(label, x, tuple(float(v[2]) for v in values), "document characters", "prefill tokens",
                          panel=1),
                   Series(label, x, tuple(v[3] / 2**20 for v in values), "document characters", "KV cache (MiB)",
                          panel=2)]
    summary = _summary(rows)
    return ExperimentResult(
        key="docs", title="Whole text vs retrieved passages", columns=COLUMNS, rows=tuple(rows),
        series=tuple(series), summary=summary,
        notes=("document: Vim's tutor (engine/bench/data, Vim licence), cut at a line end to each length; "
               f"questions: {QUESTIONS['en']!r}, {QUESTIONS['zh']!r}",
               "each prompt is answered on a fresh session (nothing reused), one token, after a warm-up",
               "retrieval's TTFT in the chart includes the search (retrieval_s); indexing (index_s) is once per "
               "document and is not included",
               "retrieval: " + ("keywords and dense vectors, fused" if embedder is not None
                                else "keywords only (no embedding model installed)")),
        model=model_label(loaded), elapsed_s=time.perf_counter() - started)


def _summary(rows: list[tuple]) -> dict[str, float | int | None]:
    """At the longest length both ways measured, per language: whole's cost over retrieval's."""
    summary: dict[str, float | int | None] = {}
    for lang in ("en", "zh"):
        whole = {r[1]: r for r in rows if r[0] == lang and r[2] == "whole" and r[4] is not None}
        retrieved = {r[1]: r for r in rows if r[0] == lang and r[2] == "retrieve"}
        both = sorted(set(whole) & set(retrieved))
        if not both:
            continue
        w, r = whole[both[-1]], retrieved[both[-1]]
        summary[f"{lang}_chars"] = both[-1]
        summary[f"{lang}_prefill_tokens_whole_over_retrieved"] = _r(w[4] / r[4], 2) if r[4] else None
        summary[f"{lang}_ttft_whole_over_retrieved"] = _r(w[6] / r[6], 2) if r[6] else None
        summary[f"{lang}_kv_bytes_whole_over_retrieved"] = _r(w[7] / r[7], 2) if r[7] else None
        summary[f"{lang}_longest_whole_that_fits"] = max(whole)
    return summary


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
