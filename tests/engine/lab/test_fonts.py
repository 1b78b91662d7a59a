"""engine/lab/fonts.py: a CJK font installed after matplotlib cached its font list is added and the cache rewritten.

Each step runs in its own Python process with its own matplotlib cache folder (MPLCONFIGDIR), as three starts
of the app would: the first builds the cache, a font file then appears, the second start adds it and rewrites
the cache, the third finds it in the cache without adding anything. The "new font" is a copy of a font matplotlib
ships (no CJK font is installed on CI machines); what is tested is the cache's refresh, which is by file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

from engine.lab import fonts

ROOT = Path(__file__).resolve().parents[3]


def _run(code: str, cache: Path) -> str:
    env = {"MPLCONFIGDIR": str(cache), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(cache)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_font_installed_after_the_cache_was_built_is_added_once_and_cached(tmp_path):
    cache = tmp_path / "mpl"
    cache.mkdir()
    _run("import matplotlib.font_manager as fm; print(len(fm.fontManager.ttflist))", cache)  # first start
    shipped = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    late = tmp_path / "fonts" / "LateFont.ttf"
    late.parent.mkdir()
    shutil.copy(shipped, late)  # "installed" after the cache was written
    check = (f"import json; from pathlib import Path; from engine.lab import fonts; "
             f"import matplotlib.font_manager as fm; "
             f"known = {str(late)!r} in {{e.fname for e in fm.fontManager.ttflist}}; "
             f"added = fonts.refresh_cjk_fonts([Path({str(late)!r})]); "
             f"print(json.dumps([known, added, str(fonts.cache_file())]))")
    known, added, cache_path = json.loads(_run(check, cache))
    assert known is False and added == ["DejaVu Sans"]
    assert str(late) in Path(cache_path).read_text(encoding="utf-8")
    known, added, _ = json.loads(_run(check, cache))  # the next start reads it from the cache
    assert known is True and added == []


def test_damaged_or_missing_font_files_are_left_out(tmp_path, monkeypatch):
    broken = tmp_path / "Broken.ttf"
    broken.write_bytes(b"not a font")
    monkeypatch.setattr(fonts, "cache_file", lambda: tmp_path / "fontlist.json")
    before = list(fonts.font_manager.fontManager.ttflist)
    try:
        assert fonts.refresh_cjk_fonts([broken, tmp_path / "absent.otf"]) == []
        assert not (tmp_path / "fontlist.json").exists()
    finally:
        fonts.font_manager.fontManager.ttflist[:] = before


def test_fontconfig_lists_only_font_files_that_cover_chinese():
    found = fonts.fontconfig_cjk_files()
    assert all(path.suffix.lower() in fonts.FONT_SUFFIXES for path in found)
    if shutil.which("fc-list") is None:
        assert found == []
