"""``engine bench --docs-quality``: recall@5 and MRR of keyword, dense and fused retrieval on real documents.

The set: Vim's tutor, lessons 1-3 (``engine/bench/data``, not written for Miaohui, Vim licence), the English text
laid out as a PDF (``engine.bench.corpus.make_pdf``: the reader extracts its text layer page by page) and the
Chinese translation as a text file, with the Vim licence text as a third file that answers nothing; 24 questions
written for it (``eval_docs.json``), 12 per language, each with a line of the tutor that marks the passage holding
its answer. A retrieved passage is relevant when it contains that line (whitespace ignored: PDF extraction changes
spacing).

Measured per language and overall: recall@5 (the share of questions with a relevant passage in the first 5) and
MRR@10 (the mean of 1 / rank of the first relevant passage, 0 past 10), for the keyword ranking alone (FTS5 bm25 over
rjieba-segmented text), the dense ranking alone (the embedder's cosine) and both fused by reciprocal rank
(``engine.docs.retrieve.rrf``: what ``engine docs search`` does). Owns the set's layout, the scoring and the table.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

from engine.bench import corpus
from engine.docs.retrieve import CANDIDATES, rrf

SET = Path(__file__).with_name("eval_docs.json")
RECALL_AT = 5
MRR_AT = 10
COLLECTION = "eval"


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def build(folder: Path) -> list[Path]:
    """The set's files in ``folder``: the English tutor as a PDF, the Chinese one and the licence as text."""
    pdf = folder / "vimtutor_en.pdf"
    pdf.write_bytes(corpus.make_pdf(corpus.pages(corpus.text("en"))))
    zh = folder / "vimtutor_zh.txt"
    zh.write_text(corpus.text("zh"), encoding="utf-8")
    licence = folder / "LICENSE-vim.txt"
    licence.write_text((corpus.DATA / "LICENSE-vim.txt").read_text(encoding="utf-8"), encoding="utf-8")
    return [pdf, zh, licence]


def score(ranked: list[str], answer: str) -> tuple[bool, float]:
    """(a relevant passage in the first RECALL_AT, 1 / rank of the first relevant one within MRR_AT or 0)."""
    marker = _squash(answer)
    ranks = [i for i, text in enumerate(ranked[:MRR_AT], start=1) if marker in _squash(text)]
    return bool(ranks and ranks[0] <= RECALL_AT), 1.0 / ranks[0] if ranks else 0.0


def measure(progress: Callable[[str], None], embedder=None) -> dict[str, Any]:
    """Index the set with ``embedder`` (None: the default one; without it, the dense columns are null)."""
    from engine.docs.embed import default_embedder
    from engine.docs.index import index_paths
    from engine.docs.store import DocumentStore

    embedder = embedder or default_embedder()
    questions = json.loads(SET.read_text(encoding="utf-8"))["questions"]
    sums: dict[tuple[str, str], list[tuple[bool, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="miaohui-docs-quality-") as folder:
        files = build(Path(folder))
        with DocumentStore(Path(folder) / "eval.sqlite3") as store:
            progress(f"indexing {len(files)} files")
            report = index_paths(store, COLLECTION, files, embedder=embedder)
            ids = [store.collection_id(COLLECTION)]
            for item in questions:
                rankings = {"keyword": [pid for pid, _ in store.keyword_search(item["q"], ids, CANDIDATES)]}
                if embedder is not None:
                    vector = embedder.embed([item["q"]])[0]  # (dim,)
                    rankings["dense"] = [pid for pid, _ in store.dense_search(vector, embedder.name, ids, CANDIDATES)]
                    rankings["fused"] = [pid for pid, _ in rrf([rankings["keyword"], rankings["dense"]])]
                for method, ranking in rankings.items():
                    top = ranking[:MRR_AT]
                    texts = store.passages(top)
                    result = score([texts[pid].text for pid in top if pid in texts], item["answer"])
                    for lang in (item["lang"], "all"):
                        sums.setdefault((method, lang), []).append(result)
    table = {f"{method}/{lang}": {"questions": len(results),
                                  f"recall@{RECALL_AT}": round(sum(r for r, _ in results) / len(results), 3),
                                  f"mrr@{MRR_AT}": round(sum(m for _, m in results) / len(results), 3)}
             for (method, lang), results in sums.items()}
    return {"set": "Vim tutor lessons 1-3: English PDF, Chinese text, Vim licence (engine/bench/data)",
            "questions": len(questions), "passages": report.passages,
            "embedder": embedder.name if embedder is not None else None, "results": table}


def table(result: dict[str, Any]) -> str:
    lines = [f"Retrieval quality on {result['set']}: {result['questions']} questions, {result['passages']} passages, "
             f"embedder {result['embedder'] or 'none'}", "",
             f"| method | language | recall@{RECALL_AT} | MRR@{MRR_AT} |", "|---|---|---|---|"]
    for key, row in sorted(result["results"].items(), key=lambda pair: (pair[0].split("/")[1], pair[0])):
        method, lang = key.split("/")
        lines.append(f"| {method} | {lang} | {row[f'recall@{RECALL_AT}']:.3f} | {row[f'mrr@{MRR_AT}']:.3f} |")
    return "\n".join(lines)
