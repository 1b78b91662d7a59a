"""``engine bench --docs``: how fast documents are indexed and embedded, and what a cached document prefix saves.

Four measurements, one run, one machine:

- indexing: pages per second into a real store (SQLite, FTS5, vectors) in a temporary folder, for a PDF laid out
  from Vim's English tutor (``engine.bench.corpus``: real text, a real text layer) and for the Chinese tutor as one
  text file per page, with the default embedding model where it was fetched;
- embedding: passages per second of ``engine.docs.embed.TransformersEmbedder`` against transformers' own forward on
  the same model folder and the same passages (``AutoModel``, mean pooling over the attention mask, L2
  normalization: what sentence-transformers does for all-MiniLM-L6-v2), alternated, same batch size and window, and
  the largest difference between their vectors;
- a follow-up question on a whole document: the document put whole into the first question (the grounded
  message), answered; then a second question in the same session, whose prompt starts with the first turn, so its
  KV prefix is reused and only the reply and the new question are prefilled. TTFT second / first (issue 43's
  target: ≤ 0.2). Then a new conversation attaching the same document (a fresh session, another question): its
  first turn starts from the document prefix the first conversation kept (``engine.docs.kv_prefix``), from memory,
  and again from its sealed file alone (a new ``DocumentPrefixes`` on the same folder: as after a restart), each
  restore inside its TTFT. Each TTFT over the first's, side by side in one run;
- a folder of 10,000 small text files (issue 43's "a folder of 10,000 files"), indexed on keywords alone: files per
  second the first time, and again with nothing changed (every file read and hashed, none cut or written).

Owns the plan, the JSON shape and the table; the timings inside a reply are ``Metrics``'.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from engine.bench import corpus

FOLLOW_UP = ("What does the command dw do?", "And how do I undo it?")
NEW_CONVERSATION = "How do I move the cursor down?"  # a new conversation's first question on the same document
FOLDER_FILES = 10_000
TARGET_FOLLOW_UP_RATIO = 0.2


def _indexing(embedder, progress: Callable[[str], None], pdf_copies: int) -> dict[str, Any]:
    from engine.docs.index import index_paths
    from engine.docs.store import DocumentStore

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="miaohui-bench-docs-") as folder:
        root = Path(folder)
        # The tutor repeated to a ~40-page PDF: the "attach a 40-page PDF".
        pdf_pages = corpus.pages(corpus.text("en")) * pdf_copies
        (root / "pdf").mkdir()
        (root / "pdf" / "vimtutor.pdf").write_bytes(corpus.make_pdf(pdf_pages))
        (root / "txt").mkdir()
        txt_pages = corpus.pages(corpus.text("zh"))
        for i, page in enumerate(txt_pages):
            (root / "txt" / f"vimtutor-zh-{i + 1:02d}.txt").write_text(page, encoding="utf-8")
        for kind, pages in (("pdf", len(pdf_pages)), ("txt", len(txt_pages))):
            progress(f"indexing {pages} {kind} pages")
            with DocumentStore(root / f"{kind}.sqlite3") as store:
                t0 = time.perf_counter()
                report = index_paths(store, kind, [root / kind], embedder=embedder)
                seconds = time.perf_counter() - t0
            result[kind] = {"pages": pages, "passages": report.passages, "seconds": round(seconds, 3),
                            "pages_per_s": round(pages / seconds, 2), "embedded": report.embedded}
    return result


def write_notes_folder(root: Path, files: int) -> Path:
    """``files`` small notes under ``root``, 500 to a subfolder, each with a code word of its own (``w00042``) that a
    keyword search finds in that file only (the benchmark and tests/engine/docs/test_index_many.py use it)."""
    for i in range(files):
        folder = root / f"part{i // 500:02d}"
        if i % 500 == 0:
            folder.mkdir(parents=True)
        (folder / f"note{i:05d}.txt").write_text(
            f"Note {i}. The meeting about project {i % 97} is on day {i % 31}.\n\nIts code word is w{i:05d}.",
            encoding="utf-8")
    return root


def folder_indexing(files: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """A folder of ``files`` notes indexed on keywords alone into a temporary store, then again unchanged."""
    from engine.docs.index import index_paths
    from engine.docs.store import DocumentStore

    with tempfile.TemporaryDirectory(prefix="miaohui-bench-folder-") as folder:
        root = write_notes_folder(Path(folder) / "notes", files)
        progress(f"indexing a folder of {files} files (keywords only)")
        with DocumentStore(Path(folder) / "documents.sqlite3") as store:
            t0 = time.perf_counter()
            first = index_paths(store, "folder", [root])
            t1 = time.perf_counter()
            again = index_paths(store, "folder", [root])
            t2 = time.perf_counter()
    return {"files": files, "indexed": first.added, "seconds": round(t1 - t0, 3),
            "files_per_s": round(first.added / (t1 - t0), 1), "unchanged": again.unchanged,
            "unchanged_seconds": round(t2 - t1, 3), "unchanged_files_per_s": round(again.unchanged / (t2 - t1), 1)}


def _passages() -> list[str]:
    from engine.docs.chunking import chunk
    from engine.docs.readers import read_document

    texts: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        for lang in ("en", "zh"):
            path = Path(folder) / corpus.TEXTS[lang]
            path.write_text(corpus.text(lang), encoding="utf-8")
            texts += [p.text for p in chunk(read_document(path))]
    return texts


def _embedding(embedder, reps: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """The engine's embedder against transformers' forward with mean pooling on the same folder and passages."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from engine.docs.embed import EmbedConfig, default_embedder_dir

    folder = default_embedder_dir()
    config = EmbedConfig()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder), use_safetensors=True, dtype=torch.float32).eval()
    texts = _passages()

    def reference() -> np.ndarray:
        rows = []
        with torch.inference_mode():
            for start in range(0, len(texts), config.batch_size):
                encoded = tokenizer(texts[start:start + config.batch_size], padding=True, truncation=True,
                                    max_length=config.max_tokens, return_tensors="pt")
                hidden = model(**encoded).last_hidden_state  # (batch, seq, dim)
                mask = encoded["attention_mask"].unsqueeze(-1).float()  # (batch, seq, 1)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                rows.append(torch.nn.functional.normalize(pooled, p=2, dim=1).numpy())
        return np.concatenate(rows)

    times: dict[str, list[float]] = {"engine": [], "transformers": []}
    vectors: dict[str, Any] = {}
    embedder.embed(texts[:8])  # warm-up of both paths: the first forward pays one-off costs (allocator, threads)
    with torch.inference_mode():
        model(**tokenizer(texts[:8], padding=True, return_tensors="pt"))
    for rep in range(reps):
        progress(f"embedding {len(texts)} passages, round {rep + 1} of {reps}")
        for name, run in (("engine", lambda: embedder.embed(texts)), ("transformers", reference)):
            t0 = time.perf_counter()
            vectors[name] = run()
            times[name].append(time.perf_counter() - t0)
    seconds = {name: statistics.median(values) for name, values in times.items()}
    return {"model": embedder.name, "passages": len(texts), "batch_size": config.batch_size, "reps": reps,
            "engine_passages_per_s": round(len(texts) / seconds["engine"], 1),
            "transformers_passages_per_s": round(len(texts) / seconds["transformers"], 1),
            "engine_over_transformers": round(seconds["transformers"] / seconds["engine"], 3),
            "max_abs_difference": float(np.abs(vectors["engine"] - vectors["transformers"]).max())}


