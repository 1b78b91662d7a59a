"""``python -m engine chat --doc PATH --collection NAME --docs-mode auto|whole|retrieve``: answering from documents.

Owns: these flags, turning them into the grounded user message for a model loaded here (``ground_prompt``), and how
the sources are shown (``--json``'s ``sources``, ``docs_mode``, ``docs_tokens`` and ``docs_forecast``, both choices
counted by ``engine.docs.forecast``; after the reply in text output).
Does not own the policy or the prompt's wording (``engine.docs.grounding``), reading, indexing or retrieval
(``engine.docs``; the passages of --doc and --collection: ``engine.docs.attach.retrieve_passages``, shared with the
window), nor the reply itself (``engine.cli.chat``).

``--doc`` files are read with the engine's readers; retrieving from them indexes them into a store in a temporary
folder, removed after the prompt is built, so attaching a file to one question leaves nothing in the user's
collections. ``--collection`` searches the stored collections (``engine docs add``) and is never put in whole.
Tokens are counted with the model's own tokenizer and its chat template (the frame without sources is rendered
once), so the policy's "fits" is the prompt's real length.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.docs.attach import retrieve_passages
from engine.docs.forecast import DocsForecast, forecast_documents
from engine.docs.grounding import MODES, Budget, Grounding, Source, document_sources, ground, grounded_message
from engine.errors import BadInputError, printable
from engine.events import Message



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--doc", action="append", default=[], type=Path, metavar="PATH",
                        help="answer from this file (repeatable): put whole when it fits the context, else its "
                             "best passages; the reply cites them as [1], [2]")
    parser.add_argument("--collection", action="append", default=[], metavar="NAME",
                        help="answer from passages retrieved from this collection (`engine docs add`; repeatable)")
    parser.add_argument("--docs-mode", default="auto", choices=MODES,
                        help="auto: whole text when it fits the context, retrieved passages when not; or force "
                             "one (default: %(default)s)")


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.doc or args.collection)


def check(args: argparse.Namespace) -> None:
    """Refuse bad document flags before any model loads."""
    if not wanted(args):
        return
    if args.base_url is not None:
        raise BadInputError("--doc and --collection work with a model loaded here, not with --base-url")
    for path in args.doc:
        if not path.is_file():
            raise BadInputError(f"--doc {printable(path)}: no such file")


@dataclass(frozen=True)
class Grounded:
    """The conversation to send and what to show beside the reply."""

    messages: list[Message]
    grounding: Grounding
    retrieval: str | None  # "hybrid" or "keyword" when passages were retrieved, else None
    forecast: DocsForecast | None = None  # both choices counted (``--json`` only: it searches even for whole text)

    def json_fields(self) -> dict[str, Any]:
        g = self.grounding
        fields = {"docs_mode": g.mode, "retrieval": self.retrieval,
                  "sources": [source.as_json(n) for n, source in enumerate(g.sources, start=1)],
                  "docs_tokens": {"sources": g.source_tokens, "whole": g.whole_tokens, "room": g.room}}
        if self.forecast is not None:
            fields["docs_forecast"] = self.forecast.as_json()
        return fields

    def text_after(self) -> str:
        """The sources as the text output prints them after the reply."""
        g = self.grounding
        lines = [f"Sources ({g.mode}, {g.source_tokens} tokens):" if g.sources else
                 f"Sources ({g.mode}): no passage matched"]
        lines += [f"[{n}] {printable(s.path)}{'' if s.page is None else f', page {s.page}'}"
                  for n, s in enumerate(g.sources, start=1)]
        return "\n".join(lines)


def ground_prompt(args: argparse.Namespace, loaded: Any, max_new_tokens: int) -> Grounded:
    """The messages for ``args.prompt`` grounded in ``--doc`` and ``--collection``, counted with ``loaded``'s
    tokenizer against its context."""
    from engine.docs.readers import read_document
    from engine.generate.context import render

    tokenizer = loaded.tokenizer
    system = [Message("system", args.system)] if args.system else []
    documents = [read_document(path) for path in args.doc]  # a bad file: DocumentError, one line, exit 2
    whole = [source for document in documents for source in document_sources(document)]
    frame = render(tokenizer, system + [Message("user", grounded_message(args.prompt, []))])
    budget = Budget(context_tokens=loaded.facts.context_length or 0, conversation_tokens=len(frame),
                    reply_tokens=max_new_tokens)
    retrieval: list[str] = []

    def retrieve() -> list[Source]:
        hits, mode = _retrieve(args)
        retrieval.append(mode)
        return hits

    grounding = ground(args.prompt, whole, retrieve, args.docs_mode, budget,
                       lambda text: len(tokenizer.encode(text, add_special_tokens=False)))
    forecast = None
    if getattr(args, "json", False):  # the figures the window shows before sending, for both choices
        forecast = forecast_documents(tokenizer, budget.context_tokens, system + [Message("user", args.prompt)],
                                      [str(path) for path in args.doc], args.docs_mode, max_new_tokens,
                                      args.collection)
    return Grounded(system + [Message("user", grounding.message)], grounding, retrieval[0] if retrieval else None,
                    forecast)


def _retrieve(args: argparse.Namespace) -> tuple[list[Source], str]:
    """The best passages of the attached files and the named collections, best first, and the ranking used."""
    return retrieve_passages(args.prompt, args.doc, args.collection,
                             lambda line: print(f"note: {line}", file=sys.stderr, flush=True))
