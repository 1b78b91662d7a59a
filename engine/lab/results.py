"""What an inference-lab experiment hands back, and how it is written to disk.

Plain Python only (no torch, no Qt): the GUI receives these objects from the worker thread and the
CLI writes them as CSV and JSON. Owns the result shape (a table, line series, optional heatmaps,
summary figures, flags and notes) and its CSV/JSON forms; owns no measuring and no drawing
(``engine.lab.charts`` draws, the experiment modules measure).

Also the one home of ``spreadsheet_safe`` CSV cells for every file the app writes for the user (results, the
window's exports). Every such file is written by ``engine.paths.replace_text``: beside its target under a
temporary name, fsynced and renamed over it, so a write that fails part-way (a full disk) leaves the previous
file byte-identical rather than truncated.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.paths import replace_text

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
