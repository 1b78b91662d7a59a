"""Conversation exports: Markdown for reading, JSON for keeping (with performance records, tool round-trips, a
reply's versions, every branch an edit made, a message's attached files, its pictures' content addresses and a
reply's numbered sources), CSV for analysis. Markdown links a message's pictures into a folder beside the export,
which ``copy_images`` fills (the one function here that writes: the caller names the folder). Both write the branch shown; Markdown says which version of an edited message it is, JSON also carries the
whole tree (``app.history.branches``).

Owns the three text formats and the file name suggested for an export (a conversation title made safe
on every platform); it reads through ``app.history.store.HistoryStore`` and writes nothing to disk (the caller
chooses the file). CSV text cells are escaped against formula injection. Plain Python: no Qt, no torch.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import asdict, fields
from datetime import datetime, timezone
import shutil
from pathlib import Path, PurePath
from typing import Any

from app.history import branches, versions
from app.history.perf import PerfRecord
from app.history.store import HistoryStore
from engine.docs.attach import DocumentsUsed
from engine.lab.results import spreadsheet_safe

JSON_FORMAT = "miaohui-conversation"
JSON_VERSION = 1
_STOPPED = {"cancelled": "stopped", "length": "cut at the length limit", "error": "failed"}
PERF_CSV_COLUMNS = (["conversation_id", "conversation_title", "message_id", "created", "finish_reason"]
                    + [f.name for f in fields(PerfRecord)])


def iso(timestamp: float) -> str:
    """Seconds since the epoch as ISO 8601 UTC, e.g. ``2026-11-29T10:05:54Z``; "unknown" for a time no calendar holds
    (an old import stored 1e17)."""
    try:
        return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError, TypeError):
        return "unknown"


def to_markdown(store: HistoryStore, cid: int, images_folder: str = "images") -> str:
    """The conversation as Markdown: a heading per turn, replies verbatim, the perf footer under each reply; a
    message's pictures as image links into ``images_folder`` (relative to the export; ``copy_images`` fills it)."""
    conv = store.get_conversation(cid)
    lines = [f"# {conv.title}", "", f"*Miaohui · created {iso(conv.created)} · {conv.message_count} messages*", ""]
    if conv.system_prompt:
        lines += ["> **System prompt:** " + conv.system_prompt.replace("\n", "\n> "), ""]
    turns = versions.turns(store, cid)  # replies with several versions: the one chosen is exported, its place said
    edits = branches.branch_points(store, cid)  # edited messages: the branch shown is exported, its place said
    for message in store.messages(cid):
        place = turns.get(message.id) or edits.get(message.id)
        lines += [f"## {message.role.capitalize()}", ""]
        if message.reasoning:  # a reasoning model's thought, folded as the window shows it
            lines += ["<details><summary>Thinking</summary>", "", message.reasoning, "", "</details>", ""]
        if message.tool_calls:  # the round-trips before the answer, one line each, in the order they ran
            lines += ["**Tool calls:**", ""] + [f"- `{call.line()}`" for call in message.tool_calls] + [""]
        if message.images:  # the pictures before the question, as the model saw them
            lines += [f"![picture {n}](<{images_folder}/{PurePath(path).name}>)"
                      for n, path in enumerate(message.images, start=1)] + [""]
        lines += [message.text, ""]
        if message.attachments:  # the files the question was grounded in, by name (their folders are the user's)
            lines += ["*Attached: " + ", ".join(PurePath(path).name for path in message.attachments) + "*", ""]
        if message.documents is not None:  # the numbered sources the reply cites, each with its passage
            lines += _sources_markdown(message.documents)
        notes = [note for note in (_STOPPED.get(message.finish_reason or ""),
                                   message.perf.footer() if message.perf else "",
                                   f"version {place.shown} of {place.count}" if place else "") if note]
        if notes:
            lines += [f"*{' · '.join(notes)}*", ""]
    return "\n".join(lines)


def to_json(store: HistoryStore, cid: int) -> str:
    """The whole conversation, settings and per-message performance records included, as pretty JSON: ``messages``
    is the branch shown (an edited message's place among its versions under ``branch``), ``tree`` every message of
    every branch with its parent."""
    conv = store.get_conversation(cid)
    turns = versions.turns(store, cid)  # a reply's every version (the shown one marked) under "versions"
    edits = branches.branch_points(store, cid)
    document = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "conversation": {"id": conv.id, "title": conv.title, "created": iso(conv.created),
                         "updated": iso(conv.updated), "system_prompt": conv.system_prompt,
                         "settings": conv.settings},
        "messages": [{"id": m.id, "role": m.role, "text": m.text, **({"reasoning": m.reasoning} if m.reasoning else {}),
                      **({"tool_calls": [call.to_dict() for call in m.tool_calls]} if m.tool_calls else {}),
                      **({"attachments": list(m.attachments)} if m.attachments else {}),
                      **({"images": [_image_json(path) for path in m.images]} if m.images else {}),
                      **(_documents_json(m.documents) if m.documents is not None else {}),
                      "created": iso(m.created),
                      "finish_reason": m.finish_reason, "perf": asdict(m.perf) if m.perf else None,
                      **({"versions": [_version(v) for v in versions.versions(store, m.id)]} if m.id in turns else {}),
                      **({"branch": {"shown": edits[m.id].shown, "count": edits[m.id].count}} if m.id in edits else {})}
                     for m in store.messages(cid)],
        "tree": [{"id": t.id, "parent_id": t.parent_id, "role": t.role, "text": t.text, "created": iso(t.created),
                  "finish_reason": t.finish_reason, "shown": t.shown} for t in branches.tree(store, cid)],
    }
    return json.dumps(document, ensure_ascii=False, indent=2)


