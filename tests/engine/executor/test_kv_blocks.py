"""The shared-prefix block pool (``engine.executor.kv_blocks``) and the fast runner reading a prefix in place: blocks
keyed by their tokens and all before them, reference counts, LRU eviction within the budget, and logits bit for bit
those of a runner holding the same rows in its own cache (the tiny random model, and the default model across the
switch from SDPA to fp32 attention). The reference takes the source's rows by copy (``import_rows``, what sharing did
before the pool) and prefills the rest from the same position: a bf16 matrix product may round a row differently
in a chunk of another length, so rows computed inside another prompt's prefill are not always the bits a prompt's
own prefill would give (with or without sharing, as a turn's KV reuse); the comparison isolates what reading in place
changes - nothing.
"""

from __future__ import annotations

import pytest
import torch

from engine.executor.batched import decode_batch
from engine.executor.fastpath import EXACT_ATTENTION_POSITIONS, FastRunner
from engine.executor.kv_blocks import BLOCK, BlockPool
from engine.executor.kv_rows import export_rows, import_rows
from engine.inputs import LoadSpec
from engine.models.loader import load_model


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))


def ids_of(seed: int, n: int, vocab: int = 200) -> list[int]:
    return torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def prefilled(loaded, prompt: list[int], runner: FastRunner | None = None) -> tuple[FastRunner, torch.Tensor]:
    runner = runner or FastRunner(loaded.model)
    logits = None
    for _, logits in runner.prefill(prompt[runner.cached_len:]):
        pass
    return runner, logits


def copied(loaded, source: FastRunner, prompt: list[int], n: int) -> tuple[FastRunner, torch.Tensor]:
    """A runner holding a copy of ``source``'s first ``n`` rows in its own cache, then ``prompt``'s rest prefilled."""
    runner = FastRunner(loaded.model)
    import_rows(runner, prompt[:n], {name: rows.clone() for name, rows in export_rows(source, n).items()})
    return prefilled(loaded, prompt, runner)


def publish(pool: BlockPool, runner: FastRunner) -> int:
    kv, base = runner._kv, runner._kv.base
    return pool.publish(runner.cached_ids, lambda a, b: (kv.k[:, :, a - base:b - base], kv.v[:, :, a - base:b - base]),
                        start=base)


def greedy(runner: FastRunner, logits: torch.Tensor, steps: int) -> tuple[list[int], list[torch.Tensor]]:
    tokens, rows = [], [logits]
    for _ in range(steps):
        tokens.append(int(torch.argmax(logits[0])))
        logits = runner.decode(tokens[-1])
        rows.append(logits)
    return tokens, rows


def test_blocks_are_keyed_by_their_tokens_and_everything_before_them(tiny):
    source, _ = prefilled(tiny, ids_of(1, 70))
    pool = BlockPool.for_runner(source, 1 << 20)
    assert publish(pool, source) == 70 // BLOCK  # whole blocks only: 4
    assert publish(pool, source) == 0  # already there
    prompt = ids_of(1, 70)
    shared = pool.acquire(prompt[:40] + ids_of(2, 30), 69)
    assert len(shared) == 32 and shared.ids == tuple(prompt[:32])  # the third block's tokens differ
    changed = list(prompt)
    changed[3] += 1  # one token of the first block: nothing after it matches, however equal
    assert pool.acquire(changed) is None
    assert pool.acquire(prompt, limit=BLOCK - 1) is None  # not even one whole block allowed
    assert pool.hits == 32 and pool.queries == 69 + 70 + BLOCK - 1
    pool.release(shared)


