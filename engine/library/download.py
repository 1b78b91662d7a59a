"""Download a model from the Hub into the data dir's ``models/`` folder: resumable, verified, atomic.

``download(repo, file=..., allow_downloads=...)`` plans the files (``engine.library.hub``) and transfers them:

- Every name in the plan is checked first (``engine.models.safety.member_path``): one that could land outside
  the model's folder is ``UnsafeModelError`` before any folder is made or byte requested, and each file is
  written only below the work folder, never through a link found on the way.
- Free disk is checked first: what is still to fetch must fit in the free space of ``models/`` with a margin, or
  ``NoSpaceError`` (one line: how much to free) is raised before any weights are requested.
- Everything happens in a hidden work folder ``models/.download-<owner>--<name>[--<gguf>]`` (the model picker
  and ``engine.models.catalog`` skip hidden folders): each file streams into ``<file>.part`` with HTTP ``Range``
  from where an earlier, interrupted run stopped (a server that ignores the range restarts the file), through
  huggingface_hub's session so its offline switch and headers apply.
- Each file is verified before it counts: weights against the Hub's LFS sha256, small files against their git
  blob id (sha1 of ``blob <size>\\0`` + content). A mismatch discards that file and raises ``HubError``.
- Once all files are verified, ``engine.models.safety``'s checks run on the folder (headers, remote code, config
  against weights), a ``miaohui-download.json`` record is written, and the folder is renamed into place in one
  step. An interrupted or failed download therefore never leaves a half model in the list.
- ``cancel`` (a ``threading.Event``) stops within one chunk and removes the work folder; ``pause`` stops the same
  way but keeps the ``.part`` files, so the next ``download`` of the same files resumes. Both raise
  ``CancelledError``. ``progress`` gets a ``DownloadProgress`` (bytes done and total, speed, time left) per chunk.

Owns the transfer, the checks on the way in and the work folder. Not what to download (``hub``), nor listing or
deleting (``installed``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx2  # huggingface_hub's HTTP client
import psutil
from huggingface_hub import get_session, hf_hub_url
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from engine import paths
from engine.errors import BadInputError, CancelledError, DataDirError, HubError, UnsafeModelError, printable
from engine.fmt import format_bytes, one_line
from engine.library import access, hub
from engine.library.access import check_repo_id, online
from engine.library.hub import DownloadPlan, RemoteFile
from engine.models import safety
from engine.models.fetch import NoSpaceError

WORK_PREFIX = ".download-"
STATE = "download.json"  # in the work folder: the plan being fetched
OWNER = "owner.pid"
RECORD = "miaohui-download.json"  # in the finished model folder: where it came from
DONE = "files"  # verified files wait here until the folder is renamed into place
CHUNK_BYTES = 1 << 20
DISK_MARGIN = 64 << 20
SPEED_WINDOW_S = 3.0

_ACTIVE: set[str] = set()  # work folders this process is downloading into
_ACTIVE_LOCK = threading.Lock()


@dataclass(frozen=True)
class DownloadProgress:
    file: str
    file_done: int
    file_total: int
    done: int  # all files
    total: int
    speed_bytes_s: float | None  # over the last few seconds; None at the very start
    eta_s: float | None


@dataclass(frozen=True)
class DownloadResult:
    repo: str
    revision: str
    path: str  # the model to load: its folder, or the .gguf file
    files: tuple[str, ...]
    total_bytes: int
    transferred_bytes: int  # over the network in this run
    resumed_bytes: int  # already on disk from an earlier run


ProgressFn = Callable[[DownloadProgress], None]


def work_dir(plan: DownloadPlan, root: Path | None = None) -> Path:
    """The hidden folder a plan's download works in (the same for every run of the same files), in ``root``
    (default: the models folder)."""
    suffix = f"--{Path(plan.local_name(plan.files[0])).stem}" if plan.kind == "gguf" else ""
    return (root or paths.models_dir()) / f"{WORK_PREFIX}{plan.folder_name}{suffix}"


def _target(plan: DownloadPlan, root: Path | None = None) -> Path:
    folder = (root or paths.models_dir()) / plan.folder_name
    return folder / plan.local_name(plan.files[0]) if plan.kind == "gguf" else folder


def _check_names(plan: DownloadPlan) -> None:
    """Every name the plan would write, judged before anything is made (the plan may not come from ``hub``)."""
    safety.member_path(Path(), plan.folder_name, plan.repo)
    for remote in plan.files:
        safety.member_path(Path(), remote.name, plan.repo)
        safety.member_path(Path(), plan.local_name(remote), plan.repo)


def _write_path(root: Path, name: str, plan: DownloadPlan) -> Path:
    """``root``/``name`` with its folders made, one by one so that no link on the way is followed out of ``root``."""
    path = safety.member_path(root, name, plan.repo)
    at = root
    for step in (*path.relative_to(root).parts[:-1], None):
        if at.is_symlink():
            raise UnsafeModelError(f"refused {plan.repo}: {name} would be written through the link {printable(at)}")
        if step is None:
            break
        at = at / step
        if not at.is_symlink():
            at.mkdir(exist_ok=True)
    if path.is_symlink():
        raise UnsafeModelError(f"refused {plan.repo}: {name} would be written through the link {printable(path)}")
    return path


class _Digest:
    """The hash a file is verified with: its LFS sha256, else its git blob id."""

    def __init__(self, remote: RemoteFile) -> None:
        self.remote = remote
        self.kind = "sha256" if remote.sha256 else "git blob id"
        self.expected = (remote.sha256 or remote.blob_id or "").lower()
        self._hash = hashlib.sha256() if remote.sha256 else hashlib.sha1(b"blob %d\0" % remote.size)  # noqa: S324

    def update(self, data: bytes) -> None:
        self._hash.update(data)

    def matches(self) -> tuple[bool, str]:
        got = self._hash.hexdigest()
        return got == self.expected, got


class _Meter:
    """Bytes done, speed over a sliding window, time left."""

    def __init__(self, total: int, done: int, progress: ProgressFn | None) -> None:
        self.total, self.done, self.progress = total, done, progress
        self.samples: deque[tuple[float, int]] = deque([(time.monotonic(), done)])

    def add(self, count: int, remote: RemoteFile, file_done: int) -> None:
        self.done += count
        now = time.monotonic()
        self.samples.append((now, self.done))
        while len(self.samples) > 2 and now - self.samples[0][0] > SPEED_WINDOW_S:
            self.samples.popleft()
        span = now - self.samples[0][0]
        speed = (self.done - self.samples[0][1]) / span if span >= 0.2 else None
        eta = (self.total - self.done) / speed if speed else None
        if self.progress is not None:
            self.progress(DownloadProgress(remote.name, file_done, remote.size, self.done, self.total, speed, eta))


def _claim(work: Path) -> None:
    """Mark ``work`` as this process's; another live process (or thread) downloading it is ``BadInputError``."""
    key = str(work)
    with _ACTIVE_LOCK:
        if key in _ACTIVE:
            raise BadInputError(f"{work.name.removeprefix(WORK_PREFIX)} is already being downloaded")
        owner = work / OWNER
        try:
            pid = int(owner.read_text().strip())
        except (OSError, ValueError):
            pid = None
        if pid is not None and pid != os.getpid() and psutil.pid_exists(pid):
            raise BadInputError(f"{work.name.removeprefix(WORK_PREFIX)} is already being downloaded by process {pid}")
        owner.write_text(str(os.getpid()))
        _ACTIVE.add(key)


