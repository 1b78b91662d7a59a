"""The layer rules of docs/DESIGN.md: engine/ imports no Qt; app/ imports no torch/transformers.

Checked two ways: statically (every import statement in the source) and dynamically (importing the
engine's modules in a fresh interpreter loads no Qt module).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "engine": ("PySide6", "PyQt5", "PyQt6", "shiboken6"),
    "app": ("torch", "transformers", "accelerate", "bitsandbytes", "safetensors", "gguf"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_layers_import_only_what_they_may():
    violations = []
    for package, banned in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            bad = _imports(path) & set(banned)
            if bad:
                violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert violations == []


def test_importing_engine_loads_no_qt():
    modules = [p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
               for p in sorted((ROOT / "engine").rglob("*.py")) if p.name != "__main__.py"]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n    importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