def test_references_pin_blocks_and_the_least_recently_used_free_ones_are_evicted(tiny):
    runners = [prefilled(tiny, ids_of(seed, 2 * BLOCK))[0] for seed in (10, 11, 12)]
    pool = BlockPool.for_runner(runners[0], 0)
    pool = BlockPool.for_runner(runners[0], 4 * pool.block_bytes + pool.block_bytes // 2)
    assert pool.capacity == 4 and pool.budget_bytes == 4 * pool.block_bytes
    assert publish(pool, runners[0]) == 2 and publish(pool, runners[1]) == 2
    held = pool.acquire(runners[0].cached_ids)  # the first prompt is in use
    assert pool.referenced_blocks == 2 and pool.free_blocks == 0
    assert publish(pool, runners[2]) == 2  # room made by evicting the second prompt's unreferenced blocks
    assert pool.acquire(runners[1].cached_ids) is None
    assert pool.used_blocks == 4
    fourth = prefilled(tiny, ids_of(13, 2 * BLOCK))[0]
    assert pool.acquire(runners[2].cached_ids) is not None  # now in use too: nothing left to evict
    assert publish(pool, fourth) == 0 and pool.acquire(fourth.cached_ids) is None
    pool.release(held)
    pool.release(held)  # a second release changes nothing
    assert pool.referenced_blocks == 2
    assert publish(pool, fourth) == 2  # the first prompt's blocks, free again, made room
    assert pool.acquire(runners[0].cached_ids) is None


def test_a_parent_evicted_takes_its_children_with_it(tiny):
    long, _ = prefilled(tiny, ids_of(20, 3 * BLOCK))
    other, _ = prefilled(tiny, ids_of(21, BLOCK))
    pool = BlockPool.for_runner(long, 0)
    pool = BlockPool.for_runner(long, 3 * pool.block_bytes)
    publish(pool, long)
    # the chain's blocks were used together; the deepest go first, and a child never outlives its parent
    assert publish(pool, other) == 1 and pool.used_blocks == 3
    assert len(pool.acquire(long.cached_ids)) == 2 * BLOCK


@pytest.fixture(scope="module", params=["fp32", "int4"])
def tiny_both(request, tiny_model_dir):
    """The tiny model in fp32 (the Python step) and int4 (the native step, reading the prefix's pool rows in place)."""
    return load_model(LoadSpec(model=str(tiny_model_dir), precision=request.param, device="cpu"))


def test_a_prefix_read_in_place_gives_the_logits_of_the_whole_prompt(tiny_both):
    tiny = tiny_both
    if tiny.facts.precision == "int4":
        assert FastRunner(tiny.model)._native is not None  # the int4 runner decodes on the native step
    prompt = ids_of(30, 90)
    source, _ = prefilled(tiny, prompt[:50] + ids_of(31, 20))
    whole, logits = copied(tiny, source, prompt, 48)
    expected_tokens, expected = greedy(whole, logits, 20)
    pool = BlockPool.for_runner(source, 1 << 20)
    publish(pool, source)
    runner = FastRunner(tiny.model)
    runner.attach(pool.acquire(prompt, len(prompt) - 1))
    assert runner.cached_len == 48 and runner.kv_bytes()[0] == 0  # the shared rows are the pool's
    runner, logits = prefilled(tiny, prompt, runner)
    tokens, rows = greedy(runner, logits, 20)
    assert tokens == expected_tokens
    assert all(torch.equal(a, b) for a, b in zip(rows, expected))
    assert runner.kv_bytes()[0] == runner._kv.bytes_per_position * (runner.cached_len - 48)
    # a snapshot joins the two: the rows of the whole cache
    for name, rows_whole in export_rows(whole).items():
        assert torch.equal(export_rows(runner)[name], rows_whole)
    runner.reset()
    assert pool.referenced_blocks == 0 and runner.cached_len == 0


def test_a_crop_inside_the_prefix_keeps_its_whole_blocks(tiny):
    prompt = ids_of(40, 60)
    source, _ = prefilled(tiny, prompt)
    pool = BlockPool.for_runner(source, 1 << 20)
    publish(pool, source)
    runner = FastRunner(tiny.model)
    runner.attach(pool.acquire(prompt, 59))
    assert runner.cached_len == 48
    runner.crop(40)
    assert runner.cached_len == 32 and runner._kv.base == 32 and pool.referenced_blocks == 2
    _, logits = prefilled(tiny, prompt, runner)
    assert torch.equal(logits, copied(tiny, source, prompt, 32)[1])


def test_a_batch_mixing_shared_and_unshared_sequences_decodes_as_each_alone(tiny_both):
    tiny = tiny_both
    prompts = [ids_of(50, 40), ids_of(50, 36) + ids_of(51, 10), ids_of(52, 20)]
    source = prefilled(tiny, prompts[0])[0]
    alone = [greedy(*(copied(tiny, source, p, 32) if i == 1 else prefilled(tiny, p)), 10)[0]
             for i, p in enumerate(prompts)]
    pool = BlockPool.for_runner(source, 1 << 20)
    publish(pool, source)
    runners = [FastRunner(tiny.model) for _ in prompts]
    runners[1].attach(pool.acquire(prompts[1], len(prompts[1]) - 1))
    assert runners[1].cached_len == 32
    logits = [prefilled(tiny, p, r)[1] for p, r in zip(prompts, runners)]
    together: list[list[int]] = [[] for _ in prompts]
    for _ in range(10):
        tokens = [int(torch.argmax(row[0])) for row in logits]
        for out, token in zip(together, tokens):
            out.append(token)
        batch = decode_batch(runners, tokens)
        logits = [batch[i:i + 1] for i in range(len(prompts))]
    assert together == alone


def test_a_static_or_8_bit_cache_refuses_a_shared_prefix(tiny):
    source, _ = prefilled(tiny, ids_of(60, 40))
    pool = BlockPool.for_runner(source, 1 << 20)
    publish(pool, source)
    int8 = FastRunner(tiny.model, kv_precision="int8")
    assert not pool.fits(int8)
    with pytest.raises(ValueError):
        int8.attach(pool.acquire(source.cached_ids))


def test_default_model_reads_a_shared_prefix_bit_for_bit_across_both_attentions(default_model_dir):
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision="bf16", device="cpu"))
    vocab = loaded.model.config.vocab_size
    shared = ids_of(70, 200, vocab)
    prompt = shared + ids_of(71, 40, vocab)
    source, _ = prefilled(loaded, shared + ids_of(72, 30, vocab))
    whole, logits = copied(loaded, source, prompt, 192)
    steps = EXACT_ATTENTION_POSITIONS - len(prompt) + 12  # past the switch from SDPA to fp32 products
    expected_tokens, expected = greedy(whole, logits, steps)
    pool = BlockPool.for_runner(source, 64 << 20)
    publish(pool, source)
    runner = FastRunner(loaded.model)
    runner.attach(pool.acquire(prompt, len(prompt) - 1))
    assert runner.cached_len == 192
    runner, logits = prefilled(loaded, prompt, runner)
    tokens, rows = greedy(runner, logits, steps)
    assert tokens == expected_tokens
    assert all(torch.equal(a, b) for a, b in zip(rows, expected))
