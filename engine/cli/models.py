"""CLI sub-command ``python -m engine models`` (dispatched by ``engine/__main__.py``): the model library.

    models list                                   installed models and paused downloads
    models search QUERY [--sort S] [--format F] [--page N] [--page-size N]
    models show REPO                              files, GGUF quantizations, license, gated, remote code
    models fit MODEL [--context N] [--precision P] [--file F]
    models pull REPO [--file F]                   download (resumes a paused one), verified
    models rm NAME [--allow-default] [--partial]

Every one takes ``--json`` (one JSON object on stdout instead of text). ``search``, ``show``, ``pull`` and ``fit`` of a
Hub repo need ``--allow-downloads``: without it they exit 2 with one line saying so, before any socket is opened.
``--endpoint URL`` (or ``HF_ENDPOINT``) picks another Hub. Exit status: 0 done, 2 bad input or any refusal or
failure (one line on stderr, no traceback), 130 on Ctrl-C (a pull is paused, resumable). Owns argument parsing
and output; the work is ``engine.library``'s, imported when a command runs so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

from engine import paths
from engine.cli.interrupt import first_ctrl_c_sets
from engine.cli.replies import run_guarded
from engine.errors import EngineError, ModelNotFoundError, printable
from engine.fmt import format_bytes, format_rate
from engine.inputs import PRECISIONS

SORTS = ("downloads", "likes", "recent", "trending")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    net = argparse.ArgumentParser(add_help=False)
    net.add_argument("--allow-downloads", action="store_true",
                     help="allow talking to Hugging Face (off by default: nothing touches the network)")
    net.add_argument("--endpoint", default=None, help="the Hub's URL (default: HF_ENDPOINT, else huggingface.co)")
    sub = parser.add_subparsers(dest="models_command", required=True)
    sub.add_parser("list", parents=[common], help="installed models and paused downloads")
    search = sub.add_parser("search", parents=[common, net], help="search the Hub's text-generation models")
    search.add_argument("query")
    search.add_argument("--sort", choices=SORTS, default="downloads")
    search.add_argument("--format", choices=("any", "safetensors", "gguf"), default="any")
    search.add_argument("--page", type=int, default=0, help="page number, from 0")
    search.add_argument("--page-size", type=int, default=20)
    show = sub.add_parser("show", parents=[common, net], help="a Hub model's files, license and whether it is refused")
    show.add_argument("repo")
    fit = sub.add_parser("fit", parents=[common, net], help="will it fit: weights + KV cache against free memory")
    fit.add_argument("model", help="an installed model ('default', a name from `models list`, a path) or a Hub repo id")
    fit.add_argument("--context", type=int, default=None, help="tokens of context (default: 4096 or the model's)")
    fit.add_argument("--precision", choices=PRECISIONS, default="auto",
                     help="judge this precision (default auto: what loading it with auto would use on this machine)")
    fit.add_argument("--file", default=None, help="which GGUF file of a Hub repo")
    recommended = sub.add_parser("recommended", parents=[common],
                                 help="real chat models to move to, ranked for this machine (no network)")
    recommended.add_argument("--remeasure", action="store_true",
                             help="measure the memory bandwidth again (it is measured once and kept)")
    pull = sub.add_parser("pull", parents=[common, net], help="download a model into the models folder")
    pull.add_argument("repo")
    pull.add_argument("--file", default=None, help="the GGUF file to take (a repo of GGUF quantizations)")
    rm = sub.add_parser("rm", parents=[common], help="delete an installed model (or a paused download)")
    rm.add_argument("name")
    rm.add_argument("--allow-default", action="store_true", help="also when it is the default model")
    rm.add_argument("--partial", action="store_true", help="NAME is a paused download to discard")


def run(args: argparse.Namespace) -> int:
    # an EngineError: one line, status 2
    return run_guarded(lambda parsed: _COMMANDS[parsed.models_command](parsed), args)


def _emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> int:
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
    else:
        print("\n".join(lines))
    return 0


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _list(args: argparse.Namespace) -> int:
    # engine.library brings huggingface_hub (~2.4 s): imported per command, so `python -m engine --help` stays instant.
    from engine.library import installed

    models, partial = installed.list_installed(), installed.partial_downloads()
    lines = [f"models folder: {paths.models_dir()}"]
    for m in models:
        mark = " (default)" if m.default else ""
        lines.append(f"  {m.name}{mark}  {m.format}  {format_bytes(m.size_bytes)}  {_count(m.params)} params  "
                     f"{' '.join(m.precisions)}" + (f"  [{m.problem}]" if m.problem else "")
                     + (f"  from {m.repo}" if m.repo else ""))
    if not models:
        lines.append("  no models yet: `python -m engine fetch`, or `models pull REPO --allow-downloads`")
    for p in partial:
        total = format_bytes(p.total_bytes) if p.total_bytes else "?"
        lines.append(f"  paused: {p.repo or p.name}  {format_bytes(p.done_bytes)} of {total}  "
                     f"(pull again to resume, or `models rm {p.name} --partial`)")
    return _emit(args, {"models_dir": str(paths.models_dir()), "models": [m.to_dict() for m in models],
                        "partial": [p.to_dict() for p in partial]}, lines)


def _search(args: argparse.Namespace) -> int:
    from engine.library import hub

    page = hub.search(args.query, allow_downloads=args.allow_downloads, endpoint=args.endpoint, sort=args.sort,
                      fmt=args.format, page=args.page, page_size=args.page_size)
    lines = [f"{h.repo}  {'/'.join(h.formats)}  {_count(h.downloads)} downloads  {_count(h.likes)} likes  "
             f"{(h.last_modified or '')[:10]}" + ("  gated" if h.gated else "") for h in page.hits]
    lines = lines or [f"no text-generation models match {args.query!r} on this page"]
    if page.more:
        lines.append(f"more: --page {page.page + 1}")
    return _emit(args, page.to_dict(), lines)


def _show(args: argparse.Namespace) -> int:
    from engine.library import hub

    page = hub.model_page(args.repo, allow_downloads=args.allow_downloads, endpoint=args.endpoint)
    lines = [f"{page.repo} @ {page.revision[:12]}  {page.format}  license {page.license or '?'}"
             f"{'  gated' if page.gated else ''}{'  needs its own code' if page.needs_remote_code else ''}"]
    if page.refusal:
        lines.append(f"  refused: {page.refusal}")
    if page.needed:
        lines.append(f"  a pull takes {len(page.needed)} files, {format_bytes(page.weights_bytes)} of weights:")
        lines += [f"    {printable(name)}" for name in page.needed]  # the Hub's names: no terminal escapes
    for quant in page.ggufs:
        lines.append(f"  GGUF {quant.quant:<8} {format_bytes(quant.size):>10}  {printable(quant.file)}")
    return _emit(args, page.to_dict(), lines)


def _local_model(name: str) -> Path | None:
    """The installed model or local path ``name`` names, or None when it is neither."""
    from engine.library import installed

    if name == "default":
        return installed.resolve(name)
    path = Path(name).expanduser()
    if path.exists():
        return path
    try:
        return installed.resolve(name)
    except EngineError:
        return None


def _fit(args: argparse.Namespace) -> int:
    from engine.library import fit as fit_mod
    from engine.library import hub
    from engine.library.access import check_repo_id

    local = _local_model(args.model)
    download_bytes = None
    if local is not None:
        arch = fit_mod.architecture_of(local)
        name = args.model
    else:
        if "/" not in args.model:
            raise ModelNotFoundError(f"no installed model {args.model!r} (see `python -m engine models list`) and "
                                     "not a Hub repo id (owner/name)")
        check_repo_id(args.model)
        arch, plan = hub.remote_architecture(args.model, file=args.file, allow_downloads=args.allow_downloads,
                                             endpoint=args.endpoint)
        name, download_bytes = args.model + (f" ({plan.files[0].name})" if plan.kind == "gguf" else ""), plan.total_bytes
    est = fit_mod.estimate(arch, model=name, context=args.context, precision=args.precision,
                           download_bytes=download_bytes)
    lines = [f"{name}: {est.summary()}",
             f"  assumed     {est.precision_reason}",
             f"  parameters  {est.params:,}: {est.params_formula}",
             f"              seeds' estimate V·d + 12·L·d² = {est.params_estimate:,}",
             f"  KV cache    {est.kv_formula}",
             f"              without GQA (2·L·context·d·bytes): {format_bytes(est.kv_bytes_no_gqa)}",
             f"  memory      {format_bytes(est.memory.free_bytes)} free ({est.memory.source})",
             f"  rule        {est.verdict_rule}"]
    if download_bytes is not None:
        lines.append(f"  download    {format_bytes(download_bytes)}")
    lines.append("  precision   weights      KV per token")
    for p in est.per_precision:
        note = "" if p.usable else f"  (cannot: {p.note})"
        lines.append(f"  {p.precision:<10}  {format_bytes(p.weights_bytes):>10}  {format_bytes(p.kv_bytes_per_token):>10}{note}")
    return _emit(args, est.to_dict(), lines)


def _recommended(args: argparse.Namespace) -> int:
    from engine.bench import roofline
    from engine.library import curated
    from engine.library import fit as fit_mod

    memory = fit_mod.machine_memory()
    measured = roofline.measure_and_store(memory.device, force=args.remeasure)
    ranked = curated.recommend(memory, float(measured["read_bytes_s"]))
    lines = [f"for this machine: {format_bytes(memory.free_bytes)} free ({memory.device}), memory bandwidth "
             f"{format_rate(measured['read_bytes_s'])}; judged at {curated.RECOMMEND_CONTEXT:,} tokens",
             f"  {'model':<38} {'weights':>16}  {'fits?':<12} {'ceiling':>10}  good for"]
    for r in ranked:
        e = r.estimate
        gated = " (license to accept on the Hub)" if r.model.gated else ""
        lines.append(f"  {r.model.repo:<38} {format_bytes(e.weights_bytes) + ' ' + e.precision:>16}  "
                     f"{e.verdict:<12} {r.ceiling_tokens_per_s or 0:>6.0f} t/s  {r.model.note}{gated}")
    lines.append("  ceiling = bandwidth ÷ bytes read per token (weights + KV cache); decoding reaches ~50-80% of it. "
                 "Pull one with `python -m engine models pull REPO --allow-downloads`.")
    data = {"memory": memory.to_dict(), "bandwidth": measured, "context": curated.RECOMMEND_CONTEXT,
            "models": [r.to_dict() for r in ranked]}
    return _emit(args, data, lines)


class _ProgressLine:
    """Bytes, speed and time left on stderr: one rewritten line on a terminal, a line per 10 % otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.tty, self.last_decile = enabled, sys.stderr.isatty(), -1

    def __call__(self, p: Any) -> None:
        if not self.enabled:
            return
        fraction = p.done / p.total if p.total else 1.0
        speed = f"{format_bytes(p.speed_bytes_s)}/s" if p.speed_bytes_s else "…"
        eta = f"{p.eta_s:.0f} s left" if p.eta_s is not None else ""
        text = f"{p.file}: {format_bytes(p.done)} of {format_bytes(p.total)} ({fraction:.0%}) {speed} {eta}"
        if self.tty:
            sys.stderr.write("\r" + text[:120].ljust(120))
            sys.stderr.flush()
        elif int(fraction * 10) > self.last_decile:
            self.last_decile = int(fraction * 10)
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")


