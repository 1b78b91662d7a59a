"""A hostile Hub (issue 31, defect 1): file names in a repo's listing and in its ``model.safetensors.index.json``
are untrusted. Through the real huggingface_hub client and the real ``python -m engine models pull`` process
against the local fake Hub, a name that would land outside the model's folder is refused with one line before any
byte of it moves, and nothing appears anywhere outside the models folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from engine import paths
from engine.errors import UnsafeModelError
from engine.library import download, hub, installed
from engine.library.download import download as pull
from engine.library.hub import DownloadPlan, RemoteFile
from tests.engine.library.conftest import visible_models
from tests.helpers.fake_hub import FakeHub, make_gguf

ROOT = Path(__file__).resolve().parents[3]
EVIL = "miaohui-test/evil"
EVIL_GGUF = "miaohui-test/evil-GGUF"
ESCAPED = "escaped"  # every hostile name's file is called escaped…; none may exist anywhere after a pull

# Names that leave the model's folder on Linux, or on Windows (backslash, drive, trailing dots), or name a device.
SHARD_NAMES = ["../../../escaped.safetensors", "ABSOLUTE", "sub/../../../../escaped.safetensors",
               "..\\..\\..\\escaped.safetensors", "C:/escaped.safetensors", "escaped\x00.safetensors",
               ".../escaped.safetensors", ".. /escaped.safetensors", "NUL.safetensors", "", 7]


def _escaped(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ESCAPED in p.name or p.name.lower().startswith("nul")]


def _weights(tiny: Path) -> list[str]:
    with safe_open(str(tiny / "model.safetensors"), "pt") as handle:
        return list(handle.keys())


@pytest.fixture
def hostile_hub():
    hub_ = FakeHub(any_path=True).start()
    yield hub_
    hub_.stop()


def _add_sharded(hub_: FakeHub, tiny: Path, shard: object, tmp_path: Path) -> object:
    """A loadable repo whose index sends every weight to ``shard``, which the listing has too (beside a top-level
    model.safetensors, which makes it a safetensors repo: the index, when there is one, says what is taken)."""
    (tmp_path / "outside").mkdir(exist_ok=True)  # where an absolute name points: it exists, so only a refusal helps
    shard = str(tmp_path / "outside" / "escaped.safetensors") if shard == "ABSOLUTE" else shard
    files = {p.name: p.read_bytes() for p in tiny.iterdir() if p.is_file()}
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {}, "weight_map": {name: shard for name in _weights(tiny)}}).encode()
    if isinstance(shard, str) and shard:
        files[shard] = (tiny / "model.safetensors").read_bytes()
    hub_.add_repo(EVIL, files, tags=["transformers", "safetensors", "text-generation"])
    return shard


@pytest.mark.parametrize("shard", SHARD_NAMES)
def test_an_index_shard_outside_the_folder_is_refused_before_any_byte(home, tmp_path, hostile_hub, only_fake_hub,
                                                                     tiny_model_dir, shard):
    shard = _add_sharded(hostile_hub, tiny_model_dir, shard, tmp_path)
    with pytest.raises(UnsafeModelError) as info:
        pull(EVIL, allow_downloads=True, endpoint=hostile_hub.url)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"refused {EVIL}'s model.safetensors.index.json: the file name")
    assert "only files inside the model's own folder are taken" in message
    assert not [e for e in hostile_hub.log if "/cdn/" in e.path or e.path.endswith(".safetensors")]  # no weights asked
    assert _escaped(tmp_path) == [] and visible_models(home) == [] and installed.partial_downloads() == []
    assert only_fake_hub == []


def _add_gguf(hub_: FakeHub, name: str, data: bytes) -> None:
    hub_.add_repo(EVIL_GGUF, {"README.md": b"# GGUF\n", name: data}, config=None,
                  tags=["gguf", "llama", "text-generation"])


@pytest.mark.parametrize("name", ["ABSOLUTE", "../../escaped-Q8_0.gguf", "Q8_0/../../../escaped-Q8_0.gguf",
                                  "..\\escaped-Q8_0.gguf", "D:escaped-Q8_0.gguf", "Q8_0/escaped\x1b[2J.gguf",
                                  "Q8_0./escaped-Q8_0.gguf"])
def test_a_listed_gguf_outside_the_folder_is_refused_before_any_byte(home, tmp_path, hostile_hub, only_fake_hub,
                                                                    name):
    (tmp_path / "outside").mkdir()
    name = str(tmp_path / "outside" / "escaped-Q8_0.gguf") if name == "ABSOLUTE" else name
    _add_gguf(hostile_hub, name, make_gguf(tmp_path / "source.gguf", "Q8_0").read_bytes())
    for file in (None, name):  # the only GGUF of the repo, and the same picked by name
        with pytest.raises(UnsafeModelError) as info:
            pull(EVIL_GGUF, file=file, allow_downloads=True, endpoint=hostile_hub.url)
        assert "\n" not in str(info.value) and str(info.value).startswith(f"refused {EVIL_GGUF}: the file name")
    assert not [e for e in hostile_hub.log if "/cdn/" in e.path or "resolve" in e.path]
    assert _escaped(tmp_path) == [] and visible_models(home) == [] and installed.partial_downloads() == []


def test_a_plan_made_elsewhere_is_judged_again_before_anything_is_made(home, tmp_path, hostile_hub, only_fake_hub):
    # pull() takes a DownloadPlan from any caller (the window keeps the one its fit estimate made).
    target = tmp_path / "outside" / "escaped.gguf"
    _add_gguf(hostile_hub, str(target), b"GGUF")
    plan = DownloadPlan(EVIL_GGUF, hostile_hub.repos[EVIL_GGUF].sha, hostile_hub.url, "gguf",
                        (RemoteFile(str(target), 4, "0" * 64, None),), "miaohui-test--evil-GGUF", str(target))
    with pytest.raises(UnsafeModelError, match="is an absolute path"):
        download.pull(plan, allow_downloads=True)
    assert list(paths.models_dir().iterdir()) == [] and _escaped(tmp_path) == [] and hostile_hub.log == []


def test_a_link_left_in_a_paused_download_is_not_followed_out(home, tmp_path, hostile_hub, only_fake_hub,
                                                              tiny_model_dir):
    # Shards in a subfolder of the repo are fine; a link where that subfolder goes is not written through.
    _add_sharded(hostile_hub, tiny_model_dir, "weights/model.safetensors", tmp_path)
    plan = hub.plan_download(EVIL, allow_downloads=True, endpoint=hostile_hub.url)
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    work = download.work_dir(plan)
    (work / download.DONE).mkdir(parents=True)
    (work / "weights").symlink_to(outside, target_is_directory=True)  # where the .part file would go
    with pytest.raises(UnsafeModelError, match="would be written through the link"):
        download.pull(plan, allow_downloads=True)
    assert list(outside.iterdir()) == [] and visible_models(home) == []
    (work / "weights").unlink()
    result = download.pull(plan, allow_downloads=True)  # without the link the same plan installs
    folder = Path(result.path)
    assert (folder / "weights" / "model.safetensors").is_file() and folder.parent == paths.models_dir()
    assert list(outside.iterdir()) == []


def test_models_pull_process_refuses_a_traversing_shard_with_one_line(home, tmp_path, hostile_hub, tiny_model_dir):
    shard = _add_sharded(hostile_hub, tiny_model_dir, "../../../escaped.safetensors", tmp_path)
    env = {**os.environ, "MIAOHUI_HOME": str(home)}
    result = subprocess.run([sys.executable, "-m", "engine", "models", "pull", EVIL, "--allow-downloads",
                             "--endpoint", hostile_hub.url], capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert result.stderr == (f"error: refused {EVIL}'s model.safetensors.index.json: the file name {shard!r} steps out "
                             "of the folder ('..') or has an empty or '.'-only part; only files inside the model's "
                             "own folder are taken\n")
    assert _escaped(tmp_path) == [] and list(home.rglob("*")) == []  # nothing made, in the data folder or out
    assert not [e for e in hostile_hub.log if "/cdn/" in e.path]
