"""The packaging recipe's fast parts (packaging/): no PyInstaller run here, that is `make package-test`.

Checks what can go wrong without freezing: the spec parses and names the data the issue requires, the
runtime hook finds the bundled model only when the user has none, the launcher refuses to act as a
Python interpreter, the bitsandbytes hook keeps the CPU library, the icon renders, and the .deb pieces
are consistent (desktop entry keys, launcher target, Depends list).
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spec_parses_and_names_required_contents():
    source = (PACKAGING / "miaohui.spec").read_text(encoding="utf-8")
    ast.parse(source)
    for required in ('"transformers": "pyz+py"', "copy_metadata", 'f"models/{MODEL.name}"', '"assets"',
                     "pyi_rth_miaohui.py", "collect_submodules(\"engine\")", "BUNDLE(", "contents_directory",
                     '"i18n"', "lrelease"):
        assert required in source, required
    # Metadata and data files by rule (packaging/bundle_data.py), never a list kept by hand.
    assert "datas_and_metadata()" in source and "METADATA =" not in source


def test_spec_bundles_the_native_library_where_the_frozen_app_loads_it(monkeypatch, tmp_path):
    """The spec puts engine/native/build/miaohui_native.so (what `make install` builds) in the bundle folder that
    engine/native/library.py reads under sys._MEIPASS; a library of an older name is not bundled."""
    from engine.native import library

    source = (PACKAGING / "miaohui.spec").read_text(encoding="utf-8")
    built = library.HERE.relative_to(ROOT) / "build" / f"{library.NAME}.so"
    assert " / ".join(f'"{part}"' for part in built.parts) in source
    assert '"engine/native/build"' in source and "miaohui_int4" not in source
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert library.library_path() == tmp_path / "engine" / "native" / "build" / f"{library.NAME}.so"


def _fake_model(folder: Path) -> Path:
    from engine.models.fetch import MARKER

    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")
    (folder / MARKER).write_text("{}", encoding="utf-8")
    return folder


def _resolve_in_frozen_process(meipass: Path, home: Path) -> dict:
    """Run the runtime hook as the frozen app would (sys._MEIPASS set) and report what the engine sees."""
    code = (
        "import json, os, runpy, sys\n"
        f"sys._MEIPASS = {str(meipass)!r}\n"
        f"runpy.run_path({str(PACKAGING / 'pyi_rth_miaohui.py')!r})\n"
        "from engine.models.fetch import find_default_model\n"
        "print(json.dumps({'default': str(find_default_model()),"
        " 'env': os.environ.get('MIAOHUI_BUNDLED_MODELS')}))\n"
    )
    env = {"MIAOHUI_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_runtime_hook_resolves_bundled_model_only_without_a_user_copy(tmp_path):
    from engine.paths import DEFAULT_MODEL_NAME

    meipass = tmp_path / "_internal"
    bundled = _fake_model(meipass / "models" / DEFAULT_MODEL_NAME)
    home = tmp_path / "home"
    seen = _resolve_in_frozen_process(meipass, home)
    assert seen["env"] == str(meipass / "models")
    assert seen["default"] == str(bundled)
    assert not (home / "models" / DEFAULT_MODEL_NAME).exists()  # nothing copied into the user's data dir

    own = _fake_model(home / "models" / DEFAULT_MODEL_NAME)
    assert _resolve_in_frozen_process(meipass, home)["default"] == str(own)


def test_runtime_hook_is_inert_without_a_bundled_model(tmp_path):
    home = tmp_path / "home"
    seen = _resolve_in_frozen_process(tmp_path / "_internal", home)
    assert seen["env"] is None
    assert seen["default"] == "None"  # no user copy, nothing bundled: nothing to load


@pytest.mark.parametrize("argv", [["-m", "pip", "download", "x"], ["-c", "print(1)"]])
def test_launcher_refuses_to_act_as_python(argv, capsys):
    launcher = _load(PACKAGING / "miaohui_launcher.py", "miaohui_launcher")
    assert launcher.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("miaohui: ") and len(err.strip().splitlines()) == 1


def test_bitsandbytes_hook_keeps_cpu_library_and_usable_gpu_families():
    source = (PACKAGING / "hooks" / "hook-bitsandbytes.py").read_text(encoding="utf-8")
    # Evaluate only the selection rule (the hook's top level asks torch, which is slow to import).
    rule = [n for n in ast.parse(source).body if isinstance(n, ast.ImportFrom) and n.module == "pathlib"
            or isinstance(n, ast.FunctionDef) and n.name == "_wanted"]
    namespace: dict = {}
    exec(compile(ast.Module(body=rule, type_ignores=[]), "hook-bitsandbytes", "exec"), namespace)
    wanted = namespace["_wanted"]
    cpu_only, cuda = ("cpu",), ("cpu", "cuda")
    assert wanted("/x/bitsandbytes/libbitsandbytes_cpu.so", cpu_only)
    assert not wanted("/x/bitsandbytes/libbitsandbytes_cuda128.so", cpu_only)
    assert not wanted("/x/bitsandbytes/libbitsandbytes_rocm72.so", cpu_only)
    assert wanted("/x/bitsandbytes/libbitsandbytes_cuda128.so", cuda)
    assert not wanted("/x/bitsandbytes/libbitsandbytes_xpu2026.so", cuda)


def test_icon_renders_from_the_svg(qapp, tmp_path):  # qapp: the session QApplication, not a bare Gui one
    from PySide6.QtGui import QImage

    render = _load(PACKAGING / "render_icon.py", "render_icon").render
    png = render(ROOT / "assets" / "miaohui.svg", tmp_path / "icon.png", 64)
    image = QImage(str(png))
    assert (image.width(), image.height()) == (64, 64)
    assert image.pixelColor(32, 32).alpha() == 255  # the drawing, not an empty canvas
    assert image.pixelColor(0, 0).alpha() == 0  # transparent corner of the rounded square


def test_deb_pieces_are_consistent():
    desktop = configparser.ConfigParser(interpolation=None)
    desktop.optionxform = str  # keys are case-sensitive
    desktop.read(PACKAGING / "deb" / "miaohui.desktop", encoding="utf-8")
    entry = desktop["Desktop Entry"]
    assert entry["Type"] == "Application" and entry["Exec"].split()[0] == "miaohui" and entry["Icon"] == "miaohui"
    assert "exec /opt/miaohui/miaohui \"$@\"" in (PACKAGING / "deb" / "miaohui.sh").read_text(encoding="utf-8")
    control = (PACKAGING / "deb" / "control.in").read_text(encoding="utf-8")
    for field in ("Package: miaohui", "Version: @VERSION@", "Architecture: @ARCH@", "Depends: @DEPENDS@",
                  "Installed-Size: @INSTALLED_SIZE@", "Maintainer: ", "Description: "):
        assert field in control, field
    depends = [line.strip() for line in (PACKAGING / "deb" / "depends.txt").read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith("#")]
    # Qt's xcb platform plugin and the GL stack are what PyInstaller leaves to the system.
    for package in ("libxcb1", "libxcb-cursor0", "libxkbcommon-x11-0", "libegl1", "libgl1", "libfontconfig1",
                    "libdbus-1-3"):
        assert package in depends, package


class _Recorded:
    """Stands in for one of PyInstaller's build steps (Analysis, PYZ, EXE, COLLECT, BUNDLE): records its arguments.

    The spec's own logic (what goes in, platform branches, icons, translations) runs for real; only the freezing
    is not done, so the Windows and macOS branches are evaluated here on Linux."""

    calls: list[tuple[str, tuple, dict]] = []

    def __init__(self, kind: str):
        self.kind = kind

    def __call__(self, *args, **kwargs):
        _Recorded.calls.append((self.kind, args, kwargs))
        result = type(self.kind, (), {})()
        if self.kind == "Analysis":
            result.binaries, result.datas, result.pure, result.scripts = [], list(kwargs["datas"]), [], []
        return result


@pytest.mark.parametrize("platform", ["linux", "win32", "darwin"])
def test_the_spec_evaluates_on_each_platform(platform, tmp_path, monkeypatch, qapp):
    import types

    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_data_files = lambda package, **_: []
    hooks.collect_submodules = lambda package, **_: [package]
    hooks.copy_metadata = lambda dist, **_: []
    for name in ("PyInstaller", "PyInstaller.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setenv("MIAOHUI_BUNDLE_MODEL", "none")
    # The Windows branch looks for lrelease.exe / pyside6-lrelease.exe: this Linux venv has them without .exe.
    tools = tmp_path / "tools"
    tools.mkdir()
    real = Path(sys.executable).parent / "pyside6-lrelease"
    (tools / ("pyside6-lrelease.exe" if platform == "win32" else "pyside6-lrelease")).symlink_to(real)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("PATHEXT", ".exe")  # shutil.which's Windows branch, on this case-sensitive file system
    _Recorded.calls = []
    namespace = {"SPECPATH": str(PACKAGING), "workpath": str(tmp_path), "__file__": str(PACKAGING / "miaohui.spec")}
    namespace.update({kind: _Recorded(kind) for kind in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")})
    monkeypatch.setattr(sys, "path", list(sys.path))  # the spec prepends the repository and packaging/
    exec(compile((PACKAGING / "miaohui.spec").read_text(encoding="utf-8"), "miaohui.spec", "exec"), namespace)

    kinds = [kind for kind, _args, _kwargs in _Recorded.calls]
    exes = [kwargs for kind, _args, kwargs in _Recorded.calls if kind == "EXE"]
    assert kinds.count("Analysis") == 1 and kinds.count("COLLECT") == 1
    if platform == "win32":
        # A windowed miaohui.exe and a console twin for --version / --self-test / engine CLI output.
        assert [exe["name"] for exe in exes] == ["miaohui", "miaohui-console"]
        assert [exe["console"] for exe in exes] == [False, True]
    else:
        assert [exe["name"] for exe in exes] == ["miaohui"]
    assert ("BUNDLE" in kinds) is (platform == "darwin")
    icon = exes[0]["icon"]
    if platform == "linux":
        assert icon is None  # the .desktop entry names the icon
    else:
        assert len(icon) == 1 and Path(icon[0]).suffix == ".png" and Path(icon[0]).is_file()
    analysis = next(kwargs for kind, _args, kwargs in _Recorded.calls if kind == "Analysis")
    assert Path(analysis["runtime_hooks"][0]).is_file() and Path(analysis["hookspath"][0]).is_dir()
    assert any(dest == "assets" for _src, dest in analysis["datas"])
    assert any(dest == "engine/bench/data" and Path(src).is_dir() for src, dest in analysis["datas"])  # the Lab's texts
    # the file whose absence stopped the frozen app from loading any model (issue 39)
    assert any(src.endswith("python_depends.json") and dest == "kernels/_internals" for src, dest in analysis["datas"])
    assert (ROOT / "assets" / "i18n" / "miaohui_zh_CN.qm").is_file()  # lrelease ran


def _report(**changes) -> dict:
    report = {"ok": True, "checks": {"reply_streamed": True}, "generated_tokens": 16, "model": "SmolLM2-135M-Instruct",
              "device": "cpu", "precision": "int4", "decode_step": "native"}
    return {**report, **changes}


def test_the_self_test_verdict_asks_a_quantized_cpu_model_for_the_native_step():
    """A frozen app whose int4 model fell back to the Python step (slower by ~7x: a CPU without native bf16 did
    so once, unseen, because the report only printed the rate) fails the packaged self-test, with the reason."""
    check = _load(PACKAGING / "check_self_test.py", "check_self_test")
    assert check.verdict(_report()) is None
    slow = check.verdict(_report(decode_step="python: projections not in the int8-activation kernels' tiles"))
    assert slow is not None and "Python step" in slow and "tiles" in slow
    assert "Python step" in check.verdict(_report(precision="int8", decode_step=None))
    # Float weights and a GPU have no native step to ask for.
    assert check.verdict(_report(precision="bf16", decode_step=None)) is None
    assert check.verdict(_report(device="cuda", decode_step="python: a CUDA device")) is None
    assert "not the bundled" in check.verdict(_report(model="other"))
