"""What an inference-lab experiment hands back, and how it is written to disk.

Plain Python only (no torch, no Qt): the GUI receives these objects from the worker thread and the
CLI writes them as CSV and JSON. Owns the result shape (a table, line series, optional heatmaps,
summary figures, flags and notes) and its CSV/JSON forms; owns no measuring and no drawing
(``engine.lab.charts`` draws, the experiment modules measure).

Also the one home of two rules for every file the app writes for the user (results, the window's
exports): ``spreadsheet_safe`` CSV cells, and ``replace_file``: a file is written beside its target under
a temporary name, fsynced and renamed over it, so a write that fails part-way (a full disk) leaves the
previous file byte-identical rather than truncated.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable

Cell = str | int | float | bool | None


@dataclass(frozen=True)
class Series:
    """One line of a chart: y against x, with the axis names it is plotted under."""

    name: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    x_label: str
    y_label: str
    panel: int = 0  # charts with several panels (axes) put the series with the same panel together
    x_ticks: tuple[str, ...] = ()  # category names when x is an index (bar charts)


@dataclass(frozen=True)
class Heatmap:
    """A matrix shown as an image: rows are queries, columns keys (attention), labelled by token."""

    title: str
    matrix: tuple[tuple[float, ...], ...]  # (rows, cols)
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]


@dataclass(frozen=True)
class ExperimentResult:
    """The outcome of one experiment, every number measured on a real run.

    ``rows`` is the table (one tuple per row, in ``columns`` order); ``summary`` the key figures
    (medians, ratios); ``flags`` are findings the user should notice (an unhealthy attention head,
    a greedy text that differs with the KV cache off); ``notes`` say which measure and threshold
    produced them.
    """

    key: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    series: tuple[Series, ...] = ()
    heatmaps: tuple[Heatmap, ...] = ()
    summary: dict[str, Cell] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    model: str = ""  # name and precision the figures were measured on
    elapsed_s: float = 0.0  # wall time of the whole experiment, warm-up included

    def to_dict(self) -> dict[str, Any]:
        return _finite(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExperimentResult":
        series = tuple(Series(**{**s, "x": tuple(s["x"]), "y": tuple(s["y"]),
                                 "x_ticks": tuple(s.get("x_ticks", ()))})
                       for s in data.get("series", ()))
        heatmaps = tuple(Heatmap(title=h["title"], matrix=tuple(tuple(r) for r in h["matrix"]),
                                 row_labels=tuple(h["row_labels"]), col_labels=tuple(h["col_labels"]))
                         for h in data.get("heatmaps", ()))
        return cls(key=data["key"], title=data["title"], columns=tuple(data["columns"]),
                   rows=tuple(tuple(r) for r in data["rows"]), series=series, heatmaps=heatmaps,
                   summary=dict(data.get("summary", {})), flags=tuple(data.get("flags", ())),
                   notes=tuple(data.get("notes", ())), model=data.get("model", ""),
                   elapsed_s=float(data.get("elapsed_s", 0.0)))


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so any reader can parse results.json."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def replace_file(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """Make ``path`` hold what ``write(file)`` writes, or leave it as it was.

    ``write`` fills a new file in the same folder (a rename within one file system is atomic); it is flushed
    and fsynced, then ``os.replace``d over ``path``. On any failure, Ctrl-C included, the temporary file is
    removed and the error raised: the old file is untouched. The new file gets the old one's permissions, or
    those ``open()`` would give (not ``mkstemp``'s owner-only 0600). The folder must exist.
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = None
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass  # already renamed, or never written: nothing of ours is left there
        raise
    return path


def replace_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    """``replace_file`` with ``text`` in ``encoding``, written as it is (no newline translation)."""
    data = text.encode(encoding)
    return replace_file(path, lambda fh: fh.write(data))


def write_csv(result: ExperimentResult, path: Path) -> Path:
    """Write the result's table as CSV (UTF-8 with BOM so spreadsheet programs read Chinese right)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([spreadsheet_safe(name) for name in result.columns])
    for row in result.rows:
        writer.writerow(["" if cell is None else _csv_cell(cell) for cell in row])
    return replace_text(path, out.getvalue(), encoding="utf-8-sig")


def _csv_cell(cell: Cell) -> Cell:
    # Keep full precision for measured values but avoid 17-digit float noise in the file.
    if isinstance(cell, float):
        return f"{cell:.6g}"
    return spreadsheet_safe(cell)


# A spreadsheet runs a cell starting with one of these as a formula (=HYPERLINK(...), +cmd|...).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: Any) -> Any:
    """A text cell a spreadsheet will show as text: a leading single quote before a formula start.

    OWASP's advice against CSV injection; every CSV the app writes passes its cells through this.
    Only strings are escaped: numbers (a measured -1.5) stay numbers.
    """
    if isinstance(cell, str) and cell.startswith(_FORMULA_STARTS):
        return "'" + cell
    return cell


def write_json(results: dict[str, Any], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return replace_text(path, json.dumps(_finite(results), ensure_ascii=False, indent=2))


def median(values: list[float] | tuple[float, ...]) -> float:
    """Median of a non-empty sequence (NaN when empty, so a table shows a gap, not a crash)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def mean(values: list[float] | tuple[float, ...]) -> float:
    return sum(values) / len(values) if values else math.nan
