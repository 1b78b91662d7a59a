"""CJK fonts for matplotlib: the ones installed after matplotlib built its font cache, added and the cache rewritten.

matplotlib lists the system's fonts once and keeps the list in ``fontlist-v*.json`` in its cache folder; a font
installed later (``apt-get install fonts-noto-cjk`` after a first start, as the README suggests) stays unknown to
it, so Chinese chart labels render as boxes. ``refresh_cjk_fonts()`` asks fontconfig for the font files that
cover Chinese, adds those matplotlib's list lacks (``FontManager.addfont``) and saves the list again
(``font_manager.json_dump``), so the next start reads it whole. Without fontconfig (Windows, macOS without it)
nothing is checked. Owns only that; which face a chart uses is ``engine.lab.charts``' and ``app.ui.i18n``'s.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from matplotlib import font_manager, get_cachedir

FONT_SUFFIXES = (".ttf", ".otf", ".ttc")


def fontconfig_cjk_files() -> list[Path]:
    """Font files fontconfig says cover Chinese (``fc-list :lang=zh file``); [] without fontconfig."""
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        return []
    try:
        out = subprocess.run([fc_list, ":lang=zh", "file"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    files = (line.strip().rstrip(":") for line in out.stdout.splitlines())
    return sorted({Path(name) for name in files if name.lower().endswith(FONT_SUFFIXES)})


def cache_file() -> Path:
    """Where matplotlib keeps its font list (the name its own loader uses)."""
    return Path(get_cachedir()) / f"fontlist-v{font_manager.FontManager.__version__}.json"


def refresh_cjk_fonts(files: list[Path] | None = None) -> list[str]:
    """Add the CJK font files (default: fontconfig's) that matplotlib's font list lacks, and rewrite its cache
    when any was added. Returns the family names added (none on a machine whose cache is current)."""
    candidates = fontconfig_cjk_files() if files is None else files
    known = {Path(entry.fname) for entry in font_manager.fontManager.ttflist}
    added: list[str] = []
    before = len(font_manager.fontManager.ttflist)
    for path in candidates:
        if path in known or not path.is_file():
            continue
        try:
            font_manager.fontManager.addfont(path)
        except (OSError, RuntimeError, ValueError):  # a damaged or unsupported font file: leave it out
            continue
    added = list(dict.fromkeys(entry.name for entry in font_manager.fontManager.ttflist[before:]))
    if added:
        try:
            font_manager.json_dump(font_manager.fontManager, cache_file())
        except OSError:  # a read-only cache folder: the fonts are in use for this run all the same
            pass
    return added
