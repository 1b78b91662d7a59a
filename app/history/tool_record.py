"""A reply's tool round-trips as history keeps them: ``ToolCallRecord`` and its JSON cell (schema v4's
``messages.tool_calls``), read defensively (a damaged cell reads as no calls, flagged repaired).

Owns the record's fields and their JSON form; not the SQL (``app.history.store``), not how a call is made
(``engine.tools``) or shown (``app.widgets.tool_call_view``). Plain Python: no Qt, no torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class ToolCallRecord:
    """One call the model made while replying: its arguments as JSON text, the result (or the one-line failure)."""

    name: str
    arguments: str
    result: str
    ok: bool
    seconds: float
    refused: bool = False  # the user said no before it ran: ``result`` is the refusal the model read

    @property
    def ms(self) -> float:
        return round(self.seconds * 1000, 1)

    def arguments_value(self) -> Any:
        """The arguments as JSON values (the text itself when it is not JSON)."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return self.arguments

    def to_dict(self) -> dict[str, Any]:
        """The exported and stored form: arguments as JSON values, time in milliseconds."""
        return {"name": self.name, "arguments": self.arguments_value(), "result": self.result, "ok": self.ok,
                "ms": self.ms, "refused": self.refused}

    def line(self) -> str:
        """One line for Markdown: ``name(arguments) → result · 12 ms`` (✗: a failure, "refused:": refused)."""
        if not self.name:  # a server or tool that could not be used: its one line
            return f"✗ {self.result}"
        mark = "refused:" if self.refused else ("→" if self.ok else "✗")
        result = " ".join(self.result.split())
        return f"{self.name}({self.arguments}) {mark} {result} · {self.ms:g} ms"


def records_to_json(records: Sequence[ToolCallRecord]) -> str:
    return json.dumps([record.to_dict() for record in records], ensure_ascii=False)


def records_from_json(text: Any) -> tuple[tuple[ToolCallRecord, ...], bool]:
    """(records, damaged) from a stored cell; anything unreadable is no calls, ``damaged`` True."""
    if text is None or text == "" or text == "[]":
        return (), False
    try:
        items = json.loads(text)
    except (TypeError, ValueError):
        return (), True
    if not isinstance(items, list):
        return (), True
    records = []
    for item in items:
        record = _record(item)
        if record is None:
            return (), True
        records.append(record)
    return tuple(records), False


def _record(item: Any) -> ToolCallRecord | None:
    if not isinstance(item, dict):
        return None
    name, result, ms = item.get("name"), item.get("result"), item.get("ms")
    if not isinstance(name, str) or not isinstance(result, str) or isinstance(ms, bool) \
            or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
        return None
    arguments = item.get("arguments")
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCallRecord(name, text, result, item.get("ok") is True, ms / 1000, item.get("refused") is True)
