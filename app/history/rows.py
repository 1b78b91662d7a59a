"""History rows as the rest of the app sees them, read defensively from a file that may hold malformed ones.

Owns ``ConversationRow`` and ``MessageRow``, the SELECTs that fetch their columns (``CONVERSATION_COLUMNS``,
``MESSAGE_COLUMNS``), and turning one raw SQLite row (wrong types, text that was not UTF-8, broken perf
JSON) into a row, or None when nothing can be shown, plus a flag saying it was repaired. It runs no
query and writes nothing: ``app.history.store`` queries, ``app.history.recovery`` reports the damaged rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from app.history.documents_cell import documents_from_json
from app.history.images_cell import images_from_json
from app.history.perf import PerfRecord
from app.history.repair import RepairedText, as_number, as_text
from app.history.schema import FINISH_REASONS, ROLES
from app.history.tool_record import ToolCallRecord, records_from_json
from engine.docs.attach import DocumentsUsed

MESSAGE_COLUMNS = ("SELECT m.id, m.conversation_id, m.role, m.text, m.created, m.finish_reason, p.record, m.reasoning, "
                   "m.tool_calls, m.documents, m.images FROM messages m LEFT JOIN perf p ON p.message_id = m.id")
CONVERSATION_COLUMNS = ("SELECT c.id, c.title, c.created, c.updated, c.system_prompt, c.settings, "
                        "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id AND m.shown = 1), c.forked_from, "
                        "(SELECT s.title FROM conversations s WHERE s.id = c.forked_from) FROM conversations c")


@dataclass(frozen=True)
class ConversationRow:
    id: int
    title: str
    created: float  # seconds since the epoch (time.time())
    updated: float
    system_prompt: str
    settings: dict = field(hash=False)
    message_count: int  # in the branch shown
    forked_from: int | None = None  # the conversation this one was forked from (None: not a fork)
    fork_source: str | None = None  # that conversation's title now (None: not a fork, or its source was deleted)


@dataclass(frozen=True)
class MessageRow:
    id: int
    conversation_id: int
    role: str
    text: str
    created: float
    finish_reason: str | None  # None while streaming or for user/system messages
    perf: PerfRecord | None
    reasoning: str = ""  # a reasoning model's thought (schema v3), shown collapsed above the answer
    tool_calls: tuple[ToolCallRecord, ...] = ()  # the tools it called while replying (schema v4), in order
    attachments: tuple[str, ...] = ()  # a user message's attached files, absolute paths (schema v8)
    documents: DocumentsUsed | None = None  # a reply's sources, whole or retrieved, and their tokens (schema v8)
    images: tuple[str, ...] = ()  # a user message's image files in the images folder (schema v11)


def message_from_row(row: tuple) -> tuple[MessageRow | None, bool]:
    """(message, repaired) from a ``MESSAGE_COLUMNS`` row; None when it cannot be shown (no id, text or role)."""
    mid, cid, role, raw_text, created, finish, record, raw_reasoning, raw_calls, raw_documents, raw_images = row
    text, damaged = as_text(raw_text)
    calls, bad_calls = records_from_json(raw_calls)
    damaged |= bad_calls
    reasoning, bad_reasoning = as_text(raw_reasoning)
    damaged |= bad_reasoning
    attachments, documents, bad_documents = documents_from_json(raw_documents)
    damaged |= bad_documents
    images, bad_images = images_from_json(raw_images)
    damaged |= bad_images
    if not isinstance(mid, int) or not isinstance(cid, int) or role not in ROLES or text is None:
        return None, True
    when = as_number(created)
    damaged |= when is None
    if finish is not None and finish not in FINISH_REASONS:
        finish, damaged = None, True
    perf = None
    if record is not None:
        try:
            data = json.loads(record)
            perf = PerfRecord.from_dict(data) if isinstance(data, dict) else None
        except (TypeError, ValueError):
            perf = None
        damaged |= perf is None or isinstance(record, RepairedText)
    return MessageRow(mid, cid, role, text, when or 0.0, finish, perf, reasoning or "", calls, attachments,
                      documents, images), damaged


def conversation_from_row(row: tuple) -> tuple[ConversationRow | None, bool]:
    """(conversation, repaired) from a ``CONVERSATION_COLUMNS`` row: None when its id is unusable."""
    cid, raw_title, created, updated, raw_prompt, raw_settings, count, forked_from, raw_source = row
    if not isinstance(cid, int):
        return None, True
    title, bad_title = as_text(raw_title)
    prompt, bad_prompt = as_text(raw_prompt) if raw_prompt is not None else ("", False)
    try:
        settings = json.loads(raw_settings) if raw_settings is not None else {}
    except (TypeError, ValueError):
        settings = None
    created_n, updated_n = as_number(created), as_number(updated)
    damaged = (bad_title or bad_prompt or not isinstance(settings, dict) or created_n is None
               or updated_n is None)
    return ConversationRow(cid, title or f"Chat {cid}", created_n or 0.0, updated_n or created_n or 0.0,
                           prompt or "", settings if isinstance(settings, dict) else {}, int(count),
                           forked_from if isinstance(forked_from, int) else None,
                           as_text(raw_source)[0] if raw_source is not None else None), damaged
