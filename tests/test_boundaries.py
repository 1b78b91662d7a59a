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


# ---------------------------------------------------------------- the shape of the tree (docs/DESIGN.md's module map)

MAX_MODULE_LINES = 450  # past this a module is doing several jobs: split it along them
MAX_ENGINE_TOP_LEVEL = 8  # engine/'s loose modules; everything else lives in a folder that names its concern


def _project_modules() -> dict[str, Path]:
    return {p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__"): p
            for package in ("engine", "app") for p in sorted((ROOT / package).rglob("*.py"))}


def _project_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports anywhere: inside functions and under ``TYPE_CHECKING`` too (a cycle
    that only type hints close is still two modules that cannot be read apart)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                # ``from engine.models import loader`` imports a module; ``from engine.inputs import LoadSpec`` a name.
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return {name for name in found if name in modules}


def test_no_import_cycles_among_the_projects_modules():
    modules = _project_modules()
    graph = {name: _project_imports(path, modules) - {name} for name, path in modules.items()}
    cycles: list[list[str]] = []
    # Tarjan's strongly connected components: a component of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            connect(name)
    assert cycles == []


def test_no_module_is_over_the_size_that_means_several_jobs():
    long = {str(path.relative_to(ROOT)): lines for path in _project_modules().values()
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_engine_keeps_few_loose_modules_beside_its_folders():
    loose = sorted(p.name for p in (ROOT / "engine").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(loose) <= MAX_ENGINE_TOP_LEVEL, loose
    folders = sorted(p.name for p in (ROOT / "engine").iterdir() if (p / "__init__.py").is_file())
    assert folders == ["bench", "cli", "constrain", "core", "docs", "executor", "generate", "lab", "library", "models", "native",
                       "quant", "remote", "serve", "shapes", "speculate", "tools", "vision"]


# engine/shapes/ is the ground floor (issue 42): the library, the loader and the quantizers stand on it, so it may
# import only itself and the engine's loose bottom modules, never engine.library, engine.models or anything above.
SHAPES_MAY_IMPORT = ("engine.shapes", "engine.errors", "engine.inputs")


def test_the_shapes_floor_imports_nothing_above_it():
    modules = _project_modules()
    reaching = {f"{name} imports {target}" for name, path in modules.items() if name.startswith("engine.shapes")
                for target in _project_imports(path, modules)
                if target != "engine" and not target.startswith(SHAPES_MAY_IMPORT)}
    assert reaching == set()


def test_docs_and_comments_cite_only_files_inside_the_repository():
    # A clone cannot resolve the design notes the project grew from: cite docs/ or the module instead.
    # (spelt in pieces so that this line does not find itself)
    outside = ("ARCHI" "TECTURE", "STYLE" ".md", "../sha" "red", "the seeds' exp" "eriment")
    found = [f"{path.relative_to(ROOT)}:{number}"
             for folder in ("engine", "app", "tests", "packaging", "docs")
             for path in sorted((ROOT / folder).rglob("*")) if path.suffix in (".py", ".md", ".spec", ".sh")
             and not path.is_relative_to(ROOT / "packaging" / "out")  # the frozen build: other projects' files
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if any(word in line for word in outside)]
    found += [f"README.md:{number}" for number, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1)
              if any(word in line for word in outside)]
    assert found == []


# ---------------------------------------------------------------- app/'s floors (issue 30: each imports only those below)

# Bottom to top. A module may import its own floor and the floors below it, never one above: widgets know nothing of
# the window that lays them out, the runtime nothing of the widgets that show its results, the plain data nothing of
# Qt's views. The package app itself (its loose modules: the entry points) is the top floor.
APP_FLOORS: tuple[tuple[str, ...], ...] = (
    ("app.history",),  # the conversation store: plain Python and SQLite
    ("app.ui",),  # texts, theme, i18n, throttle, Markdown, accessibility: what every view shares
    ("app.state",),  # settings, API keys, the chat's messages as data
    ("app.runtime",),  # the worker thread, its bridge, background work, serving, single instance
    ("app.widgets", "app.library"),  # the views (the Models window's pages too)
    ("app.window",),  # the main window, its controller and the helpers it constructs and connects
    ("app",),  # the entry points
)
APP_TOP_MODULES = {"app", "app.__main__", "app.main", "app.gui_bench", "app.lab_bench", "app.platform_check"}


def _app_floor(module: str) -> int:
    for level, packages in enumerate(APP_FLOORS):
        if any(module == package or module.startswith(package + ".") for package in packages if package != "app"):
            return level
    return len(APP_FLOORS) - 1


def test_app_modules_live_in_a_floor_or_are_entry_points():
    loose = sorted(name for name in _project_modules() if name.startswith("app")
                   and _app_floor(name) == len(APP_FLOORS) - 1 and name not in APP_TOP_MODULES)
    assert loose == []


def test_each_app_module_imports_only_its_floor_or_those_below():
    modules = _project_modules()
    upward = [f"{name} imports {target}" for name, path in sorted(modules.items()) if name.startswith("app")
              for target in sorted(_project_imports(path, modules))
              if target.startswith("app") and _app_floor(target) > _app_floor(name)]
    assert upward == []


def test_only_the_runtime_floor_starts_threads_in_the_app():
    # One way to run background work (issue 30): app.runtime's worker thread and TaskRunner. A view that needs work
    # off the GUI thread submits it there instead of starting a thread of its own.
    starts = ("Thread", "QThread", "QThreadPool", "QRunnable", "ThreadPoolExecutor")
    found = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        if path.is_relative_to(ROOT / "app" / "runtime"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in starts:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert found == []


# ---------------------------------------------------------------- the window wires, its parts do not reach (issue 42)

# A part that takes the whole window (``window: Any``) or a protocol of it typed ``Any`` can reach anything in it:
# nothing says what it uses, and a renamed widget breaks it at run time only. Parts get the typed objects they use and
# report by signals; app/window/wiring.py and the main window connect them. Parameters named ``window`` and typed as
# a real class (``QMainWindow`` for a part that adds a toolbar or parents a dialog) are fine.
# Only files the engine-core branch is rewriting may still take the window; the lead clears an entry once that branch
# is merged (the second test below fails when an entry no longer needs its place, so the list only shrinks).
WINDOW_ANY_ALLOWED: dict[str, str] = {}


def _mentions_any(annotation: ast.expr | None) -> bool:
    return annotation is not None and any(
        (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute) and node.attr == "Any")
        or (isinstance(node, ast.Constant) and isinstance(node.value, str) and "Any" in node.value.split("[")[0])
        for node in ast.walk(annotation))


def _reaching_into_the_window(path: Path) -> list[str]:
    """``window: Any`` parameters, and members of a ``Protocol`` (attributes, parameters, returns) typed with Any."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            found += [f"{node.lineno} {node.name}(window: Any)" for arg in arguments
                      if arg.arg == "window" and _mentions_any(arg.annotation)]
        elif isinstance(node, ast.ClassDef) and any(
                (base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else "")
                == "Protocol" for base in node.bases):
            for member in node.body:
                if isinstance(member, ast.AnnAssign) and _mentions_any(member.annotation):
                    found.append(f"{member.lineno} {node.name}.{ast.unparse(member.target)}: Any")
                elif isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    arguments = member.args.posonlyargs + member.args.args + member.args.kwonlyargs
                    if _mentions_any(member.returns) or any(_mentions_any(arg.annotation) for arg in arguments):
                        found.append(f"{member.lineno} {node.name}.{member.name}(…) typed Any")
    return found


def test_no_app_part_takes_the_window_as_any_or_a_protocol_typed_any():
    found = [f"{path.relative_to(ROOT).as_posix()}:{line}" for path in sorted((ROOT / "app").rglob("*.py"))
             if path.relative_to(ROOT).as_posix() not in WINDOW_ANY_ALLOWED for line in _reaching_into_the_window(path)]
    assert found == []


def test_the_window_any_allow_list_holds_only_files_that_still_need_it():
    stale = [name for name in WINDOW_ANY_ALLOWED if not (ROOT / name).is_file() or not _reaching_into_the_window(ROOT / name)]
    assert stale == [], "these no longer take the window as Any: remove them from WINDOW_ANY_ALLOWED"


def test_the_rule_against_reaching_into_the_window_sees_what_it_refuses(tmp_path):
    part = tmp_path / "part.py"
    part.write_text("from typing import Any, Protocol\n\n"
                    "class Host(Protocol):\n    controller: Any\n    def statusBar(self) -> Any: ...\n\n"
                    "class Part:\n    def __init__(self, window: Any) -> None: ...\n\n"
                    "class Fine:\n    def __init__(self, window: 'QMainWindow', facts: Any) -> None: ...\n",
                    encoding="utf-8")
    assert [line.split(" ", 1)[1] for line in _reaching_into_the_window(part)] == [
        "Host.controller: Any", "Host.statusBar(…) typed Any", "__init__(window: Any)"]


# ---------------------------------------------------------------- engine/'s floors (issue 42: each imports only those below)

# Bottom to top, drawn from the imports as they are (docs/DESIGN.md, "The engine's floors", prints the counts). A
# module may import its own floor and the floors below it. The loose modules are the ground: plain data and helpers
# every floor shares. Then shapes and formats; the native library; quantized weights; the fast model; files to a
# loaded model and the model library (each asks the other: a download is checked by the loader's safety, the loader
# lists what the library installed); one turn and its speculative decoding (the session drives the speculator, which
# samples as the session does); what a turn is extended with; the core holding the loaded models; its clients and the
# measuring tools; the command line on top. The package ``engine`` and ``engine.__main__`` are entry points.
ENGINE_FLOORS: tuple[tuple[str, ...], ...] = (
    ("engine.errors", "engine.inputs", "engine.fmt", "engine.paths", "engine.cpu", "engine.events", "engine._offline"),
    ("engine.shapes",),
    ("engine.native",),
    ("engine.quant",),
    ("engine.executor",),
    ("engine.library", "engine.models"),
    ("engine.generate", "engine.speculate"),
    ("engine.constrain", "engine.tools", "engine.docs", "engine.vision", "engine.remote"),
    ("engine.core",),
    ("engine.serve", "engine.lab", "engine.bench"),
    ("engine.cli", "engine.__main__"),
)
# The imports that run up a floor, each justified in the importing module's docstring (named in its comment).
ENGINE_UPWARD_ALLOWED = {
    # engine/bench/roofline_check.py's docstring: the chat side is exactly what `engine chat --json` prints, checked
    # from that command's own code
    "engine.bench.roofline_check imports engine.cli.replies",
}


def _engine_floor(module: str) -> int | None:
    for level, packages in enumerate(ENGINE_FLOORS):
        if any(module == package or module.startswith(package + ".") for package in packages):
            return level
    return None


def test_every_engine_module_lives_in_a_floor():
    assert sorted(name for name in _project_modules() if name.startswith("engine.") and _engine_floor(name) is None) \
        == []


def test_each_engine_module_imports_only_its_floor_or_those_below():
    modules = _project_modules()
    upward = {f"{name} imports {target}" for name, path in modules.items() if name.startswith("engine.")
              for target in _project_imports(path, modules) if target.startswith("engine.")
              and (_engine_floor(target) or 0) > (_engine_floor(name) or 0)}
    assert sorted(upward - set(ENGINE_UPWARD_ALLOWED)) == []
    assert sorted(set(ENGINE_UPWARD_ALLOWED) - upward) == []  # an entry no longer needed leaves the list


def _floor_cell(counts: dict[tuple[int, int], int], level: int, to: int) -> str:
    # "." the floor itself, "" no import, "^n" n imports up a floor, "n" n imports down
    if level == to:
        return "."
    count = counts.get((level, to))
    return "" if not count else f"^{count}" if to > level else str(count)


def engine_floor_drawing() -> str:
    """docs/DESIGN.md's drawing of the floors, from the imports as they are: per floor its modules, and how many
    imports each floor makes into each other floor (``^``: up). ``python -m tests.test_boundaries`` prints it."""
    modules = _project_modules()
    counts: dict[tuple[int, int], int] = {}
    sizes = [0] * len(ENGINE_FLOORS)
    for name, path in modules.items():
        if (floor := _engine_floor(name)) is None:
            continue
        sizes[floor] += 1
        for target in _project_imports(path, modules):
            if (to := _engine_floor(target)) is not None and to != floor:
                counts[floor, to] = counts.get((floor, to), 0) + 1
    names = [" ".join(package.removeprefix("engine.") for package in packages) for packages in ENGINE_FLOORS]
    width = max(len(name) for name in names)
    head = "".join(f"{level:>4}" for level in range(len(ENGINE_FLOORS)))
    lines = [f"{'':>3} {'floor':<{width}} {'modules':>7}  {head}  <- imports into floor"]
    for level in reversed(range(len(ENGINE_FLOORS))):
        cells = "".join(f"{_floor_cell(counts, level, to):>4}" for to in range(len(ENGINE_FLOORS)))
        lines.append(f"{level:>3} {names[level]:<{width}} {sizes[level]:>7}  {cells}".rstrip())
    return "\n".join(lines)

if __name__ == "__main__":
    print(engine_floor_drawing())
