"""KVStore on the tiny model's real snapshots: the byte budget, least recently used first, the longest shared prefix,
and a damaged file deleted and reported once."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import struct
import time

import pytest

from engine.events import Message
from engine.generate.kv_snapshot import DamagedKVError, StaleKVError, identity_of
from engine.generate.kv_store import KVStore, key_for_ids
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=4)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def snapshot_of(loaded, text: str):
    session = ChatSession(loaded)
    list(session.generate([Message("system", "You are Miaohui."), Message("user", text)], GREEDY))
    return session.snapshot()


def aged(path, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(path, (t, t))


def test_the_least_recently_used_files_go_first_when_over_budget(loaded, tmp_path):
    identity = identity_of(loaded)
    snaps = {name: snapshot_of(loaded, f"Question {name}?") for name in "abc"}
    store = KVStore(tmp_path / "kv", budget_bytes=10 << 20)
    for age, name in zip((30, 20, 10), "abc"):
        aged(store.save(name, snaps[name], identity), age)
    assert store.load("a", identity) is not None  # used now: "b" is the oldest
    one = store.path_for("a").stat().st_size
    store.budget_bytes = 2 * one + one // 2
    store.evict()
    assert sorted(e.key for e in store.entries()) == ["a", "c"]
    assert store.used_bytes() <= store.budget_bytes
    assert store.clear() > 0 and store.entries() == [] and store.used_bytes() == 0


def test_a_snapshot_larger_than_the_budget_is_not_kept(loaded, tmp_path):
    store = KVStore(tmp_path / "kv", budget_bytes=100)
    assert store.save("big", snapshot_of(loaded, "Hello?"), identity_of(loaded)) is None
    assert store.entries() == []


def test_best_finds_the_longest_shared_token_prefix_of_this_model(loaded, tmp_path):
    identity = identity_of(loaded)
    store = KVStore(tmp_path / "kv")
    short, long = snapshot_of(loaded, "Hi"), snapshot_of(loaded, "What is the capital of France, please?")
    store.save(key_for_ids(short.ids), short, identity)
    store.save(key_for_ids(long.ids), long, identity)
    key, n = store.best(list(long.ids) + [5, 6, 7], identity)
    assert (key, n) == (key_for_ids(long.ids), len(long.ids))
    assert store.load(key, identity).ids == long.ids
    assert store.best([9999], identity) == ("", 0)


def test_a_damaged_file_is_deleted_and_reported_once(loaded, tmp_path):
    identity = identity_of(loaded)
    store = KVStore(tmp_path / "kv")
    path = store.save("chat-1", snapshot_of(loaded, "Hello?"), identity)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedKVError):
        store.load("chat-1", identity)
    assert not path.exists()
    assert store.load("chat-1", identity) is None  # gone: nothing to report a second time


def test_a_file_of_another_model_is_deleted_as_stale(loaded, tmp_path, tiny_model_dir):
    store = KVStore(tmp_path / "kv")
    store.save("chat-1", snapshot_of(loaded, "Hello?"), identity_of(loaded))
    bf16 = load_model(LoadSpec(model=str(tiny_model_dir), precision="bf16", device="cpu"))
    assert store.best(snapshot_of(loaded, "Hello?").ids, identity_of(bf16)) == ("", 0)
    with pytest.raises(StaleKVError):
        store.load("chat-1", identity_of(bf16))
    assert store.entries() == []


def test_keys_cannot_escape_the_folder(tmp_path):
    store = KVStore(tmp_path / "kv")
    assert store.path_for("../../etc/passwd").parent == store.folder
    assert store.path_for("conv-42").name == "conv-42.kv"


# -- hostile files (issue 40: items 4 and 5) ------------------------------------------------------------------------
def hostile_file(folder, name: str = "evil.kv"):
    """A ``.kv`` file in this format's envelope whose header is JSON nested 100,000 deep: ``json.loads`` raises
    ``RecursionError`` on it, which is not a ``ValueError``."""
    from engine.generate import kv_snapshot as fmt

    raw = b"[" * 100_000 + b"]" * 100_000
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(fmt.MAGIC + bytes(fmt._PREFIX - len(fmt.MAGIC)) + struct.pack("<Q", len(raw)) + raw)
    return path


def forge(path, rows_from) -> None:
    """Rewrite the snapshot at ``path`` with ``rows_from``'s rows (cut to its length) under its own ids, and recompute
    every digest the way anyone without the store's key can: an unkeyed SHA-256."""
    from safetensors.torch import load as st_load, save as st_save

    from engine.generate import kv_snapshot as fmt

    data = path.read_bytes()
    body = data[fmt._PREFIX:]
    (n,) = struct.unpack("<Q", body[:8])
    metadata = json.loads(body[8:8 + n])["__metadata__"]
    genuine = st_load(body)
    ids = len(json.loads(metadata[fmt._META_KEY])["ids"])
    rows = {name: (t[..., :ids] if name.endswith("_scale") else t[..., :ids, :]).contiguous()
            for name, t in rows_from.tensors.items()}
    assert rows.keys() == genuine.keys() and all(rows[k].shape == genuine[k].shape for k in rows)
    new_body = st_save(rows, metadata=metadata)
    digests = (fmt._PREFIX - len(fmt.MAGIC)) // 32
    path.write_bytes(data[:len(fmt.MAGIC)] + hashlib.sha256(new_body).digest() * digests + new_body)


