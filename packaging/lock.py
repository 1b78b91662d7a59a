"""Write requirements.lock: every distribution Miaohui installs, pinned, with hashes (what `make install` reads).

Owns the lock's making and its freshness check; it installs nothing (the Makefile does, with
``pip install --require-hashes --no-deps -r requirements.lock``) and does not choose torch's build
(packaging/install_torch.py does: a CUDA or a CPU build of the pinned torch version, per machine).

Why uv (``uv pip compile --universal``) and not pip-tools: the app ships on Linux, Windows and macOS, and one
universal resolution writes a single lock whose environment markers cover all three (pip-compile resolves for the
machine it runs on only, so a Windows user would meet pins for Linux-only packages and miss pywin32's). uv is
itself pinned in the lock (the ``lock`` extra), so a refresh uses the same resolver as the last one.

What the lock leaves out, on purpose: torch and the packages only its CUDA build pulls in (``nvidia-*``,
``cuda-*``, ``triton``). Which of those a machine needs depends on its GPU, so install_torch.py installs the
pinned torch (recorded in the lock's ``# torch:`` line, which the Makefile reads as its TORCH_SPEC) and, for a
CUDA build, that build's own runtime. torch's platform-independent dependencies (sympy, networkx, jinja2 ...)
stay in the lock, hashed.

The lock records the SHA-256 of the project's dependency lists (``# inputs:``), so ``--check`` (run by
tests/test_lock.py inside `make test`) fails when pyproject.toml changed and the lock was not refreshed.

A refresh starts from the current lock's pins (uv's preference for an existing output file): only what a changed
input needs moves. ``--upgrade`` resolves everything to the newest allowed releases instead (a deliberate upgrade).

Usage: ``python packaging/lock.py [--upgrade]`` (refresh; `make lock` also runs the tests on it), ``--check``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
# The torch version every install gets: the one CI and the bundle were tested with. Change it here, then refresh.
TORCH = "torch==2.13.0"
EXTRAS = ("test", "package", "lock")
PYTHON = "3.11"  # the oldest Python the project supports (requires-python); markers cover newer ones
# Installed with torch by install_torch.py, for the build that fits the machine, never from the lock.
TORCH_BUILD_ONLY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


class LockError(RuntimeError):
    """The lock is missing, stale, or could not be written."""


def inputs_digest(pyproject: Path = PYPROJECT) -> str:
    """SHA-256 of what the lock is resolved from: the dependency lists, the extras locked and the torch pin."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    inputs = {
        "dependencies": sorted(project["dependencies"]),
        "extras": {name: sorted(project["optional-dependencies"][name]) for name in EXTRAS},
        "torch": TORCH,
        "python": PYTHON,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def pins(text: str) -> dict[str, list[str]]:
    """Distribution name (normalized) -> the versions pinned for it (two where markers split a package by Python)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
            found.setdefault(name, []).append(match.group(2))
    return found


def header_value(text: str, key: str) -> str | None:
    """The value of a ``# key: value`` header line."""
    for line in text.splitlines():
        if line.startswith(f"# {key}: "):
            return line.split(": ", 1)[1].split(" ", 1)[0]
    return None


def _compile(out: Path, no_emit: list[str]) -> None:
    cmd = [sys.executable, "-m", "uv", "pip", "compile", str(PYPROJECT), "--universal", "--python-version", PYTHON,
           "--generate-hashes", "--no-header", "--quiet", "--override", str(out.with_suffix(".torch")), "-o", str(out)]
    for extra in EXTRAS:
        cmd += ["--extra", extra]
    for name in no_emit:
        cmd += ["--no-emit-package", name]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        raise LockError(f"uv pip compile failed: {result.stderr.strip().splitlines()[-1:]}")


def write_lock(upgrade: bool = False) -> str:
    """Resolve and write requirements.lock (from its current pins unless ``upgrade``); returns its text."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lock.txt"
        out.with_suffix(".torch").write_text(TORCH + "\n", encoding="utf-8")
        if LOCK.is_file() and not upgrade:
            # uv keeps the pins of an existing output file unless they no longer satisfy the inputs: a refresh after
            # adding one dependency moves only what it must, never every package to its newest release.
            out.write_text(LOCK.read_text(encoding="utf-8"), encoding="utf-8")
        # Pass 1 finds which packages torch's build brings; pass 2 resolves the same set and leaves them out.
        _compile(out, [])
        excluded = sorted(name for name in pins(out.read_text(encoding="utf-8")) if TORCH_BUILD_ONLY.match(name))
        _compile(out, excluded)
        body = out.read_text(encoding="utf-8")
    header = (
        "# Miaohui's lock: every distribution `make install` installs, pinned with hashes, for Linux, Windows and\n"
        "# macOS (environment markers). Written by `python packaging/lock.py` (uv pip compile --universal); refresh\n"
        "# with `make lock`, which also runs the tests. Do not edit by hand.\n"
        f"# torch: {TORCH} (installed by packaging/install_torch.py: the CPU or CUDA build that fits the machine)\n"
        f"# inputs: {inputs_digest()}\n"
        f"# left to torch's build: {', '.join(excluded)}\n"
    )
    text = header + body
    LOCK.write_text(text, encoding="utf-8")
    return text


def check(lock: Path = LOCK, pyproject: Path = PYPROJECT) -> None:
    """Raise LockError unless the lock exists and was resolved from today's pyproject.toml and torch pin."""
    if not lock.is_file():
        raise LockError(f"{lock.name} is missing: run `make lock`")
    text = lock.read_text(encoding="utf-8")
    if header_value(text, "inputs") != inputs_digest(pyproject):
        raise LockError(f"{lock.name} is stale: pyproject.toml's dependencies or the torch pin changed since it "
                        "was written; run `make lock`")
    if header_value(text, "torch") != TORCH:
        raise LockError(f"{lock.name} names {header_value(text, 'torch')}, packaging/lock.py {TORCH}: run `make lock`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only verify the lock is fresh; write nothing")
    parser.add_argument("--upgrade", action="store_true",
                        help="resolve every package to its newest allowed release (default: keep the current pins)")
    args = parser.parse_args(argv)
    try:
        if args.check:
            check()
            print(f"{LOCK.name} is fresh")
        else:
            text = write_lock(upgrade=args.upgrade)
            print(f"wrote {LOCK.name}: {len(pins(text))} distributions pinned with hashes")
    except LockError as error:
        print(f"lock: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
