"""What a damaged SQLite file still holds: lenient text decoding, type checks, and a row salvage walk.

Owns the schema-agnostic half of the history's damage handling: decoding text that is not UTF-8 without
aborting a query, telling a usable value from garbage, naming copies set aside next to the file, and
reading every row a table still yields when pages of the file are destroyed. It knows nothing of Miaohui's
tables (``app.history.rows`` decides what a valid row is, ``app.history.recovery`` writes the fresh file)
and creates no file.
"""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path
from typing import Any


def as_number(value: Any) -> float | None:
    """A finite int/float column value as float; None for anything else (text, blob, NULL, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class RepairedText(str):
    """A column value that was not valid UTF-8, decoded with U+FFFD in place of the bad bytes."""


def decode_text(raw: bytes) -> str:
    # Installed as text_factory: sqlite3's default raises on invalid UTF-8 and would abort a whole query.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return RepairedText(raw.decode("utf-8", "replace"))


def is_utf8(raw: bytes | None) -> bool:
    """Whether a TEXT column's bytes (read as a BLOB) decode as UTF-8."""
    try:
        (raw or b"").decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def as_text(value: Any) -> tuple[str | None, bool]:
    """(text, repaired) for a column that should be TEXT; None when nothing usable is there."""
    if isinstance(value, RepairedText):
        return str(value), True
    if isinstance(value, str):
        return value, False
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace"), True
    if isinstance(value, (int, float)):
        return str(value), True
    return None, True


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def aside_name(path: Path, label: str) -> Path:
    """A free name next to ``path`` for a copy set aside: ``<stem>.<label>-<timestamp>[-n]<suffix>``."""
    base = f"{path.stem}.{label}-{_stamp()}"
    candidate, n = path.with_name(base + path.suffix), 1
    while candidate.exists() or Path(str(candidate) + "-wal").exists():
        candidate, n = path.with_name(f"{base}-{n}{path.suffix}"), n + 1
    return candidate


def read_rows(path: Path, names: tuple[str, ...]) -> dict[str, dict[int, dict[str, Any]]]:
    """Every row that can still be read from each named table, by rowid, as column -> value; never raises."""
    tables: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in names}
    try:
        conn = sqlite3.connect(str(path), isolation_level=None)
    except sqlite3.Error:
        return tables
    conn.text_factory = decode_text
    try:
        for name, rows in tables.items():
            _read_table(conn, name, rows)
    finally:
        conn.close()
    return tables


def _read_table(conn: sqlite3.Connection, table: str, rows: dict[int, dict[str, Any]]) -> None:
    # Walk by rowid; when a damaged page breaks the walk, seek further ahead (doubling the jump) so rows
    # stored after the damage are still reached through the b-tree's intact interior pages.
    start, jump, failures = -(2**63), 1, 0
    while failures < 200:
        try:
            cur = conn.execute(f"SELECT rowid, * FROM {table} WHERE rowid >= ? ORDER BY rowid", (start,))
            names = [d[0] for d in cur.description]
            for values in cur:
                rows[values[0]] = dict(zip(names[1:], values[1:]))
                start, jump = values[0] + 1, 1
            return
        except sqlite3.Error:
            failures += 1
            if start == -(2**63):
                start = 0  # the table (or the schema) itself is unreadable from the start; try rowids anyway
            start, jump = start + jump, jump * 2
            if jump > 2**32:
                return
        except OverflowError:
            return
