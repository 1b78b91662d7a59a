"""engine.executor.recompute: with the KV cache off every step recomputes the whole sequence, on the same runner and
kernels as with the cache, so a greedy reply is the same text token for token at every precision (issue 39: at int4
the cache-less path used to run prefill's dequantized products and changed the answer)."""

from __future__ import annotations

import threading

import pytest

from engine.events import Finished, Message, Token
from engine.executor.fastpath import FastRunner
from engine.executor.recompute import RecomputeRunner
from engine.executor.runners import make_runner
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.models.loader import load_model
from tests.helpers.replies import reply

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=24, repetition_penalty=1.0)
FRANCE = "What is the capital of France?"


def _both(loaded, config: SamplingConfig = GREEDY, text: str = FRANCE) -> tuple[list[int], list[int]]:
    cached, _ = reply(ChatSession(loaded), config, text)
    recomputed, finished = reply(ChatSession(loaded), SamplingConfig(**{**config.__dict__, "use_kv_cache": False}),
                                 text)
    assert finished.metrics is not None
    return cached, recomputed


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8", "int4"])
def test_tiny_model_gives_the_same_reply_with_and_without_the_cache(tiny_model_dir, precision):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision, device="cpu"))
    cached, recomputed = _both(loaded)
    assert len(cached) > 4
    assert recomputed == cached


def test_without_a_cache_nothing_is_kept_between_steps_and_each_step_replays_the_sequence(tiny_model_dir):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    runner = make_runner(loaded, False)
    assert isinstance(runner, RecomputeRunner) and isinstance(runner.inner, FastRunner)
    prefills: list[int] = []
    inner_prefill = runner.inner.prefill

    def counting(ids, cancel=None, chunk=256):
        prefills.append(len(ids))
        return inner_prefill(ids, cancel, chunk)

    runner.inner.prefill = counting
    list(runner.prefill([1, 2, 3, 4, 5]))
    for token in (6, 7, 8):
        runner.decode(token)
        assert runner.inner.cached_len == 0 and runner.kv_bytes() == (0, 0)  # dropped after the step
    assert prefills == [5, 5, 5, 5]  # the prompt again at every step
    assert runner.ids == (1, 2, 3, 4, 5, 6, 7, 8) and runner.cached_ids == ()
    runner.crop(6)
    assert runner.ids == (1, 2, 3, 4, 5, 6)


def test_a_second_turn_and_a_crop_still_match_the_cached_runner(tiny_model_dir):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    cached, recompute = make_runner(loaded, True), make_runner(loaded, False)
    prompt, answer, follow = [3, 9, 27, 81, 5], [7, 11, 13], [17, 19, 23]
    for runner in (cached, recompute):
        list(runner.prefill(prompt))
        for token in answer:
            runner.decode(token)
        runner.crop(len(prompt) + 2)  # an edit: back to a common prefix, then a new turn
    last = [list(runner.prefill(follow))[-1][1] for runner in (cached, recompute)]
    assert last[0].equal(last[1])
    assert cached.decode(29).equal(recompute.decode(29))


def test_stop_while_recomputing_appends_nothing(tiny_model_dir):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision="fp32", device="cpu"))
    runner = make_runner(loaded, False)
    list(runner.prefill(list(range(1, 40)), chunk=8))
    cancel = threading.Event()
    cancel.set()
    assert list(runner.prefill([50, 51], cancel, chunk=8)) == []
    assert len(runner.ids) == 39


def _france_reply(loaded, use_kv_cache: bool) -> tuple[list[int], str]:
    config = SamplingConfig(temperature=0.0, max_new_tokens=24, use_kv_cache=use_kv_cache)
    ids, text = [], ""
    for event in ChatSession(loaded).generate([Message("user", FRANCE)], config):
        if isinstance(event, Token):
            ids.append(event.token_id)
        elif isinstance(event, Finished):
            text = event.text
    return ids, text


@pytest.mark.default_model
@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_default_model_prints_the_same_text_with_and_without_the_cache(default_model_dir, precision):
    """The issue's case: `engine chat --prompt "What is the capital of France?" --temperature 0 --no-kv-cache`
    (the CLI's defaults: repetition penalty 1.1) printed another text at int4."""
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision=precision, device="cpu"))
    cached = _france_reply(loaded, True)
    assert cached[0]
    assert _france_reply(loaded, False) == cached