def test_a_hostile_header_is_skipped_and_read_once(loaded, tmp_path, caplog):
    identity = identity_of(loaded)
    store = KVStore(tmp_path / "kv")
    good = snapshot_of(loaded, "Hello?")
    store.save(key_for_ids(good.ids), good, identity)
    evil = hostile_file(store.folder)
    with caplog.at_level(logging.INFO, logger="engine.generate.kv_store"):
        for _ in range(3):  # every request asks: the file is judged once
            assert store.best(good.ids, identity) == (key_for_ids(good.ids), len(good.ids))
    said = [r for r in caplog.records if "evil.kv" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0].getMessage()
    assert evil.exists()  # not the store's: left alone


def test_a_snapshot_forged_with_another_prompts_rows_is_refused(loaded, tmp_path):
    identity = identity_of(loaded)
    store = KVStore(tmp_path / "kv")
    victim = snapshot_of(loaded, "What is the capital of France?")
    other = snapshot_of(loaded, "Tell me a long story about a very small cat, please, now.")
    assert len(other.ids) >= len(victim.ids)
    path = store.save("chat-1", victim, identity)
    forge(path, other)
    with pytest.raises(DamagedKVError):
        store.load("chat-1", identity)


def test_a_snapshot_copied_from_another_store_is_not_trusted(loaded, tmp_path):
    identity = identity_of(loaded)
    mine, theirs = KVStore(tmp_path / "mine"), KVStore(tmp_path / "theirs")
    snapshot = snapshot_of(loaded, "Hello?")
    theirs.save("chat-1", snapshot, identity)
    mine.save("chat-2", snapshot_of(loaded, "Hi"), identity)
    copied = shutil.copy(theirs.path_for("chat-1"), mine.path_for("chat-1"))
    assert mine.best(snapshot.ids, identity)[0] != "chat-1"
    with pytest.raises(DamagedKVError):
        mine.load("chat-1", identity)
    assert [e.key for e in mine.entries()] == ["chat-2"]  # not counted as the store's own
    assert mine.clear() > 0 and os.path.exists(copied)  # eviction deletes only what the store wrote


def test_eviction_leaves_files_the_store_did_not_write(loaded, tmp_path):
    store = KVStore(tmp_path / "kv")
    store.save("chat-1", snapshot_of(loaded, "Hello?"), identity_of(loaded))
    foreign = store.folder / "notes.kv"
    foreign.write_bytes(b"someone else's file")
    hostile = hostile_file(store.folder)
    assert store.clear() > 0
    assert foreign.exists() and hostile.exists() and not store.path_for("chat-1").exists()


@pytest.mark.skipif(os.name == "nt", reason="POSIX permission bits")
def test_the_key_folder_and_files_are_private_to_the_user(loaded, tmp_path):
    store = KVStore(tmp_path / "kv")
    path = store.save("chat-1", snapshot_of(loaded, "Hello?"), identity_of(loaded))
    assert stat.S_IMODE(store.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    keys = [p for p in store.folder.iterdir() if not p.name.endswith(".kv")]
    assert len(keys) == 1 and stat.S_IMODE(keys[0].stat().st_mode) == 0o600
