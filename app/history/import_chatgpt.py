"""Import of ChatGPT's data export (``conversations.json``) into the history: ``read_export``, ``parse``, ``write``.

The export is a JSON list of conversations, each with a ``title``, ``create_time``/``update_time`` (seconds since the
epoch), a ``mapping`` of node id to ``{message, parent, children}`` (a tree: every regenerate or edit in ChatGPT
starts a branch) and a ``current_node`` (the leaf the user last looked at). The main thread is the path from
``current_node`` up to the root, read root first; where it passes a reply that ChatGPT regenerated (an assistant node
with assistant siblings), those siblings become versions of that turn (``app.history.versions``), the one on the path
shown. Branches made by editing a question are not imported: only their last edit, which is on the path.
System, tool and hidden nodes are skipped, as are an assistant's calls to a tool (``recipient`` not ``all``); two
assistant nodes in a row (around a skipped tool call) become one reply. A part that is not text becomes one line,
``[image not imported]`` for an image. Titles and timestamps are kept; the conversation's settings say where it came
from (``IMPORT_KEY``) and each reply's performance record names its model as ``ChatGPT import (<model>)``, with no
figures (none were measured here). No model is recorded with it, so it opens with the loaded local model, ready to go
on.

Reading is element by element (``json.JSONDecoder.raw_decode`` over the list; no streaming JSON library is a
dependency): a 100 MB export holds its text and one conversation's tree at a time, and ``report`` gets the fraction
read after each conversation. A file that is not an export is one line (``ChatGptImportError``), and ``write`` adds
every conversation in one transaction: nothing is half-written.

Any file is read to its end (issue 40): one conversation that cannot be read - nested past the parser's depth, ids
that are lists, numbers no float holds - is skipped and said in one line (``ImportReport.problems``), never the
whole import; the tree's walks stop at a node seen before (a ``children`` or ``parent`` cycle); ids are strings or
integers, anything else is no id; times outside 1970..2100 are dropped (the message's neighbour's, or the import's,
is used), so no stored time is past what a calendar shows; lone surrogates become U+FFFD wherever text is kept. Plain Python + sqlite3: no Qt, no torch; the window
runs it off the GUI thread (``app.window.chatgpt_import``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from app.history.perf import PerfRecord
from app.history.store import HistoryStore, StoreError, _clean_text
from engine.fmt import one_line

IMPORT_KEY = "imported_from"  # in an imported conversation's settings: {"source": "ChatGPT", "model": ...}
SOURCE = "ChatGPT"
IMAGE_PLACEHOLDER = "[image not imported]"
OTHER_PLACEHOLDER = "[attachment not imported]"
UNTITLED = "ChatGPT chat"


class ChatGptImportError(StoreError):
    """The file is not a ChatGPT export that can be read; ``str()`` is one line."""


@dataclass(frozen=True)
class ImportedReply:
    """One version of an imported reply."""

    text: str
    created: float | None


@dataclass(frozen=True)
class ImportedMessage:
    role: str  # "user" | "assistant"
    text: str
    created: float | None
    versions: tuple[ImportedReply, ...] = ()  # a regenerated reply's every version in ChatGPT's order ...
    shown: int = 0  # ... and which of them (0-based) is on the main thread (this message's own text)


@dataclass(frozen=True)
class ImportedConversation:
    title: str
    created: float | None
    updated: float | None
    model: str  # ChatGPT's model slug ("" when the export does not say)
    messages: tuple[ImportedMessage, ...]


@dataclass(frozen=True)
class ImportReport:
    """What an import read (the window says it in one line)."""

    conversations: tuple[ImportedConversation, ...]
    skipped: int  # list entries that held no conversation with a message to import
    problems: tuple[str, ...] = ()  # one line per skipped entry: which, and why


# Times kept: 1970-01-01 .. 2100-01-01. ChatGPT began in 2022; a time past this is damage (1e17, 1e308), and one past
# year 9999 makes every date formatter raise.
_LATEST = 4_102_444_800.0


def _time(value: Any) -> float | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if isinstance(value, int) and not 0 <= value <= _LATEST:  # a 400-digit integer: float() would overflow
        return None
    value = float(value)
    return value if math.isfinite(value) and 0.0 <= value <= _LATEST else None


def _id(value: Any) -> str | int | None:
    """A node id as a dict key may be one: a string or an integer (a list or a dict is no id: unhashable)."""
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _children(mapping: dict, node_id: Any) -> list:
    node = mapping.get(node_id)
    children = node.get("children") if isinstance(node, dict) else None
    return [c for c in (_id(c) for c in children) if c is not None and c in mapping] \
        if isinstance(children, list) else []


def _parent(mapping: dict, node_id: Any) -> Any:
    node = mapping.get(node_id)
    return _id(node.get("parent")) if isinstance(node, dict) else None


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        kind = str(part.get("content_type", ""))
        if "image" in kind:
            return IMAGE_PLACEHOLDER
        if isinstance(part.get("text"), str):
            return part["text"]
        return OTHER_PLACEHOLDER
    return ""


def _message_text(message: dict) -> str:
    content = message.get("content")
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts")
    if isinstance(parts, list):
        pieces = [_part_text(part) for part in parts]
        return "\n".join(piece for piece in pieces if piece)
    return content["text"] if isinstance(content.get("text"), str) else ""


def _usable(node: Any) -> tuple[str, str, float | None, str] | None:
    """(role, text, time, model) of a node worth importing: a user's or an assistant's visible text."""
    message = node.get("message") if isinstance(node, dict) else None
    if not isinstance(message, dict):
        return None
    author = message.get("author")
    role = author.get("role") if isinstance(author, dict) else None
    metadata = message.get("metadata") if isinstance(message.get("metadata"), dict) else {}
    if role not in ("user", "assistant") or metadata.get("is_visually_hidden_from_conversation"):
        return None
    if role == "assistant" and message.get("recipient", "all") not in ("all", None):
        return None  # a call to one of ChatGPT's tools, not something said to the user
    text = _message_text(message)
    if not text.strip():
        return None
    model = metadata.get("model_slug")
    return role, text, _time(message.get("create_time")), model if isinstance(model, str) else ""


def _main_path(mapping: dict, current: Any) -> list[str]:
    """Node ids from the root to ``current`` (or, when it is missing, to the leaf reached by the last children)."""
    current = _id(current)
    if current not in mapping:
        roots = [key for key in mapping if _parent(mapping, key) not in mapping]
        current = roots[0] if roots else None
        seen = set()
        while current is not None and current not in seen:  # a children cycle ends the walk where it closes
            seen.add(current)
            children = _children(mapping, current)
            if not children or children[-1] in seen:
                break
            current = children[-1]
    path, seen = [], set()
    while current in mapping and current not in seen:  # a cycle in a damaged file ends the walk
        seen.add(current)
        path.append(current)
        current = _parent(mapping, current)
    return path[::-1]


def _first_reply(mapping: dict, node_id: Any) -> tuple[str, float | None] | None:
    """The first assistant text down a branch from ``node_id`` (its last children), before any question."""
    seen = set()
    while node_id in mapping and node_id not in seen:
        seen.add(node_id)
        found = _usable(mapping[node_id])
        if found is not None:
            return (found[1], found[2]) if found[0] == "assistant" else None
        children = _children(mapping, node_id)
        node_id = children[-1] if children else None
    return None


def parse_conversation(data: Any) -> ImportedConversation | None:
    """One export entry as a conversation; None when it holds no user or assistant text."""
    if not isinstance(data, dict) or not isinstance(data.get("mapping"), dict):
        return None
    mapping = data["mapping"]
    path = _main_path(mapping, data.get("current_node"))
    messages: list[ImportedMessage] = []
    models: list[str] = []
    branches: dict[int, tuple[list, str]] = {}  # reply index -> (its question's children, the one on the path)
    question: int | None = None  # the path index of the last question kept
    for index, node_id in enumerate(path):
        found = _usable(mapping[node_id])
        if found is None:
            continue
        role, text, created, model = found
        models += [model] if model else []
        if messages and messages[-1].role == role == "assistant":  # around a skipped tool call: one reply
            last = messages[-1]
            messages[-1] = ImportedMessage(role, last.text + "\n\n" + text, last.created)
            continue
        if role == "user":
            question = index
        elif question is not None and question + 1 < len(path):  # a regenerate branches at the question
            children = _children(mapping, path[question])
            if len(children) > 1:
                branches[len(messages)] = (children, path[question + 1])
        messages.append(ImportedMessage(role, text, created))
    for at, (children, on_path) in branches.items():
        replies = [(sid, (messages[at].text, messages[at].created) if sid == on_path else _first_reply(mapping, sid))
                   for sid in children]
        replies = [(sid, reply) for sid, reply in replies if reply is not None]
        if len(replies) > 1:
            messages[at] = ImportedMessage("assistant", messages[at].text, messages[at].created,
                                           tuple(ImportedReply(*reply) for _, reply in replies),
                                           [sid for sid, _ in replies].index(on_path))
    if not messages:
        return None
    title = data.get("title")
    title = _clean_text(" ".join(title.split())) if isinstance(title, str) and title.strip() else UNTITLED
    model = data.get("default_model_slug")
    return ImportedConversation(title, _time(data.get("create_time")), _time(data.get("update_time")),
                                _clean_text(model if isinstance(model, str) and model else (models[-1] if models else "")),
                                tuple(messages))


def _entry_name(entry: Any, number: int) -> str:
    title = entry.get("title") if isinstance(entry, dict) else None
    if isinstance(title, str) and title.strip():
        return f"conversation {number} ({_clean_text(' '.join(title.split()))[:60]!r})"
    return f"conversation {number}"


def parse(text: str, report: Callable[[float], None] | None = None) -> ImportReport:
    """Every conversation of an export's text, read one list element at a time; ``ChatGptImportError`` when it is
    not a JSON list (the line and column said)."""
    decoder = json.JSONDecoder()
    conversations: list[ImportedConversation] = []
    skipped = 0
    problems: list[str] = []
    i = _skip_space(text, 0)
    if text.startswith("\ufeff"):
        i = _skip_space(text, 1)
    if i >= len(text) or text[i] != "[":
        raise ChatGptImportError("not a ChatGPT export: conversations.json holds a list of conversations"
                                 + (" (this file is empty)" if i >= len(text) else ""))
    i = _skip_space(text, i + 1)
    first = True
    while True:
        if i < len(text) and text[i] == "]":
            break
        if not first:
            if i >= len(text) or text[i] != ",":
                raise _bad(text, i, "expected ',' or ']'")
            i = _skip_space(text, i + 1)
        number = len(conversations) + skipped + 1
        try:
            entry, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise _bad(text, exc.pos, exc.msg) from None
        except (RecursionError, MemoryError):  # nested past the parser's depth: step over it, read the rest
            entry, i = None, _skip_value(text, i)
            why = "nested too deeply to read"
        except ValueError as exc:  # an integer past Python's 4,300 digits: this entry only
            entry, i = None, _skip_value(text, i)
            why = f"cannot be read ({one_line(exc)})"
        else:
            why = ""
        first = False
        conversation = None
        if entry is not None:
            try:
                conversation = parse_conversation(entry)
                why = "" if conversation is not None else "holds no user or assistant text"
            except (TypeError, ValueError, OverflowError, RecursionError, UnicodeError) as exc:
                why = f"cannot be read ({type(exc).__name__})"  # a shape no check above foresaw: this one only
        if conversation is None:
            skipped += 1
            problems.append(f"{_entry_name(entry, number)} skipped: {why}")
        else:
            conversations.append(conversation)
        if report is not None:
            report(i / max(1, len(text)))
        i = _skip_space(text, i)
    if _skip_space(text, i + 1) != len(text):
        raise _bad(text, _skip_space(text, i + 1), "extra data after the list")
    return ImportReport(tuple(conversations), skipped, tuple(problems))


def _skip_value(text: str, i: int) -> int:
    """The end of the JSON value starting at ``text[i]``, by its brackets and strings (no recursion): for a value too
    deep for ``json`` to decode. ``ChatGptImportError`` when it never ends."""
    depth = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth <= 0:
                return i + 1
        elif depth == 0 and ch in ",":
            return i
        i += 1
    raise _bad(text, n, "a list entry never ends")


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _bad(text: str, pos: int, why: str) -> ChatGptImportError:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return ChatGptImportError(f"not a ChatGPT export: bad JSON at line {line}, column {column} ({why})")


def read_export(path: Path, report: Callable[[float], None] | None = None) -> ImportReport:
    """Read and parse ``path`` (``conversations.json``); ``ChatGptImportError`` for a file that cannot be read."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChatGptImportError(f"not a ChatGPT export: the file is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ChatGptImportError(f"could not read {Path(path).name}: {exc.strerror or exc}") from None
    return parse(text, report)