def _pull(args: argparse.Namespace) -> int:
    from engine.library import download

    pause = threading.Event()
    line = _ProgressLine(enabled=not args.json)
    # First Ctrl-C pauses within one chunk (the .part files stay, the next pull resumes).
    with first_ctrl_c_sets(pause) as interrupt:
        try:
            result = download.download(args.repo, file=args.file, allow_downloads=args.allow_downloads,
                                       endpoint=args.endpoint, progress=line, pause=pause)
        except EngineError as exc:
            line.close()
            print(f"error: {exc}", file=sys.stderr)
            return 130 if interrupt.pressed else 2
    line.close()
    lines = [f"installed {result.repo} @ {result.revision[:12]}: {result.path}",
             f"  {len(result.files)} files, {format_bytes(result.total_bytes)}, each verified"
             + (f" ({format_bytes(result.resumed_bytes)} resumed)" if result.resumed_bytes else ""),
             f"  chat with it: python -m engine chat --model {result.path} --prompt 'Hello'"]
    return _emit(args, {"repo": result.repo, "revision": result.revision, "path": result.path,
                        "files": list(result.files), "total_bytes": result.total_bytes,
                        "transferred_bytes": result.transferred_bytes, "resumed_bytes": result.resumed_bytes}, lines)


def _rm(args: argparse.Namespace) -> int:
    from engine.library import installed

    if args.partial:
        removed = installed.delete_partial(args.name)
    else:
        removed = installed.delete(args.name, allow_default=args.allow_default)
    return _emit(args, {"removed": str(removed)}, [f"removed {removed}"])


_COMMANDS = {"list": _list, "search": _search, "show": _show, "fit": _fit, "recommended": _recommended, "pull": _pull, "rm": _rm}