def _follow_up(model: str, chars: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from engine.inputs import LoadSpec
    from engine.models.loader import load_model

    return follow_up(load_model(LoadSpec(model=model), cancel=threading.Event()), chars, progress)


def follow_up(loaded: Any, chars: int, progress: Callable[[str], None], max_new_tokens: int = 24) -> dict[str, Any]:
    """The follow-up and the new conversation on ``loaded`` (see the module docstring), ``chars`` of the tutor."""
    from engine.docs.attach import ground_conversation
    from engine.docs.kv_prefix import DocumentPrefixes, document_prefix_ids
    from engine.events import Message
    from engine.generate.kv_store import KVStore
    from engine.inputs import SamplingConfig
    from engine.lab.runs import generate_once, new_session

    cancel = threading.Event()
    config = SamplingConfig(temperature=0.0, repetition_penalty=1.0, max_new_tokens=max_new_tokens)
    generate_once(loaded, "Hi", config, cancel)  # warm-up: the first forward pays one-off costs
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vimtutor.txt"
        path.write_text(corpus.cut(corpus.text("en"), chars), encoding="utf-8")

        def grounded(question: str) -> Any:
            return ground_conversation(loaded.tokenizer, loaded.facts.context_length, [Message("user", question)],
                                       [str(path)], "whole", config.max_new_tokens)

        messages, used = grounded(FOLLOW_UP[0])
        store = lambda: KVStore(Path(folder) / "kv")  # noqa: E731 (the window's: its conversations' KV folder)
        kept = DocumentPrefixes(store)
        session = new_session(loaded)
        progress("a first question on the whole document")
        first = runs["first"] = generate_once(loaded, messages, config, cancel, session=session)
        prefix = document_prefix_ids(loaded.tokenizer, messages, FOLLOW_UP[0])
        if prefix:  # what the window's worker does after a whole-document turn
            kept.keep(session, prefix)
        progress("the follow-up in the same session")
        runs["follow_up"] = generate_once(loaded, messages + [Message("assistant", first.text),
                                                               Message("user", FOLLOW_UP[1])],
                                          config, cancel, session=session)
        new_messages, _ = grounded(NEW_CONVERSATION)
        for name, prefixes in (("new_conversation", kept), ("new_conversation_from_disk", DocumentPrefixes(store))):
            progress(f"a new conversation on the same document ({name})")
            fresh = new_session(loaded)
            prefixes.prepare(fresh, new_messages, NEW_CONVERSATION)
            runs[name] = generate_once(loaded, new_messages, config, cancel, session=fresh)
    base = runs["first"].metrics.ttft_s
    result: dict[str, Any] = {"model": f"{loaded.facts.name} ({loaded.facts.precision}, {loaded.facts.device})",
                              "document_chars": chars, "document_tokens": used.source_tokens,
                              "document_prefix_tokens": len(prefix or ()), "target": TARGET_FOLLOW_UP_RATIO}
    for name, run in runs.items():
        m = run.metrics
        result[name] = {"prompt_tokens": m.prompt_tokens, "prefill_tokens": m.prefill_tokens,
                        "reused_tokens": m.reused_tokens, "ttft_s": m.ttft_s}
        if name != "first":
            ratio = m.ttft_s / base if base and m.ttft_s else None
            result[name].update(ttft_ratio=None if ratio is None else round(ratio, 4),
                                met=ratio is not None and ratio <= TARGET_FOLLOW_UP_RATIO)
    # The same-session figures where they were before (earlier JSON readers).
    result["ttft_ratio"], result["met"] = result["follow_up"]["ttft_ratio"], result["follow_up"]["met"]
    return result


def measure(model: str, reps: int, progress: Callable[[str], None], *, chars: int = 8_000,
            pdf_copies: int = 4, embedder=None) -> dict[str, Any]:
    """All four; ``embedder`` None: the default one (the embedding comparison is skipped without one)."""
    import platform

    from engine.docs.embed import default_embedder

    embedder = embedder or default_embedder()
    result: dict[str, Any] = {"machine": {"processor": _cpu_name(), "platform": platform.platform()},
                              "embedder": embedder.name if embedder is not None else None}
    result["indexing"] = _indexing(embedder, progress, pdf_copies)
    result["embedding"] = _embedding(embedder, reps, progress) if embedder is not None else None
    result["follow_up"] = _follow_up(model, chars, progress)
    result["folder"] = folder_indexing(FOLDER_FILES, progress)
    return result


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor()


def table(result: dict[str, Any]) -> str:
    """The readable report (Markdown)."""
    lines = [f"Documents benchmark on {result['machine']['processor']} (embedder: {result['embedder'] or 'none'})",
             "", "| indexing | pages | passages | seconds | pages/s |", "|---|---|---|---|---|"]
    for kind, row in result["indexing"].items():
        lines.append(f"| {kind} | {row['pages']} | {row['passages']} | {row['seconds']} | {row['pages_per_s']} |")
    e = result["embedding"]
    if e:
        lines += ["", "| embedding ({model}, {passages} passages, batch {batch_size}) | passages/s |".format(**e),
                  "|---|---|", f"| engine (embed.py) | {e['engine_passages_per_s']} |",
                  f"| transformers AutoModel + mean pooling | {e['transformers_passages_per_s']} |",
                  f"| engine / transformers speed | {e['engine_over_transformers']}× "
                  f"(vectors differ by ≤ {e['max_abs_difference']:.2e}) |"]
    f = result["follow_up"]
    lines += ["", f"| follow-up on a whole document ({f['document_tokens']} tokens, {f['model']}) | prompt tokens | "
                  "prefilled | TTFT (s) |", "|---|---|---|---|",
              f"| first question | {f['first']['prompt_tokens']} | {f['first']['prefill_tokens']} | "
              f"{f['first']['ttft_s']:.3f} |",
              f"| follow-up, same session | {f['follow_up']['prompt_tokens']} | {f['follow_up']['prefill_tokens']} | "
              f"{f['follow_up']['ttft_s']:.3f} |"]
    rows = (("follow_up", "follow-up, same session"), ("new_conversation", "new conversation, same document"),
            ("new_conversation_from_disk", "new conversation, same document, prefix from disk"))
    lines += [f"| {label} | {f[name]['prompt_tokens']} | {f[name]['prefill_tokens']} | {f[name]['ttft_s']:.3f} |"
              for name, label in rows[1:] if name in f]
    lines += [f"| TTFT ratio, {label} / first | {f[name]['ttft_ratio']} (target ≤ {f['target']}: "
              f"{'met' if f[name]['met'] else 'missed'}) | | |" for name, label in rows if name in f]
    d = result.get("folder")
    if d:
        lines += ["", f"| a folder of {d['files']} text files, keywords only | seconds | files/s |", "|---|---|---|",
                  f"| first index | {d['seconds']} | {d['files_per_s']} |",
                  f"| again, nothing changed | {d['unchanged_seconds']} | {d['unchanged_files_per_s']} |"]
    return "\n".join(lines)
