"""Downloads through the real huggingface_hub session against the fake Hub, into a real models folder:
the model loads and answers; a paused download resumes with a Range request; a corrupted byte, a pickle-only
repo and a full disk are refused with nothing left visible."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import threading
from collections import namedtuple

import pytest

from engine import paths
from engine.errors import BadInputError, CancelledError, CorruptModelError, HubError, UnsafeModelError
from engine.events import Finished, Message
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.library import download, installed
from engine.library.download import download as pull
from engine.models.fetch import NoSpaceError
from engine.models.loader import load_model
from tests.engine.library.conftest import GGUF_F16, GGUF_Q8, GGUF_REPO, PICKLE_ONLY, REMOTE_CODE, TINY, visible_models

WEIGHTS = "model.safetensors"


def _greedy_reply(path: str) -> Finished:
    loaded = load_model(LoadSpec(model=path, precision="fp32", device="cpu"))
    session = ChatSession(loaded)
    events = list(session.generate([Message("user", "Hello")], SamplingConfig(temperature=0.0, max_new_tokens=5)))
    return next(e for e in events if isinstance(e, Finished))


def test_pulled_model_is_verified_installed_and_answers(home, fake_hub, only_fake_hub, tiny_model_dir):
    seen = []
    result = pull(TINY, allow_downloads=True, endpoint=fake_hub.url, progress=seen.append)
    folder = paths.models_dir() / "miaohui-test--tiny-chat"
    assert result.path == str(folder) and result.revision == fake_hub.repos[TINY].sha
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["chat_template.jinja", "config.json", "generation_config.json", WEIGHTS, "tokenizer.json",
         "tokenizer_config.json", download.RECORD])
    assert (folder / WEIGHTS).read_bytes() == (tiny_model_dir / WEIGHTS).read_bytes()
    record = json.loads((folder / download.RECORD).read_text())
    assert record["repo"] == TINY and record["revision"] == result.revision
    assert not list(paths.models_dir().glob(".download-*"))  # the work folder is gone
    assert seen[-1].done == seen[-1].total == result.total_bytes and result.transferred_bytes == result.total_bytes
    assert not fake_hub.requests_for("pytorch_model.bin") and not fake_hub.requests_for("onnx/model.onnx")
    finished = _greedy_reply(result.path)
    assert finished.reason in ("stop", "length") and finished.metrics.generated_tokens > 0
    assert str(folder) in visible_models(home) and "miaohui-test--tiny-chat" in visible_models(home)
    listed = {m.name: m for m in installed.list_installed()}["miaohui-test--tiny-chat"]
    assert listed.repo == TINY and listed.params == 99_648 and listed.format == "safetensors"
    assert {"fp32", "bf16", "int8", "int4"} <= set(listed.precisions)
    with pytest.raises(BadInputError, match="already installed"):
        pull(TINY, allow_downloads=True, endpoint=fake_hub.url)
    assert only_fake_hub == []


def test_paused_download_resumes_with_a_range_request_and_verifies(home, fake_hub, only_fake_hub):
    pause = threading.Event()
    size = len(fake_hub.repos[TINY].files[WEIGHTS])

    def stop_mid_weights(p):
        if p.file == WEIGHTS and p.file_done >= size // 3:
            pause.set()

    with pytest.raises(CancelledError, match="paused"):
        pull(TINY, allow_downloads=True, endpoint=fake_hub.url, progress=stop_mid_weights, pause=pause,
             chunk_bytes=16 * 1024)
    assert visible_models(home) == []  # nothing half-made in the picker or the library
    [partial] = installed.partial_downloads()
    assert partial.repo == TINY and 0 < partial.done_bytes < partial.total_bytes
    part = paths.models_dir() / partial.name / f"{WEIGHTS}.part"
    held = part.stat().st_size
    assert size // 3 <= held < size

    result = pull(TINY, allow_downloads=True, endpoint=fake_hub.url)  # "after a restart": state is all on disk
    # The resolve request carried the range through the Hub's redirect to the CDN, which answered 206.
    ranged = [e for e in fake_hub.requests_for(WEIGHTS) if e.range]
    assert {e.range for e in ranged} == {f"bytes={held}-"}
    assert [e.sent for e in ranged if e.status == 206] == [size - held]
    assert result.resumed_bytes >= held and result.transferred_bytes < result.total_bytes
    body = (paths.models_dir() / "miaohui-test--tiny-chat" / WEIGHTS).read_bytes()
    assert hashlib.sha256(body).hexdigest() == fake_hub.sha256(TINY, WEIGHTS)
    assert installed.partial_downloads() == []
    assert _greedy_reply(result.path).metrics.generated_tokens > 0


def test_a_dropped_connection_keeps_what_arrived_and_the_next_pull_resumes(home, fake_hub, only_fake_hub):
    fake_hub.cut_after[WEIGHTS] = 150_000
    with pytest.raises(HubError) as info:
        pull(TINY, allow_downloads=True, endpoint=fake_hub.url, chunk_bytes=16 * 1024)
    assert "pull it again to resume" in str(info.value) and "\n" not in str(info.value)
    assert visible_models(home) == []
    [partial] = installed.partial_downloads()
    held = (paths.models_dir() / partial.name / f"{WEIGHTS}.part").stat().st_size
    assert 0 < held <= 150_000
    result = pull(TINY, allow_downloads=True, endpoint=fake_hub.url)
    assert {e.range for e in fake_hub.requests_for(WEIGHTS) if e.range} == {f"bytes={held}-"}
    assert result.resumed_bytes >= held and _greedy_reply(result.path).metrics.generated_tokens > 0


def test_a_server_that_ignores_ranges_restarts_the_file(home, fake_hub, only_fake_hub):
    pause = threading.Event()
    with pytest.raises(CancelledError, match="paused"):
        pull(TINY, allow_downloads=True, endpoint=fake_hub.url, pause=pause, chunk_bytes=16 * 1024,
             progress=lambda p: pause.set() if p.file == WEIGHTS and p.file_done > 50_000 else None)
    fake_hub.ignore_ranges = True
    result = pull(TINY, allow_downloads=True, endpoint=fake_hub.url)
    assert [e.status for e in fake_hub.requests_for(WEIGHTS) if e.range and e.path.startswith("/cdn/")] == [200]
    body = (paths.models_dir() / "miaohui-test--tiny-chat" / WEIGHTS).read_bytes()
    assert hashlib.sha256(body).hexdigest() == fake_hub.sha256(TINY, WEIGHTS) and result.path


def test_cancel_removes_everything(home, fake_hub, only_fake_hub):
    cancel = threading.Event()
    with pytest.raises(CancelledError, match="cancelled"):
        pull(TINY, allow_downloads=True, endpoint=fake_hub.url, cancel=cancel, chunk_bytes=16 * 1024,
             progress=lambda p: cancel.set() if p.file == WEIGHTS else None)
    assert visible_models(home) == [] and installed.partial_downloads() == []
    assert list(paths.models_dir().iterdir()) == []


def test_a_corrupted_byte_is_refused_and_nothing_is_visible(home, fake_hub, only_fake_hub):
    fake_hub.corrupt(TINY, WEIGHTS)
    with pytest.raises(HubError) as info:
        pull(TINY, allow_downloads=True, endpoint=fake_hub.url)
    message = str(info.value)
    assert "model.safetensors failed verification" in message and "sha256" in message and "\n" not in message
    assert visible_models(home) == []
    assert not list(paths.models_dir().glob(f".download-*/{WEIGHTS}*"))  # the bad bytes are discarded
    # The files verified before it stay for a retry; discarding the paused download removes them.
    [partial] = installed.partial_downloads()
    assert (paths.models_dir() / partial.name / download.DONE / "tokenizer.json").is_file()
    installed.delete_partial(partial.name)
    assert installed.partial_downloads() == []
    # A small (non-LFS) file is checked against its git blob id the same way.
    fake_hub.corrupted.clear()
    fake_hub.corrupt(TINY, "tokenizer.json")
    with pytest.raises(HubError, match="tokenizer.json failed verification: its git blob id"):
        pull(TINY, allow_downloads=True, endpoint=fake_hub.url)
    assert visible_models(home) == []


def test_pickle_only_and_remote_code_repos_download_nothing(home, fake_hub, only_fake_hub):
    with pytest.raises(UnsafeModelError, match="pickle"):
        pull(PICKLE_ONLY, allow_downloads=True, endpoint=fake_hub.url)
    with pytest.raises(UnsafeModelError, match="auto_map"):
        pull(REMOTE_CODE, allow_downloads=True, endpoint=fake_hub.url)
    assert not fake_hub.requests_for("pytorch_model.bin") and not fake_hub.requests_for(WEIGHTS)
    assert list(paths.models_dir().iterdir()) == []


def test_a_full_disk_is_reported_before_the_download_starts(home, fake_hub, only_fake_hub, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: usage(10 << 30, (10 << 30) - (1 << 20), 1 << 20))
    with pytest.raises(NoSpaceError) as info:
        pull(TINY, allow_downloads=True, endpoint=fake_hub.url)
    assert "not enough disk space" in str(info.value) and "free " in str(info.value)
    assert "\n" not in str(info.value)
    assert not fake_hub.requests_for(WEIGHTS)  # no weights were asked for
    assert visible_models(home) == []


def test_gguf_file_is_pulled_alone_and_listed(home, fake_hub, only_fake_hub, gguf_files):
    result = pull(GGUF_REPO, file=GGUF_Q8, allow_downloads=True, endpoint=fake_hub.url)
    path = paths.models_dir() / "miaohui-test--tiny-chat-GGUF" / GGUF_Q8
    assert result.path == str(path) and path.read_bytes() == gguf_files[GGUF_Q8]
    assert not fake_hub.requests_for(GGUF_F16) and not fake_hub.requests_for("README.md")
    second = pull(GGUF_REPO, file=GGUF_F16, allow_downloads=True, endpoint=fake_hub.url)
    assert second.path == str(path.with_name(GGUF_F16))
    listed = {m.name: m for m in installed.list_installed()}
    entry = listed[f"miaohui-test--tiny-chat-GGUF/{GGUF_Q8}"]
    assert entry.format == "gguf" and entry.params == 99_648 and entry.repo == GGUF_REPO
    assert entry.size_bytes == len(gguf_files[GGUF_Q8])
    assert installed.delete(f"miaohui-test--tiny-chat-GGUF/{GGUF_Q8}") == path
    assert installed.delete(f"miaohui-test--tiny-chat-GGUF/{GGUF_F16}")
    assert list(paths.models_dir().iterdir()) == []  # the emptied folder went too


def test_download_through_a_thread_while_the_caller_waits(home, fake_hub, only_fake_hub):
    # The app downloads on a worker thread: the offline switch is lifted there, inside the call, by itself.
    box = {}
    worker = threading.Thread(target=lambda: box.setdefault(
        "result", pull(TINY, allow_downloads=True, endpoint=fake_hub.url)))
    worker.start()
    worker.join(60)
    assert box["result"].path.endswith("miaohui-test--tiny-chat")


# ---------------------------------------------------------------- GGUF layouts (issue 31, defects 11c and 11d)

SUB_REPO = "miaohui-test/tiny-sub-GGUF"
EMPTY_GGUF = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)  # a header: version 3, no tensors, no metadata


def _add_sub_repo(fake_hub, files: dict[str, bytes]) -> None:
    fake_hub.add_repo(SUB_REPO, {"README.md": b"# GGUF in folders\n", **files}, config=None,
                      tags=["gguf", "llama", "text-generation"])


def test_a_gguf_in_a_subfolder_of_the_repo_is_pulled_into_its_model_folder(home, fake_hub, only_fake_hub,
                                                                           gguf_files):
    _add_sub_repo(fake_hub, {f"Q8_0/{GGUF_Q8}": gguf_files[GGUF_Q8], f"F16/{GGUF_F16}": gguf_files[GGUF_F16]})
    folder = paths.models_dir() / "miaohui-test--tiny-sub-GGUF"
    result = pull(SUB_REPO, file=f"Q8_0/{GGUF_Q8}", allow_downloads=True, endpoint=fake_hub.url)
    assert result.path == str(folder / GGUF_Q8) and (folder / GGUF_Q8).read_bytes() == gguf_files[GGUF_Q8]
    assert result.files == (f"Q8_0/{GGUF_Q8}",)
    listed = {m.name: m for m in installed.list_installed()}[f"miaohui-test--tiny-sub-GGUF/{GGUF_Q8}"]
    assert listed.repo == SUB_REPO and listed.params == 99_648 and listed.problem is None
    assert installed.partial_downloads() == [] and not list(paths.models_dir().glob(".download-*"))
    assert not fake_hub.requests_for(f"F16/{GGUF_F16}")
    assert all(p.resolve().is_relative_to(folder) for p in folder.rglob("*"))


def test_subfolder_ggufs_with_the_same_name_keep_their_folder_in_theirs(home, fake_hub, only_fake_hub, gguf_files):
    _add_sub_repo(fake_hub, {"Q8_0/model.gguf": gguf_files[GGUF_Q8], "F16/model.gguf": gguf_files[GGUF_F16]})
    for quant in ("Q8_0", "F16"):
        pull(SUB_REPO, file=f"{quant}/model.gguf", allow_downloads=True, endpoint=fake_hub.url)
    names = sorted(m.name for m in installed.list_installed())
    assert names == ["miaohui-test--tiny-sub-GGUF/F16--model.gguf", "miaohui-test--tiny-sub-GGUF/Q8_0--model.gguf"]


def test_a_paused_subfolder_gguf_counts_only_its_bytes_and_resumes(home, fake_hub, only_fake_hub, gguf_files):
    _add_sub_repo(fake_hub, {f"Q8_0/{GGUF_Q8}": gguf_files[GGUF_Q8]})
    pause = threading.Event()
    with pytest.raises(CancelledError, match="paused"):
        pull(SUB_REPO, allow_downloads=True, endpoint=fake_hub.url, pause=pause, chunk_bytes=4096,
             progress=lambda p: pause.set())
    [partial] = installed.partial_downloads()
    parts = list((paths.models_dir() / partial.name).glob("*.part"))
    assert partial.repo == SUB_REPO and partial.total_bytes == len(gguf_files[GGUF_Q8])
    assert partial.done_bytes == sum(p.stat().st_size for p in parts) == 4096
    result = pull(SUB_REPO, allow_downloads=True, endpoint=fake_hub.url)
    assert result.resumed_bytes == 4096 and installed.partial_downloads() == []


@pytest.mark.parametrize("name", ["empty.gguf", "Q0/empty.gguf"])
def test_a_gguf_with_nothing_in_it_is_never_installed_nor_counted_past_its_size(home, fake_hub, only_fake_hub, name):
    _add_sub_repo(fake_hub, {name: EMPTY_GGUF})
    pause = threading.Event()
    with pytest.raises(CancelledError, match="paused"):  # stopped after its one chunk, before the checks
        pull(SUB_REPO, allow_downloads=True, endpoint=fake_hub.url, pause=pause, progress=lambda p: pause.set())
    [partial] = installed.partial_downloads()
    assert partial.done_bytes == partial.total_bytes == len(EMPTY_GGUF)  # the bookkeeping files are not counted
    with pytest.raises(CorruptModelError) as info:
        pull(SUB_REPO, allow_downloads=True, endpoint=fake_hub.url)
    assert "\n" not in str(info.value) and "empty.gguf: no general.architecture" in str(info.value)
    assert visible_models(home) == [] and installed.partial_downloads() == []


def test_the_installed_list_refuses_a_gguf_without_tensors(home):
    import gguf

    folder = paths.models_dir() / "someone--header-only"
    folder.mkdir(parents=True)
    writer = gguf.GGUFWriter(str(folder / "header-only.gguf"), "llama")
    for add, value in ((writer.add_block_count, 2), (writer.add_context_length, 256), (writer.add_embedding_length, 64),
                       (writer.add_feed_forward_length, 128), (writer.add_head_count, 4), (writer.add_head_count_kv, 2),
                       (writer.add_vocab_size, 400)):
        add(value)
    writer.add_token_list([f"t{i}" for i in range(400)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (folder / "nothing.gguf").write_bytes(EMPTY_GGUF)
    listed = {m.name: m for m in installed.list_installed()}
    assert listed["someone--header-only/header-only.gguf"].problem.endswith("no tensors: a GGUF header without weights")
    assert listed["someone--header-only/nothing.gguf"].problem.endswith("no general.architecture: not a model GGUF file")
    assert all(m.precisions == ("auto",) and m.params is None for m in listed.values())
