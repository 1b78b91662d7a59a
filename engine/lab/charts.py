"""Charts of lab results with matplotlib, drawn on a ``Figure`` the caller owns.

``draw(result, figure)`` fills any ``matplotlib.figure.Figure``: the CLI's is rendered by the Agg
canvas to PNG (``save_png``), the GUI's is the one inside its ``FigureCanvasQTAgg``. Nothing here
imports pyplot or a GUI backend, so the engine stays Qt-free and no global backend is switched.
Chinese token labels need a CJK font: the first installed one from ``CJK_FONTS`` is put in the font
fallback list, inside an ``rc_context`` so global settings are left alone (a CJK font installed after
matplotlib cached its font list is added first: ``engine.lab.fonts``). Owns drawing only.
"""

from __future__ import annotations

import contextlib
import functools
import math
from pathlib import Path

from matplotlib import font_manager, rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from engine.lab.fonts import refresh_cjk_fonts
from engine.lab.results import ExperimentResult, Heatmap, Series
from engine.paths import replace_file

CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Zen Hei", "Microsoft YaHei",
             "PingFang SC", "SimHei", "Noto Serif CJK SC")
MAX_LABELS = 64  # more token labels than this on a heatmap axis overlap into a grey bar


@functools.lru_cache(maxsize=1)
def _font_families() -> tuple[str, ...]:
    refresh_cjk_fonts()
    installed = {f.name for f in font_manager.fontManager.ttflist}
    return ("DejaVu Sans",) + tuple(name for name in CJK_FONTS if name in installed)[:1]


@contextlib.contextmanager
def fonts():
    """Font fallback for mixed Latin/CJK labels; text objects keep the font chosen when they are made."""
    with rc_context({"font.family": list(_font_families()), "axes.unicode_minus": False}):
        yield


def draw(result: ExperimentResult, figure: Figure) -> Figure:
    """Clear ``figure`` and draw ``result`` on it."""
    figure.clear()
    with fonts():
        if result.heatmaps:
            _draw_heatmaps(result, figure)
        elif result.key == "sampling" or any(s.x_ticks for s in result.series):
            _draw_bars(result, figure)
        else:
            _draw_lines(result, figure)
        # The engine that produced the figures (a local model, or a server's URL and model) under the title.
        figure.suptitle(result.title + (f"\n{result.model}" if result.model else ""), fontsize=10)
        with contextlib.suppress(ValueError):  # a degenerate layout is still a readable chart
            figure.tight_layout()
    return figure


def save_png(result: ExperimentResult, path: Path, *, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_heat = len(result.heatmaps)
    figure = Figure(figsize=(6.5 * n_heat, 9.0) if n_heat else (9.0, 4.8))
    FigureCanvasAgg(figure)
    draw(result, figure)
    with fonts():
        return replace_file(path, lambda fh: figure.savefig(fh, dpi=dpi, format="png"))


def _panels(series: tuple[Series, ...]) -> dict[int, list[Series]]:
    panels: dict[int, list[Series]] = {}
    for s in series:
        panels.setdefault(s.panel, []).append(s)
    return panels


def _clean(values: tuple[float, ...]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _draw_lines(result: ExperimentResult, figure: Figure) -> None:
    panels = _panels(result.series)
    if not panels:
        ax = figure.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no series to plot", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    for i, (_, group) in enumerate(sorted(panels.items())):
        ax = figure.add_subplot(1, len(panels), i + 1)
        colours: dict[str, str] = {}
        for s in group:
            base = s.name.split(", least-squares fit")[0]
            fit = base != s.name  # a fitted trend is drawn dashed in its measured series' colour
            (line,) = ax.plot(_clean(s.x), _clean(s.y), marker="o" if len(s.x) <= 24 and not fit else None,
                              markersize=3, label=s.name, linestyle="--" if fit else "-",
                              linewidth=1.0 if fit else 1.5, color=colours.get(base) if fit else None)
            colours.setdefault(base, line.get_color())
        ax.set_xlabel(group[0].x_label)
        ax.set_ylabel(group[0].y_label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        if result.key == "kv_cache" or group[0].y_label.startswith(("TTFT", "latency")):
            ax.set_ylim(bottom=0)  # a latency axis that does not start at 0 exaggerates small changes


def _draw_bars(result: ExperimentResult, figure: Figure) -> None:
    ax = figure.add_subplot(1, 1, 1)
    series = result.series
    ticks = series[0].x_ticks if series else ()
    width = 0.8 / max(1, len(series))
    for k, s in enumerate(series):
        xs = [x + (k - (len(series) - 1) / 2) * width for x in _clean(s.x)]
        bars = ax.bar(xs, _clean(s.y), width=width, label=s.name)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(range(len(ticks)), ticks)
    ax.set_ylabel(series[0].y_label if series else "")
    ax.set_ylim(0, max([1.0] + [v for s in series for v in _clean(s.y) if math.isfinite(v)]) * 1.15)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def _draw_heatmaps(result: ExperimentResult, figure: Figure) -> None:
    heatmaps = result.heatmaps
    n = len(heatmaps)
    has_lines = bool(result.series)
    # A narrow figure (the GUI's side dock) stacks the heatmaps; a wide one (PNG export) puts them side by side.
    stacked = figure.get_figwidth() < 4.5 * n
    if stacked:
        grid = figure.add_gridspec(n + has_lines, 1, height_ratios=(3,) * n + ((1.2,) if has_lines else ()))
        cells = [grid[i, 0] for i in range(n)]
    else:
        grid = figure.add_gridspec(1 + has_lines, n, height_ratios=(3, 1) if has_lines else (1,))
        cells = [grid[0, i] for i in range(n)]
    for cell, heatmap in zip(cells, heatmaps):
        draw_heatmap(heatmap, figure.add_subplot(cell), figure)
    if has_lines:
        ax = figure.add_subplot(grid[-1, :])
        for s in result.series:
            ax.plot(_clean(s.x), _clean(s.y), label=s.name)
        ax.set_xlabel(result.series[0].x_label)
        ax.set_ylabel(result.series[0].y_label)
        ax.set_ylim(0, 1.05)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)


def draw_heatmap(heatmap: Heatmap, ax, figure: Figure) -> None:
    """One attention matrix with token labels (queries down, keys across)."""
    matrix = [list(row) for row in heatmap.matrix]
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    n_rows, n_cols = len(heatmap.row_labels), len(heatmap.col_labels)
    if n_cols <= MAX_LABELS:
        ax.set_xticks(range(n_cols), heatmap.col_labels, rotation=90, fontsize=7)
    if n_rows <= MAX_LABELS:
        ax.set_yticks(range(n_rows), heatmap.row_labels, fontsize=7)
    ax.set_xlabel("key (attended token)")
    ax.set_ylabel("query token")
    ax.set_title(heatmap.title, fontsize=9)
    figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
