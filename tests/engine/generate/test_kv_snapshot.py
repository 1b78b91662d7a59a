"""KV snapshots on the tiny model: a session's cache written to a file and read back into another session.

A restored session must answer exactly as the one that never left memory; a file that is damaged (a flipped
byte, truncated, not a snapshot) or stale (another model, another precision, another runner) is refused with a
typed error, so the caller discards it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.events import Finished, Message, Started, Token
from engine.generate.kv_snapshot import (DamagedKVError, KVSnapshotError, StaleKVError, identity_of, load_snapshot,
                                         read_header, save_snapshot)
from engine.executor.runners import make_runner
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=10)
KEY = b"k" * 32  # the store's key (``engine.generate.kv_header``); a file sealed with another is foreign
FIRST = [Message("system", "You are Miaohui."), Message("user", "What is the capital of France?")]


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def plain_factory(loaded, use_kv_cache):
    from engine.executor.runner import ModelRunner

    runner = ModelRunner(loaded.model, use_kv_cache)
    return runner


def turn(session: ChatSession, messages) -> tuple[Started, list[int], Finished]:
    events = list(session.generate(messages, GREEDY))
    started = events[0]
    assert isinstance(started, Started) and isinstance(events[-1], Finished)
    assert events[-1].error is None
    return started, [e.token_id for e in events if isinstance(e, Token)], events[-1]


def conversation(session: ChatSession) -> list[Message]:
    """The first turn on ``session``, then the messages of a second turn that continues it."""
    _, _, done = turn(session, FIRST)
    return [*FIRST, Message("assistant", done.text), Message("user", "And of Italy?")]


@pytest.mark.parametrize("factory", [make_runner, plain_factory], ids=["fast", "plain"])
def test_a_restored_session_replies_exactly_as_one_that_stayed_in_memory(loaded, tmp_path, factory):
    stayed = ChatSession(loaded, runner_factory=factory)
    second = conversation(stayed)
    snapshot = stayed.snapshot()
    assert snapshot is not None and snapshot.ids == stayed.cached_ids()
    path = save_snapshot(tmp_path / "chat.kv", snapshot, identity_of(loaded), KEY)
    assert read_header(path, KEY)["ids"] == list(snapshot.ids)

    reopened = ChatSession(loaded, runner_factory=factory)
    reopened.restore(load_snapshot(path, identity_of(loaded), KEY))
    assert reopened.cached_ids() == stayed.cached_ids()

    started_mem, ids_mem, _ = turn(stayed, second)
    started_disk, ids_disk, _ = turn(reopened, second)
    assert started_disk.reused_tokens == started_mem.reused_tokens > len(FIRST)
    assert ids_disk == ids_mem


def test_a_snapshot_restores_into_a_session_that_already_holds_another_conversation(loaded, tmp_path):
    source = ChatSession(loaded)
    second = conversation(source)
    path = save_snapshot(tmp_path / "a.kv", source.snapshot(), identity_of(loaded), KEY)
    busy = ChatSession(loaded)
    turn(busy, [Message("user", "Something else entirely, and longer than the other one was.")])
    busy.restore(load_snapshot(path, identity_of(loaded), KEY))
    fresh = ChatSession(loaded)
    fresh.restore(load_snapshot(path, identity_of(loaded), KEY))
    assert turn(busy, second)[1] == turn(fresh, second)[1]


@pytest.fixture
def saved(loaded, tmp_path):
    session = ChatSession(loaded)
    conversation(session)
    return save_snapshot(tmp_path / "chat.kv", session.snapshot(), identity_of(loaded), KEY)


@pytest.mark.parametrize("where", [0, 9, 40, 60, 0.5, -1], ids=["magic", "checksum", "header-length", "header",
                                                                "payload", "last-byte"])
def test_a_flipped_byte_anywhere_is_refused(loaded, saved, where):
    data = bytearray(saved.read_bytes())
    index = int(len(data) * where) if isinstance(where, float) else where
    data[index] ^= 0x10
    saved.write_bytes(bytes(data))
    with pytest.raises(KVSnapshotError):
        load_snapshot(saved, identity_of(loaded), KEY)


@pytest.mark.parametrize("keep", [0, 5, 44, 0.5, -1], ids=["empty", "in-magic", "in-header", "half", "one-short"])
def test_a_truncated_file_is_damaged(loaded, saved, keep):
    data = saved.read_bytes()
    saved.write_bytes(data[:int(len(data) * keep) if isinstance(keep, float) else keep])
    with pytest.raises(DamagedKVError):
        load_snapshot(saved, identity_of(loaded), KEY)


def test_a_file_that_is_no_snapshot_is_damaged(loaded, tmp_path):
    path = tmp_path / "notes.kv"
    path.write_text("just some text that happens to sit where a snapshot should")
    with pytest.raises(DamagedKVError):
        load_snapshot(path, identity_of(loaded), KEY)
    with pytest.raises(DamagedKVError):
        load_snapshot(tmp_path / "missing.kv", identity_of(loaded), KEY)


def test_a_file_sealed_with_another_key_is_foreign(loaded, saved):
    from engine.generate.kv_header import ForeignKVError

    with pytest.raises(ForeignKVError):
        load_snapshot(saved, identity_of(loaded), b"x" * 32)
    with pytest.raises(ForeignKVError):
        read_header(saved, b"x" * 32)


def test_another_model_is_stale(saved, tmp_path):
    from tests.helpers.tiny_model import build_tiny_model

    other = load_model(LoadSpec(model=str(build_tiny_model(tmp_path / "other", seed=1)), precision="fp32",
                                device="cpu"))
    with pytest.raises(StaleKVError):
        load_snapshot(saved, identity_of(other), KEY)


def test_another_precision_or_kv_precision_is_stale(loaded, saved, tiny_model_dir):
    bf16 = load_model(LoadSpec(model=str(tiny_model_dir), precision="bf16", device="cpu"))
    assert identity_of(bf16) != identity_of(loaded)
    with pytest.raises(StaleKVError):
        load_snapshot(saved, identity_of(bf16), KEY)
    with pytest.raises(StaleKVError):
        load_snapshot(saved, dataclasses.replace(identity_of(loaded), kv_precision="int8"), KEY)


def test_a_plain_runners_snapshot_does_not_restore_into_a_fast_one(loaded, tmp_path):
    plain = ChatSession(loaded, runner_factory=plain_factory)
    conversation(plain)
    path = save_snapshot(tmp_path / "plain.kv", plain.snapshot(), identity_of(loaded), KEY)
    fast = ChatSession(loaded)
    with pytest.raises(StaleKVError):
        fast.restore(load_snapshot(path, identity_of(loaded), KEY))
    assert fast.cached_ids() == ()


def test_an_empty_session_has_no_snapshot(loaded):
    assert ChatSession(loaded).snapshot() is None


def test_reopen_with_restores_at_the_next_reply_inside_its_ttft(loaded, tmp_path):
    stayed = ChatSession(loaded)
    second = conversation(stayed)
    path = save_snapshot(tmp_path / "chat.kv", stayed.snapshot(), identity_of(loaded), KEY)
    now = [0.0]

    def clock() -> float:
        return now[0]

    def load():
        now[0] += 100.0  # reading the file takes "100 s" on this clock: the reply's TTFT must include it
        return load_snapshot(path, identity_of(loaded), KEY)

    reopened = ChatSession(loaded, clock=clock)
    reopened.reopen_with(load)
    assert reopened.cached_ids() == ()  # nothing read before the reply
    started, ids, done = turn(reopened, second)
    assert started.reused_tokens > len(FIRST) and done.metrics.ttft_s >= 100.0
    assert ids == turn(stayed, second)[1]


def test_a_kv_store_is_usable_without_torch():
    import subprocess
    import sys

    code = ("import sys, tempfile, pathlib\nfrom engine.generate.kv_store import KVStore\n"
            "s = KVStore(pathlib.Path(tempfile.mkdtemp()))\nassert s.used_bytes() == 0 and s.clear() == 0\n"
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


# -- 8-bit KV caches (``--kv int8``): their int8 rows and scales are saved as stored, never re-quantized --------------
@pytest.fixture(scope="module")
def loaded8(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu", kv_precision="int8"))


@pytest.fixture
def saved8(loaded8, tmp_path):
    session = ChatSession(loaded8)
    second = conversation(session)
    identity = session.kv_identity()
    return save_snapshot(tmp_path / "chat8.kv", session.snapshot(), identity, KEY), identity, session, second


def test_an_8_bit_cache_restored_from_its_file_replies_exactly_as_the_one_that_stayed(loaded8, saved8):
    path, identity, stayed, second = saved8
    assert identity.kv_precision == "int8"
    snapshot = load_snapshot(path, identity, KEY)
    assert {name: t.dtype for name, t in snapshot.tensors.items()} == {
        "k": torch.int8, "v": torch.int8, "k_scale": torch.float16, "v_scale": torch.float16}
    reopened = ChatSession(loaded8)
    reopened.restore(snapshot)
    assert reopened.cached_ids() == stayed.cached_ids()
    for name, rows in stayed.snapshot().tensors.items():
        assert torch.equal(reopened.snapshot().tensors[name], rows)  # the very bytes, nothing re-quantized
    started_mem, ids_mem, _ = turn(stayed, second)
    started_disk, ids_disk, _ = turn(reopened, second)
    assert started_disk.reused_tokens == started_mem.reused_tokens > len(FIRST)
    assert ids_disk == ids_mem


def test_an_8_bit_snapshot_is_stale_for_a_16_bit_cache_and_the_reverse(loaded, loaded8, saved8, saved):
    path8 = saved8[0]
    with pytest.raises(StaleKVError):
        load_snapshot(path8, identity_of(loaded), KEY)
    with pytest.raises(StaleKVError):
        load_snapshot(saved, ChatSession(loaded8).kv_identity(), KEY)
    dense = ChatSession(loaded)  # even handed over in memory, the rows are refused and the cache left empty
    with pytest.raises(StaleKVError):
        dense.restore(load_snapshot(path8, saved8[1], KEY))
    assert dense.cached_ids() == ()


@pytest.mark.parametrize("where", [0.3, 0.6, 0.9, -1], ids=["rows", "middle", "scales", "last-byte"])
def test_a_damaged_8_bit_snapshot_is_refused(saved8, where):
    path, identity = saved8[0], saved8[1]
    data = bytearray(path.read_bytes())
    data[int(len(data) * where) if isinstance(where, float) else where] ^= 0x04
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedKVError):
        load_snapshot(path, identity, KEY)


def test_8_bit_scales_that_do_not_match_the_ids_are_stale(loaded8, saved8, tmp_path):
    _, identity, stayed, _ = saved8
    snapshot = stayed.snapshot()
    cut = dict(snapshot.tensors, k_scale=snapshot.tensors["k_scale"][:, :, :-1])
    path = save_snapshot(tmp_path / "cut.kv", dataclasses.replace(snapshot, tensors=cut), identity, KEY)
    with pytest.raises(StaleKVError):
        load_snapshot(path, identity, KEY)
