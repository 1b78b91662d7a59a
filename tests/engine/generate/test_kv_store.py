"""KVStore on the tiny model's real snapshots: the byte budget, least recently used first, the longest shared prefix,
and a damaged file deleted and reported once."""

from __future__ import annotations

import os
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
