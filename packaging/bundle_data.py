"""What the frozen app carries of its dependencies besides code: every run-time distribution's metadata and data
files, chosen by rule, never by a hand-kept list.

Owns the rule; packaging/miaohui.spec applies it and tests/test_bundle_data.py checks it against what is installed
from requirements.lock. It decides nothing about Miaohui's own files, binaries or excluded modules (the spec does).

Why a rule: the spec used to name the distributions whose metadata it copied and collect no data files for most of
them, so when transformers 5.25 began to need ``kernels``, whose code reads a JSON file shipped beside it, the frozen
app could not load any model (issue 39). The run-time distributions are now the closure of Miaohui's own
requirements as installed (markers evaluated, extras followed), and each one's files from its RECORD that are not
code (``.py``, compiled modules and libraries, which PyInstaller's analysis and hooks collect) are bundled where
they lie, except:

- ``DEV_ONLY``: type stubs, C/C++/Fortran sources and headers, build-system files, man pages: read by compilers and
  type checkers, never at run time (torch's 9,300 headers alone are 170 MB);
- ``HOOKED``: distributions whose PyInstaller hook lays out their data itself (Qt's plugins and translations, torch's
  library files), so copying their trees again would duplicate or misplace them;
- files outside the package tree (console scripts in ``bin/``).
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT_DISTRIBUTION = "miaohui"
# Their PyInstaller hooks (PyInstaller's own for Qt, pyinstaller-hooks-contrib's for torch) collect their data.
HOOKED = frozenset({"pyside6-essentials", "shiboken6", "torch"})
# Code PyInstaller collects by analysis (modules, extension modules, shared libraries).
_CODE = re.compile(r"\.(py|pyc|pyo|pyd|so|dll|dylib)$|\.so(\.[0-9]+)+$", re.IGNORECASE)
DEV_ONLY = re.compile(
    r"(\.(pyi|h|hpp|hh|cuh|c|cc|cpp|cxx|f|f90|pxd|pyx|cmake|lib|a|1)$|(^|/)py\.typed$|(^|/)CMakeLists\.txt$)",
    re.IGNORECASE)


def runtime_distributions(root: str = ROOT_DISTRIBUTION) -> dict[str, metadata.Distribution]:
    """Canonical name -> installed distribution, for ``root`` and everything it requires at run time (no extras of
    ``root``'s own: tests and packaging tools stay out)."""
    found: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, tuple[str, ...]]] = [(root, ())]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement whose marker matched but is not installed: pip check reports those
        found[key] = dist
        for text in dist.requires or ():
            requirement = Requirement(text)
            environments = [{"extra": extra} for extra in (extras or ("",))]
            if requirement.marker is not None and not any(requirement.marker.evaluate(env) for env in environments):
                continue
            todo.append((requirement.name, tuple(requirement.extras)))
    return found


def non_code_files(dist: metadata.Distribution) -> list[PurePosixPath]:
    """The distribution's files inside the package tree that are not code or its own metadata."""
    out = []
    for path in dist.files or ():
        relative = PurePosixPath(str(path).replace("\\", "/"))
        if relative.parts and relative.parts[0] == "..":
            continue  # console scripts and the like, outside site-packages
        if any(part.endswith((".dist-info", ".egg-info")) or part == "__pycache__" for part in relative.parts):
            continue
        if _CODE.search(relative.name):
            continue
        out.append(relative)
    return out


def bundled(dist: metadata.Distribution) -> list[tuple[str, str]]:
    """PyInstaller ``datas`` entries (source file, destination folder) the rule gives ``dist``."""
    if canonicalize_name(dist.metadata["Name"]) in HOOKED:
        return []
    entries = []
    for relative in non_code_files(dist):
        if DEV_ONLY.search(str(relative)):
            continue
        source = Path(dist.locate_file(relative))
        if source.is_file():
            entries.append((str(source), str(relative.parent) if str(relative.parent) != "." else "."))
    return entries


def datas_and_metadata() -> tuple[list[tuple[str, str]], list[str]]:
    """Every run-time distribution's data entries, and the names of those whose metadata the bundle carries (all of
    them: transformers and others check versions of what they import through importlib.metadata)."""
    datas: list[tuple[str, str]] = []
    names = []
    for key, dist in sorted(runtime_distributions().items()):
        names.append(dist.metadata["Name"])
        if key != ROOT_DISTRIBUTION:
            datas += bundled(dist)
    return datas, names