def _image_json(path: str) -> dict:
    """A picture by its content address (``engine.vision.image_store``): the file is the history's, not the export's."""
    sha256, _, fmt = PurePath(path).name.partition(".")
    return {"sha256": sha256, "format": fmt}


def copy_images(store: HistoryStore, cid: int, folder: Path) -> int:
    """Copy the pictures of conversation ``cid``'s branch shown into ``folder`` (made when there is one), each once;
    how many were copied. A picture gone from the images folder is left out (its link then shows none)."""
    copied = 0
    for path in dict.fromkeys(p for m in store.messages(cid) for p in m.images):
        if Path(path).is_file():
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, folder / PurePath(path).name)
            copied += 1
    return copied


def _sources_markdown(used: DocumentsUsed) -> list[str]:
    """"**Sources** (whole text, 812 tokens):" then one item per source: its label, then its passage quoted."""
    how = "whole text" if used.mode == "whole" else "retrieved passages"
    lines = [f"**Sources** ({how}, {used.source_tokens} tokens):", ""]
    for n, source in enumerate(used.sources, start=1):
        quoted = "\n".join("  > " + line for line in source.text.strip().splitlines())
        lines += [f"{n}. [{n}] {source.label('en')}", quoted]
    return lines + [""]


def _documents_json(used: DocumentsUsed) -> dict:
    return {"sources": [source.as_json(n) for n, source in enumerate(used.sources, start=1)],
            "docs_mode": used.mode, "retrieval": used.retrieval, "docs_tokens": used.source_tokens}


def _version(v: versions.Version) -> dict:
    return {"position": v.position, "shown": v.shown, "text": v.text, **({"reasoning": v.reasoning} if v.reasoning else {}),
            "created": iso(v.created), "finish_reason": v.finish_reason, "perf": asdict(v.perf) if v.perf else None,
            **(_documents_json(v.documents) if v.documents is not None else {})}


def _cell(value: Any) -> Any:
    """A performance figure as a CSV cell: "" for none, JSON for a structured one (where the cache broke, the image
    tokens per picture)."""
    if value is None or value == ():
        return ""
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value


def perf_to_csv(store: HistoryStore) -> str:
    """Every performance record in the history, one row per reply, with a header row."""
    out = io.StringIO()
    # RFC 4180's CRLF rows: the csv module then quotes a cell holding a lone CR too (with "\n" rows it
    # left a title's CR bare, and every reader split the row there).
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(PERF_CSV_COLUMNS)
    for conv, message in store.all_perf_records():
        perf = asdict(message.perf)
        cells = ([conv.id, conv.title, message.id, iso(message.created), message.finish_reason or ""]
                 + [_cell(perf[f.name]) for f in fields(PerfRecord)])
        writer.writerow([spreadsheet_safe(cell) for cell in cells])
    return out.getvalue()


# Characters no Windows file name may hold, control characters (no platform shows them sanely) and lone
# surrogates (not encodable).
_ILLEGAL = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f\ud800-\udfff]')
# Names Windows reserves for devices, whatever extension follows ("con.md" opens the console).
_RESERVED = ({"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
             | {f"{port}{n}" for port in ("COM", "LPT") for n in (*"123456789", "¹", "²", "³")})
# Most file systems allow 255 bytes per name; staying well below leaves room for a "(1)" a dialog adds.
MAX_FILE_NAME_BYTES = 120


def export_file_name(title: str, suffix: str, fallback: str = "conversation") -> str:
    """A file name for ``title`` + ``suffix`` that every platform accepts.

    Illegal and control characters become ``_``; leading dots (hidden files) and trailing dots and
    spaces (Windows drops them) go; a reserved device name gets a ``_`` prefix; the whole name is at
    most ``MAX_FILE_NAME_BYTES`` of UTF-8, cut between characters.
    """
    stem = _ILLEGAL.sub("_", title).strip(" .")
    if stem.split(".")[0].strip().upper() in _RESERVED:
        stem = "_" + stem
    room = MAX_FILE_NAME_BYTES - len(suffix.encode("utf-8"))
    stem = stem.encode("utf-8")[:room].decode("utf-8", "ignore").rstrip(" .")
    return (stem or fallback) + suffix