def _release(work: Path) -> None:
    with _ACTIVE_LOCK:
        _ACTIVE.discard(str(work))
    try:
        (work / OWNER).unlink()
    except OSError:
        pass


def _prepare(work: Path, plan: DownloadPlan) -> None:
    """Create the work folder; parts from a different plan (another commit, other files) are discarded."""
    state = {"repo": plan.repo, "revision": plan.revision, "kind": plan.kind, "folder_name": plan.folder_name,
             "gguf_name": plan.gguf_name, "endpoint": plan.endpoint,
             "files": [{"name": f.name, "size": f.size, "sha256": f.sha256, "blob_id": f.blob_id} for f in plan.files]}
    try:
        old = json.loads((work / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = None
    if old is not None and {k: v for k, v in old.items() if k != "endpoint"} != \
            {k: v for k, v in state.items() if k != "endpoint"}:
        for child in work.iterdir():
            if child.name != OWNER:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    (work / DONE).mkdir(parents=True, exist_ok=True)
    tmp = work / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
    os.replace(tmp, work / STATE)


def _on_disk(work: Path, local: str, size: int) -> int:
    """Bytes of the file saved as ``local`` already here: its whole ``size`` once verified, else its part's."""
    if safety.name_problem(local) is not None:
        return 0
    done = work / DONE / local
    if done.is_file() and done.stat().st_size == size:
        return size
    part = work / f"{local}.part"
    held = part.stat().st_size if part.is_file() else 0
    return held if held <= size else 0


def held_bytes(work: Path) -> tuple[int, int | None]:
    """Bytes of a work folder's saved plan already on disk and the plan's total (None when unreadable): the
    files' bytes only, never the bookkeeping beside them, so never more than the total."""
    state = read_state(work) or {}
    files = [f for f in state.get("files") or () if isinstance(f, dict) and isinstance(f.get("name"), str)
             and isinstance(f.get("size"), int) and f["size"] >= 0]
    if not files:
        return 0, None
    kind, gguf = str(state.get("kind")), state.get("gguf_name") if isinstance(state.get("gguf_name"), str) else ""
    total = sum(f["size"] for f in files)
    return min(sum(_on_disk(work, hub.local_name(kind, gguf, f["name"]), f["size"]) for f in files), total), total


def _check_disk(plan: DownloadPlan, have: int) -> None:
    needed = plan.total_bytes - have
    folder = paths.models_dir()
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # cannot tell: the writes themselves will say
    if needed + DISK_MARGIN > free:
        raise NoSpaceError(f"not enough disk space for {plan.repo} in {printable(folder)}: it needs "
                           f"{format_bytes(needed)} more and {format_bytes(free)} is free: free "
                           f"{format_bytes(needed + DISK_MARGIN - free)} there and pull again")


def _disk_error(exc: OSError, plan: DownloadPlan) -> Exception:
    """A failed write in the models folder as one line; what was verified so far stays for a resume."""
    folder = printable(paths.models_dir())
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return NoSpaceError(f"no space left in {folder} while downloading {plan.repo}: free some space and pull "
                            "again to resume")
    return DataDirError(f"cannot write the download of {plan.repo} in {folder}: {exc.strerror or exc}")


def _stopped(cancel: threading.Event | None, pause: threading.Event | None) -> bool:
    return bool((cancel is not None and cancel.is_set()) or (pause is not None and pause.is_set()))


def _fetch(plan: DownloadPlan, remote: RemoteFile, work: Path, meter: _Meter, cancel: threading.Event | None,
           pause: threading.Event | None, chunk_bytes: int) -> int:
    """Bring ``remote`` to ``work/files`` verified; return the bytes transferred."""
    local = plan.local_name(remote)
    done_path = _write_path(work / DONE, local, plan)
    if done_path.is_file() and done_path.stat().st_size == remote.size:
        return 0
    part = _write_path(work, f"{local}.part", plan)
    offset = _on_disk(work, local, remote.size)
    digest = _Digest(remote)
    if offset:
        with part.open("rb") as handle:
            while block := handle.read(CHUNK_BYTES):
                digest.update(block)
    transferred = 0
    if offset < remote.size:
        url = hf_hub_url(plan.repo, remote.name, revision=plan.revision, endpoint=plan.endpoint)
        headers = build_hf_headers(token=access.auth_token(url))  # pull's token, to the plan's endpoint only
        if offset:
            headers["Range"] = f"bytes={offset}-"
        with get_session().stream("GET", url, headers=headers, timeout=hub.TIMEOUT_S) as response:
            hf_raise_for_status(response)
            if offset and response.status_code != 206:  # the server ignored the range: start the file again
                offset, digest = 0, _Digest(remote)
                meter.done -= _on_disk(work, local, remote.size)
            elif offset and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
                raise HubError(f"{plan.endpoint} answered a request for {remote.name} from byte {offset:,} with "
                               "another range: run the pull again")
            with part.open("r+b" if offset else "wb") as handle:
                handle.seek(offset)
                handle.truncate()
                file_done = offset
                for block in response.iter_bytes(chunk_bytes):
                    if file_done + len(block) > remote.size:
                        raise HubError(f"{plan.repo}/{remote.name} is longer than the {remote.size:,} bytes the Hub "
                                       "lists: refused")
                    handle.write(block)
                    digest.update(block)
                    file_done += len(block)
                    transferred += len(block)
                    meter.add(len(block), remote, file_done)
                    if _stopped(cancel, pause):
                        break
                handle.flush()
                os.fsync(handle.fileno())
        if _stopped(cancel, pause):
            return transferred
        if file_done != remote.size:
            raise HubError(f"the download of {plan.repo}/{remote.name} ended at {file_done:,} of {remote.size:,} "
                           "bytes: run the same pull again to resume")
    ok, got = digest.matches()
    if not ok:
        part.unlink(missing_ok=True)
        raise HubError(f"{plan.repo}/{remote.name} failed verification: its {digest.kind} is {got[:16]}… but the Hub "
                       f"lists {digest.expected[:16]}…; the file was discarded and nothing was installed")
    os.replace(part, done_path)
    return transferred


def _check_and_record(plan: DownloadPlan, work: Path) -> None:
    """The engine's file checks on the verified folder, then the record of where it came from."""
    files = work / DONE
    if plan.kind == "gguf":
        safety.check_gguf(files / plan.local_name(plan.files[0]))
    else:
        safety.check_source(files)
    record = {"repo": plan.repo, "revision": plan.revision, "endpoint": plan.endpoint, "kind": plan.kind,
              "downloaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "files": [{"name": f.name, "size": f.size, "sha256": f.sha256, "blob_id": f.blob_id} for f in plan.files]}
    name = RECORD if plan.kind == "safetensors" else f"{plan.local_name(plan.files[0])}.{RECORD}"
    (files / name).write_text(json.dumps(record, indent=1), encoding="utf-8")


def _install(plan: DownloadPlan, work: Path, root: Path | None = None) -> Path:
    """Make the verified files visible in one rename: the folder, or the GGUF file into an existing folder."""
    target = _target(plan, root)
    folder = (root or paths.models_dir()) / plan.folder_name
    if not folder.exists():
        os.rename(work / DONE, folder)
    elif plan.kind == "gguf" and folder.is_dir() and not (folder / "config.json").exists() and not target.exists():
        record = f"{target.name}.{RECORD}"
        os.replace(work / DONE / record, folder / record)
        os.replace(work / DONE / target.name, target)
    else:
        raise BadInputError(f"{printable(folder)} appeared while downloading: remove it and pull again")
    shutil.rmtree(work, ignore_errors=True)
    return target


def pull(plan: DownloadPlan, *, allow_downloads: bool, progress: ProgressFn | None = None,
         cancel: threading.Event | None = None, pause: threading.Event | None = None,
         chunk_bytes: int = CHUNK_BYTES, token: str | None = None, root: Path | None = None) -> DownloadResult:
    """Transfer, verify and install the files of ``plan`` (see the module docstring). ``token``: a Hugging Face
    token for a gated model, sent to the plan's endpoint only and kept out of the plan saved in the work folder.
    ``root``: the folder the model's folder goes in (default: the models folder; an embedding model goes in the
    embedders folder, engine/docs/embed_hub.py, so the chat model picker never lists it)."""
    _check_names(plan)
    target = _target(plan, root)
    if target.exists():
        raise BadInputError(f"{plan.repo} is already installed at {printable(target)}: remove it first "
                            f"(python -m engine models rm {plan.folder_name})")
    work = work_dir(plan, root)
    with online(allow_downloads, plan.endpoint, token):
        try:
            work.mkdir(parents=True, exist_ok=True)
            _claim(work)
        except OSError as exc:
            raise _disk_error(exc, plan) from None
        try:
            _prepare(work, plan)
            have = sum(_on_disk(work, plan.local_name(f), f.size) for f in plan.files)
            _check_disk(plan, have)
            meter = _Meter(plan.total_bytes, have, progress)
            transferred = 0
            for remote in plan.files:
                transferred += _fetch(plan, remote, work, meter, cancel, pause, chunk_bytes)
                if _stopped(cancel, pause):
                    break
            if cancel is not None and cancel.is_set():
                shutil.rmtree(work, ignore_errors=True)
                raise CancelledError(f"the download of {plan.repo} was cancelled; nothing was installed")
            if pause is not None and pause.is_set():
                raise CancelledError(f"the download of {plan.repo} is paused at {format_bytes(meter.done)} of "
                                     f"{format_bytes(plan.total_bytes)}: pull it again to resume")
            try:
                _check_and_record(plan, work)
            except Exception:
                shutil.rmtree(work, ignore_errors=True)  # verified bytes that the engine refuses: keep nothing
                raise
            path = _install(plan, work, root)
        except httpx2.TransportError as exc:  # the connection failed mid-file: the .part files stay
            raise HubError(f"the download of {plan.repo} from {plan.endpoint} stopped "
                           f"({one_line(exc, max_chars=120, name_type=True)}): pull it again to resume") from None
        except OSError as exc:
            if isinstance(exc, HfHubHTTPError):
                raise
            raise _disk_error(exc, plan) from None
        finally:
            _release(work)
    return DownloadResult(plan.repo, plan.revision, str(path), tuple(f.name for f in plan.files), plan.total_bytes,
                          transferred, have)


def download(repo: str, *, file: str | None = None, allow_downloads: bool, endpoint: str | None = None,
             progress: ProgressFn | None = None, cancel: threading.Event | None = None,
             pause: threading.Event | None = None, chunk_bytes: int = CHUNK_BYTES,
             token: str | None = None) -> DownloadResult:
    """Plan and pull ``repo`` (or its GGUF ``file``) into the models folder; see ``pull``."""
    check_repo_id(repo)
    plan = hub.plan_download(repo, file=file, allow_downloads=allow_downloads, endpoint=endpoint, token=token)
    return pull(plan, allow_downloads=allow_downloads, progress=progress, cancel=cancel, pause=pause,
                chunk_bytes=chunk_bytes, token=token)


def read_state(work: Path) -> dict[str, Any] | None:
    """A work folder's plan as saved (None when unreadable): for listing paused downloads."""
    try:
        data = json.loads((work / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