def write(store: HistoryStore, imported: ImportReport, now: float) -> list[int]:
    """Add every imported conversation to the history in one transaction; their ids, in the export's order."""
    ids = []
    with store._write() as c:  # noqa: SLF001 - the history package's one transaction: all or nothing
        for conv in imported.conversations:
            created = conv.created or next((m.created for m in conv.messages if m.created), None) or now
            updated = conv.updated or max([m.created or 0.0 for m in conv.messages] + [created])
            settings = {IMPORT_KEY: {"source": SOURCE, "model": _clean_text(conv.model)}}
            cid = int(c.execute("INSERT INTO conversations(title, created, updated, system_prompt, settings) "
                                "VALUES (?, ?, ?, '', ?)", (_clean_text(conv.title), created, updated,
                                                            json.dumps(settings, ensure_ascii=False))).lastrowid)
            record = PerfRecord(model=_clean_text(f"ChatGPT import ({conv.model})" if conv.model else "ChatGPT import")
                                ).to_json()
            previous, when = None, created
            for message in conv.messages:
                when = message.created or when  # a message without a time: its predecessor's, so the order holds
                mid = int(c.execute("INSERT INTO messages(conversation_id, role, text, created, finish_reason, "
                                    "parent_id) VALUES (?, ?, ?, ?, ?, ?)",
                                    (cid, message.role, _clean_text(message.text), when,
                                     "eos" if message.role == "assistant" else None, previous)).lastrowid)
                if message.role == "assistant":
                    c.execute("INSERT INTO perf(message_id, record) VALUES (?, ?)", (mid, record))
                if previous is not None and len(message.versions) > 1:  # a turn's other versions, in ChatGPT's order
                    for place, reply in enumerate(message.versions, start=1):
                        if place - 1 != message.shown:
                            c.execute("INSERT INTO versions(turn_id, position, text, created, finish_reason, record) "
                                      "VALUES (?, ?, ?, ?, 'eos', ?)",
                                      (previous, place, _clean_text(reply.text), reply.created or when, record))
                previous = mid
            ids.append(cid)
    return ids
