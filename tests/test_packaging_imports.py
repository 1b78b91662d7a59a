"""Every Python entry point the packaging and the Makefile use still resolves: the fast guard before the slow build.

The build broke once because ``packaging/build.sh`` ran ``from engine import fetch`` after ``fetch`` had moved to
``engine/models/``; nothing ran that line until someone built the installer. These tests read, without running
any of them, every place that names a module of ours: the spec, the PyInstaller hooks, the launcher and runtime
hook, the helper scripts, the Python inside the shell scripts (``"$PY" -c '…'`` and ``<<'PYEOF'`` blocks) and the
``-m module`` / ``script.py`` invocations of the shell scripts, the Makefile and ``.ci/run``. Each ``import`` /
``from … import …`` of the project (``app``, ``engine``, or a module beside the script) must resolve to a module or
an attribute that exists; each ``-m`` module of the project must be runnable; each script named must exist.
Third-party modules are checked where installed (PyInstaller is not, in ``make test``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
PROJECT = ("app", "engine")
SHELL_FILES = sorted(PACKAGING.glob("*.sh")) + [ROOT / "Makefile", ROOT / ".ci" / "run"]
PYTHON_FILES = (sorted(PACKAGING.glob("*.py")) + sorted((PACKAGING / "hooks").glob("*.py"))
                + [PACKAGING / "miaohui.spec"])


@dataclass(frozen=True)
class Source:
    """Python source found somewhere in the packaging, and where (for the failure message)."""

    where: str
    code: str


def _python_in_shell(path: Path) -> list[Source]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"""(?:\$\{?PY\}?"?|\$\(PY\)|python3?)\s+-c\s+(['"])(.*?)(?<!\\)\1""", text, re.S):
        found.append(Source(f"{path.name}: -c {match.group(2)[:40]!r}", match.group(2)))
    for match in re.finditer(r"<<'PYEOF'[^\n]*\n(.*?)\nPYEOF", text, re.S):
        found.append(Source(f"{path.name}: heredoc {match.group(1)[:40]!r}", match.group(1)))
    return found


def _sources() -> list[Source]:
    sources = [Source(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")) for path in PYTHON_FILES]
    for path in SHELL_FILES:
        sources += _python_in_shell(path)
    return sources


def _imports(source: Source) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, names imported from it, level) for every import statement, functions' bodies included."""
    tree = ast.parse(source.code, filename=source.where)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, (), 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", tuple(alias.name for alias in node.names), node.level))
    return found


def _local_module(name: str) -> bool:
    return (PACKAGING / f"{name.split('.')[0]}.py").is_file()


def _resolves(module: str, names: tuple[str, ...]) -> str | None:
    """None when ``from module import names`` (or ``import module``) would work; else why not."""
    top = module.split(".")[0]
    ours = top in PROJECT or _local_module(module)
    if not ours and importlib.util.find_spec(top) is None:
        return None  # a third-party package this environment does not have (PyInstaller in `make test`)
    if _local_module(module) and str(PACKAGING) not in sys.path:
        sys.path.insert(0, str(PACKAGING))  # the spec and the hooks run with packaging/ on sys.path
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError as exc:
        return f"no module {exc.name!r}"
    if spec is None:
        return f"no module {module!r}"
    if not names or names == ("*",):
        return None
    loaded = importlib.import_module(module)
    for name in names:
        if hasattr(loaded, name):
            continue
        if importlib.util.find_spec(f"{module}.{name}") is None:
            return f"{module!r} has no {name!r} (neither an attribute nor a submodule)"
    return None


def test_the_sources_are_found():
    wheres = [source.where for source in _sources()]
    assert any(where.startswith("build.sh: -c") for where in wheres)
    assert any(where.startswith("test_deb.sh: heredoc") for where in wheres)
    assert "packaging/miaohui.spec" in wheres and "packaging/hooks/hook-bitsandbytes.py" in wheres


@pytest.mark.parametrize("source", _sources(), ids=lambda source: source.where)
def test_every_import_resolves(source):
    problems = []
    for module, names, level in _imports(source):
        if level or not module:
            continue  # relative imports: none in these scripts
        why = _resolves(module, names)
        if why is not None:
            problems.append(f"{source.where}: `from {module} import {', '.join(names)}`: {why}"
                            if names else f"{source.where}: `import {module}`: {why}")
    assert not problems, "\n".join(problems)


def _invocations() -> list[tuple[str, str, str]]:
    """(file, kind, target): ``-m module`` and ``something.py`` run by the shell scripts, Makefile and CI."""
    found = []
    for path in SHELL_FILES:
        text = path.read_text(encoding="utf-8")
        for module in re.findall(r"""(?:PY\}?"?|\(PY\)|python3?)\s+-m\s+([A-Za-z_][\w.]*)""", text):
            found.append((path.name, "module", module))
        for script in re.findall(r"""(?:PY\}?"?|\(PY\)|python3?)\s+((?:packaging|app|engine)/[\w/]+\.py)""", text):
            found.append((path.name, "script", script))
        for script in re.findall(r"bash\s+((?:packaging|\.ci)/[\w/]+\.sh)", text):
            found.append((path.name, "script", script))
    return found


def test_the_invocations_are_found():
    targets = {target for _where, _kind, target in _invocations()}
    assert {"engine", "PyInstaller", "app", "packaging/install_torch.py", "packaging/check_self_test.py",
            "packaging/build.sh", "packaging/self_test_bundle.sh"} <= targets


@pytest.mark.parametrize("where, kind, target", _invocations(), ids=lambda value: str(value))
def test_every_module_and_script_run_by_the_build_exists(where, kind, target):
    if kind == "script":
        assert (ROOT / target).is_file(), f"{where} runs {target}, which does not exist"
        return
    if target.split(".")[0] not in PROJECT:
        return  # pip, pytest, PyInstaller: third-party, checked by installing them
    spec = importlib.util.find_spec(target)
    assert spec is not None, f"{where} runs `-m {target}`, which does not exist"
    if spec.submodule_search_locations is not None:  # a package: `-m` runs its __main__
        assert importlib.util.find_spec(f"{target}.__main__") is not None, f"{where}: `-m {target}` has no __main__"


def test_the_spec_s_project_module_names_exist():
    """Module names the spec passes as strings (collect_submodules, hiddenimports) are real."""
    tree = ast.parse((PACKAGING / "miaohui.spec").read_text(encoding="utf-8"))
    names = {node.args[0].value for node in ast.walk(tree)
             if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "collect_submodules"
             and node.args and isinstance(node.args[0], ast.Constant)}
    assert {"engine", "app"} <= names
    for name in names:
        assert importlib.util.find_spec(name) is not None, name
