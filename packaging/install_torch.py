"""Install the torch build that fits this machine: what `make install` runs before the project itself.

Owns one decision and its install: a CUDA build where an NVIDIA GPU is present, a CPU build where none is.
It does not install the project or any other dependency (the Makefile's next step does, and pip then adds
torch's own dependencies from the normal index).

Why this exists: on Linux the torch wheels on PyPI are CUDA builds (~3 GB of downloads with the NVIDIA
libraries, ~6 GB installed); the CPU builds (~0.2 GB) are published on PyTorch's own CPU index with a local
version label (``2.9.1+cpu``). pip cannot be told "only +cpu builds" in a requirement, so the CPU case lists the
versions every configured source offers (``pip index versions`` with the CPU index added), keeps the newest
``+cpu`` one that satisfies the requested spec and installs exactly that (``--no-deps``: its dependencies come
with the project's install from the normal index). On Windows and macOS the PyPI wheels are already CPU builds
(Apple's GPU is reached through them), so the spec is installed as it is.

Usage (the Makefile passes its variables): ``python packaging/install_torch.py --spec "torch>=2.6" --build auto``.
``--build`` is ``auto`` (detect), ``cpu`` or ``cuda``; ``--dry-run`` prints the choice and installs nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CPU_INDEX = os.environ.get("TORCH_CPU_INDEX", "https://download.pytorch.org/whl/cpu")
BUILDS = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Choice:
    """What to install and why (printed, so a user sees which build they get before it downloads)."""

    build: str  # "cpu" or "cuda" (or "default": the platform's PyPI wheel, already right for it)
    requirement: str  # what pip is asked for
    pip_args: tuple[str, ...]
    reason: str


def nvidia_gpu_present() -> bool:
    """An NVIDIA GPU with its driver: the driver's /proc entry (Linux) or `nvidia-smi -L` naming a GPU."""
    if Path("/proc/driver/nvidia/gpus").is_dir() and any(Path("/proc/driver/nvidia/gpus").iterdir()):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def _packaging():
    """packaging's Version/SpecifierSet: the installed distribution if any, else the copy pip carries (a new
    venv has pip and nothing else, and this runs before anything is installed)."""
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ImportError:
        from pip._vendor.packaging.specifiers import SpecifierSet
        from pip._vendor.packaging.version import InvalidVersion, Version
    return SpecifierSet, Version, InvalidVersion


def split_spec(spec: str) -> str:
    """The version part of a requirement like ``torch>=2.6`` or ``torch==2.13.0`` (``""`` for bare ``torch``)."""
    match = re.fullmatch(r"\s*torch\s*(.*?)\s*", spec)
    if match is None:
        raise SystemExit(f"install_torch: TORCH_SPEC must name torch (e.g. torch>=2.6), not {spec!r}")
    return match.group(1)


def newest_cpu_build(versions: list[str], spec: str) -> str | None:
    """The newest ``+cpu`` version among ``versions`` that satisfies ``spec`` (local labels ignored by the
    specifier, as PEP 440 says), or None."""
    SpecifierSet, Version, InvalidVersion = _packaging()
    wanted = SpecifierSet(split_spec(spec))
    builds = []
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.local == "cpu" and wanted.contains(version, prereleases=False):
            builds.append(version)
    return str(max(builds)) if builds else None


def available_versions(python: str) -> list[str]:
    """Every torch version pip can reach from its configured sources plus the CPU index, newest first."""
    cmd = [python, "-m", "pip", "index", "versions", "torch", "--extra-index-url", CPU_INDEX, "--retries", "1",
           "--timeout", "15"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def choose(spec: str, build: str, python: str) -> Choice:
    if build == "auto":
        if sys.platform == "darwin":
            return Choice("default", spec, (), "macOS: PyPI's torch is the right build (CPU and Apple GPU)")
        build = "cuda" if nvidia_gpu_present() else "cpu"
        detected = "an NVIDIA GPU was found" if build == "cuda" else "no NVIDIA GPU was found"
    else:
        detected = f"TORCH_BUILD={build}"
    if build == "cuda" or not sys.platform.startswith("linux"):
        # Linux: PyPI's wheel is the CUDA build. Windows: PyPI's wheel is the CPU build; a CUDA one comes from
        # PyTorch's cuXXX index (packaging/README.md), which only the user can pick for their driver.
        what = "cuda" if sys.platform.startswith("linux") else "default"
        return Choice(what, spec, (), f"{detected}: {spec} from the package index")
    cpu = newest_cpu_build(available_versions(python), spec)
    if cpu is None:
        raise SystemExit(f"install_torch: {detected}, but no CPU build of torch matching {spec!r} is reachable "
                         f"(looked at the package index and {CPU_INDEX}); set TORCH_BUILD=cuda to take the CUDA "
                         "build instead (~3 GB), or TORCH_CPU_INDEX to another CPU index")
    return Choice("cpu", f"torch=={cpu}", ("--no-deps", "--extra-index-url", CPU_INDEX),
                  f"{detected}: the CPU build torch=={cpu} (~0.2 GB instead of ~3 GB of CUDA wheels)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="torch>=2.6")
    parser.add_argument("--build", default="auto", choices=BUILDS)
    parser.add_argument("--python", default=sys.executable, help="the venv's python (default: this one)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    choice = choose(args.spec, args.build, args.python)
    print(f"install_torch: {choice.reason}", file=sys.stderr)
    if args.dry_run:
        print(choice.build, choice.requirement, *choice.pip_args)
        return 0
    cmd = [args.python, "-m", "pip", "install", "--quiet", *choice.pip_args, choice.requirement]
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
