"""app/platform_check.py: before Qt's xcb plugin loads, the system libraries it needs are checked and the missing
ones named with the packages that bring them, in one line, exit 2.

The end-to-end test starts the real app (``python -m app``) with ``QT_QPA_PLATFORM=xcb`` and hides three of the
plugin's libraries from the real dynamic loader: ``LD_LIBRARY_PATH`` points at a folder where each has a zero-byte
file of its name, which the loader finds first and cannot load ("file too short") — the same state as absent,
whatever this machine has installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import platform_check

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux's")
ROOT = Path(__file__).resolve().parents[2]
HIDDEN = ("libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1")


def _qt_paths() -> tuple[Path, Path]:
    from PySide6.QtCore import QLibraryInfo

    plugins = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath))
    return plugins / "platforms" / "libqxcb.so", Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.LibrariesPath))


def test_the_app_names_the_missing_libraries_and_their_packages_in_one_line_and_exits_2(tmp_path):
    hide = tmp_path / "hidden-libs"
    hide.mkdir()
    for name in HIDDEN:
        (hide / name).write_bytes(b"")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("QT_", "WAYLAND", "XDG_SESSION"))}
    env.update(QT_QPA_PLATFORM="xcb", DISPLAY=":97", LD_LIBRARY_PATH=str(hide), MIAOHUI_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-m", "app"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    for soname, (debian, fedora) in ((name, platform_check.PACKAGES[name]) for name in HIDDEN):
        assert soname in line and debian in line and fedora in line
    assert "sudo apt install" in line and "sudo dnf install" in line and "Traceback" not in done.stderr
    assert not (tmp_path / "home").exists()  # refused before the data folder was made


def test_the_plugins_dependencies_are_read_from_its_elf_header():
    plugin, lib_dir = _qt_paths()
    needed = platform_check.needed_libraries(plugin)
    assert "libQt6XcbQpa.so.6" in needed and "libQt6Gui.so.6" in needed
    assert "libxcb-icccm.so.4" in platform_check.needed_libraries(lib_dir / "libQt6XcbQpa.so.6")
    assert platform_check.needed_libraries(Path(platform_check.__file__)) == []  # not an ELF file


def test_qt_s_own_libraries_are_followed_and_never_reported():
    plugin, lib_dir = _qt_paths()
    missing = platform_check.missing_libraries(plugin, lib_dir)
    assert not any(name.startswith(("libQt6", "libicu")) for name in missing.libraries)


def test_packages_are_named_once_each_in_order():
    missing = platform_check.Missing(("libxcb-randr.so.0", "libxcb-shm.so.0", "libweird.so.3"))
    assert missing.packages(0) == ["libxcb-randr0", "libxcb-shm0", "libweird.so.3"]
    assert missing.packages(1) == ["libxcb", "libweird.so.3"]


@pytest.mark.parametrize("environ, expected", [
    ({}, True),
    ({"QT_QPA_PLATFORM": "xcb"}, True),
    ({"QT_QPA_PLATFORM": "xcb:nograb"}, True),
    ({"QT_QPA_PLATFORM": "offscreen"}, False),
    ({"QT_QPA_PLATFORM": "wayland;xcb"}, False),
    ({"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}, False),
    ({"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "x11"}, True),
])
def test_the_check_runs_only_where_qt_starts_with_xcb(environ, expected):
    assert platform_check.uses_xcb(environ) is expected
