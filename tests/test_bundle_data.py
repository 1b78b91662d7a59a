"""packaging/bundle_data.py against what requirements.lock installed: every run-time distribution is pinned in the lock,
and every file it ships that is not code is either bundled by the rule or of a kind only compilers and type checkers
read. Fast (metadata only, no PyInstaller run): it fails inside `make test` when a new or upgraded dependency ships a
file the frozen app would miss, before `make bundle-test` does (issue 39: kernels' python_depends.json)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packaging"))

import bundle_data  # noqa: E402  (packaging/ is not a package: the spec imports it the same way)
import lock  # noqa: E402


@pytest.fixture(scope="module")
def runtime():
    return bundle_data.runtime_distributions()


def test_the_runtime_closure_is_what_the_app_needs_and_not_its_tools(runtime):
    for name in ("transformers", "kernels", "torch", "pyside6-essentials", "certifi", "jsonschema-specifications"):
        assert name in runtime, name
    for tool in ("pytest", "pyinstaller", "uv"):
        assert tool not in runtime, tool


def test_every_runtime_distribution_is_pinned_in_the_lock_at_its_installed_version(runtime):
    pinned = lock.pins((ROOT / "requirements.lock").read_text(encoding="utf-8"))
    for key, dist in runtime.items():
        if key == bundle_data.ROOT_DISTRIBUTION:
            continue
        if key == "torch":  # installed by packaging/install_torch.py at the lock's `# torch:` pin
            assert dist.version.split("+")[0] == lock.TORCH.split("==")[1]
            continue
        assert dist.version in pinned.get(key, []), (key, dist.version, pinned.get(key))


def test_every_non_code_file_of_a_runtime_distribution_is_bundled_or_read_only_by_build_tools(runtime):
    missed = {}
    for key, dist in runtime.items():
        if key == bundle_data.ROOT_DISTRIBUTION or key in bundle_data.HOOKED:
            continue
        sources = {Path(source).resolve() for source, _dest in bundle_data.bundled(dist)}
        for relative in bundle_data.non_code_files(dist):
            if bundle_data.DEV_ONLY.search(str(relative)):
                continue
            if Path(dist.locate_file(relative)).resolve() not in sources:
                missed.setdefault(key, []).append(str(relative))
    assert not missed, missed


def test_files_are_bundled_where_the_library_reads_them():
    import kernels

    datas = dict(bundle_data.bundled(bundle_data.runtime_distributions()["kernels"]))
    source = Path(kernels.__file__).parent / "_internals" / "python_depends.json"
    assert datas[str(source)] == "kernels/_internals"


def test_the_rule_keeps_headers_stubs_and_scripts_out():
    dist = bundle_data.runtime_distributions()["numpy"]
    dests = [Path(source).suffix for source, _dest in bundle_data.bundled(dist)]
    assert ".pyi" not in dests and ".h" not in dests and ".c" not in dests
    assert bundle_data.bundled(bundle_data.runtime_distributions()["torch"]) == []  # its hook lays out its data


def test_the_lock_was_resolved_from_todays_pyproject():
    lock.check()  # raises LockError (stale / missing) with the command to run


def test_a_changed_dependency_list_makes_the_lock_stale(tmp_path):
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    changed = tmp_path / "pyproject.toml"
    changed.write_text(text.replace('"psutil>=6.0",', '"psutil>=6.0",\n    "rich>=13",'), encoding="utf-8")
    with pytest.raises(lock.LockError, match="stale"):
        lock.check(ROOT / "requirements.lock", changed)


def test_the_lock_leaves_torchs_build_to_install_torch():
    pinned = lock.pins((ROOT / "requirements.lock").read_text(encoding="utf-8"))
    assert not [name for name in pinned if lock.TORCH_BUILD_ONLY.match(name)]
    assert canonicalize_name("Transformers") in pinned and "uv" in pinned
