"""Before Qt loads its X11 platform plugin on Linux: are the system libraries it links against there?

Qt's xcb plugin needs a dozen X11 helper libraries that a fresh desktop install may lack (libxcb-icccm4 and
libxcb-keysyms1 on a plain Debian). When one is missing Qt aborts with "Could not load the Qt platform plugin
xcb" and, since 6.5, a hint that names only libxcb-cursor0 (even when that one is installed). This module reads
the plugin's ELF dependencies (and those of the Qt libraries it pulls in from Qt's own folder), asks the dynamic
loader for each system library, and turns the ones it cannot load into one line naming the packages to install
on Debian/Ubuntu and Fedora. Owns only that check; ``app.main`` calls ``missing_for_platform()`` before it makes
the QApplication and exits 2 with ``advice()``'s line.

Why a small ELF reader of our own: the check must run in the packaged app, where neither ``ldd`` (not on every
system) nor pyelftools (not a dependency) can be counted on; it needs the DT_NEEDED names only.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

# soname -> (Debian/Ubuntu package, Fedora package). Names not listed are shown as the library itself.
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libSM.so.6": ("libsm6", "libSM"),
    "libICE.so.6": ("libice6", "libICE"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
}

_DT_NEEDED, _DT_STRTAB, _PT_LOAD, _PT_DYNAMIC = 1, 5, 1, 2


@dataclass(frozen=True)
class Missing:
    """System libraries the platform plugin needs that the dynamic loader could not load."""

    libraries: tuple[str, ...]

    def packages(self, distro: int) -> list[str]:
        """Package names (0: Debian/Ubuntu, 1: Fedora), each once, in the libraries' order."""
        return list(dict.fromkeys(PACKAGES[lib][distro] if lib in PACKAGES else lib for lib in self.libraries))


def needed_libraries(path: Path) -> list[str]:
    """The DT_NEEDED entries of an ELF shared object (little- or big-endian, 32- or 64-bit); [] if not ELF."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        return []
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:
        phoff, = struct.unpack_from(order + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x36)
        header, entry = order + "IIQQQQQQ", order + "qQ"
    else:
        phoff, = struct.unpack_from(order + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x2A)
        header, entry = order + "IIIIIIII", order + "iI"
    loads, dynamic = [], None
    for index in range(phnum):
        fields = struct.unpack_from(header, data, phoff + index * phentsize)
        kind = fields[0]
        # 64-bit: type, flags, offset, vaddr, paddr, filesz, memsz, align; 32-bit: type, offset, vaddr, paddr, filesz...
        offset, vaddr, filesz = (fields[2], fields[3], fields[5]) if wide else (fields[1], fields[2], fields[4])
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []
    needed, strtab = [], None
    size = struct.calcsize(entry)
    for at in range(dynamic[0], dynamic[0] + dynamic[1], size):
        tag, value = struct.unpack_from(entry, data, at)
        if tag == 0:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
        elif tag == _DT_STRTAB:
            strtab = value
    if strtab is None:
        return []
    # DT_STRTAB is a virtual address: the PT_LOAD segment holding it maps it to a file offset.
    base = next((strtab - vaddr + offset for vaddr, offset, filesz in loads if vaddr <= strtab < vaddr + filesz), None)
    if base is None:
        return []
    return [data[base + name:data.index(b"\0", base + name)].decode("ascii", "replace") for name in needed]


def _loadable(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_libraries(plugin: Path, qt_lib_dir: Path) -> Missing:
    """The system libraries ``plugin`` needs, directly or through Qt's own libraries in ``qt_lib_dir``, that the
    dynamic loader cannot load (absent, or a file it cannot use)."""
    missing: list[str] = []
    seen: set[str] = set()
    queue = [plugin]
    while queue:
        for soname in needed_libraries(queue.pop()):
            if soname in seen:
                continue
            seen.add(soname)
            bundled = qt_lib_dir / soname
            if bundled.is_file():  # Qt's own libraries (and ICU): follow them, they are not the system's
                queue.append(bundled)
            elif not _loadable(soname):
                missing.append(soname)
    return Missing(tuple(missing))


def uses_xcb(environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """Whether Qt will load its xcb plugin first: Linux, no other platform asked for, not a Wayland session
    (where Qt 6 starts with its wayland plugin and xcb is only the fallback)."""
    if not sys.platform.startswith("linux"):
        return False
    asked = environ.get("QT_QPA_PLATFORM", "").strip()
    if asked:
        return asked.split(";")[0].split(":")[0] == "xcb"
    return not (environ.get("WAYLAND_DISPLAY") and environ.get("XDG_SESSION_TYPE") == "wayland")


def missing_for_platform() -> Missing | None:
    """What the xcb plugin lacks on this machine, or None when Qt will not use xcb or nothing is missing."""
    if not uses_xcb():
        return None
    from PySide6.QtCore import QLibraryInfo  # QtCore only: no platform plugin is loaded by this

    plugin = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / "libqxcb.so"
    if not plugin.is_file():
        return None  # a Qt without the xcb plugin: Qt's own message is the right one
    found = missing_libraries(plugin, Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.LibrariesPath)))
    return found if found.libraries else None


def advice(missing: Missing) -> str:
    """One line: what is missing and the exact install commands."""
    return (f"miaohui: the window cannot open: Qt's X11 platform needs {', '.join(missing.libraries)}, which this system cannot load. "
            f"Install them (Debian/Ubuntu: sudo apt install {' '.join(missing.packages(0))}; "
            f"Fedora: sudo dnf install {' '.join(missing.packages(1))}), or run on Wayland (QT_QPA_PLATFORM=wayland).")
