"""The curated list: real published architectures, every entry on the fast path and int4-able, ranked for a
machine by fit and the decode ceiling."""

from __future__ import annotations

import pytest

from engine.executor.families import FAMILIES
from engine.library import curated, fit
from engine.library.curated import CURATED, recommend

# Parameter counts as published on the models' Hub pages (safetensors metadata); the counts below come from the
# architecture numbers alone, so a wrong number in the list shows here.
PUBLISHED = {
    "Qwen/Qwen2.5-0.5B-Instruct": 494_032_768, "Qwen/Qwen2.5-1.5B-Instruct": 1_543_714_304,
    "Qwen/Qwen2.5-3B-Instruct": 3_085_938_688, "Qwen/Qwen3-4B": 4_022_468_096,
    "google/gemma-3-1b-it": 999_885_952, "meta-llama/Llama-3.2-1B-Instruct": 1_235_814_400,
    "meta-llama/Llama-3.2-3B-Instruct": 3_212_749_824, "microsoft/Phi-4-mini-instruct": 3_836_021_760,
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": 1_711_376_384,
}
GIB = 1 << 30


@pytest.mark.parametrize("model", CURATED, ids=lambda m: m.repo)
def test_every_curated_model_is_on_the_fast_path_and_sized_exactly(model):
    arch = model.arch
    assert model.model_type in FAMILIES  # the fast decoder step computes this family
    assert arch.layout_known and arch.precision_problem("int4") is None and arch.precision_problem("int8") is None
    if model.repo in PUBLISHED:
        assert arch.params == PUBLISHED[model.repo]


def test_the_list_covers_the_families_people_move_to():
    families = {m.model_type for m in CURATED}
    assert {"qwen2", "qwen3", "gemma3_text", "llama", "phi3"} <= families
    assert len({m.repo for m in CURATED}) == len(CURATED)


def test_a_cpu_with_room_ranks_what_fits_first_then_the_fastest_as_the_caption_says():
    memory = fit.Memory("cpu", 16 * GIB, "test")
    ranked = recommend(memory, bandwidth=20e9)
    ranks = [fit.VERDICTS.index(r.estimate.verdict) for r in ranked]
    assert ranks == sorted(ranks)
    assert all(r.estimate.precision == "int4" for r in ranked)
    for r in ranked:
        assert r.bytes_per_token == r.estimate.weights_bytes + r.estimate.kv_bytes
        assert r.ceiling_tokens_per_s == pytest.approx(20e9 / r.bytes_per_token)
    for verdict in fit.VERDICTS:  # "what fits, then how fast": within a verdict, never a slower one above
        ceilings = [r.ceiling_tokens_per_s for r in ranked if r.estimate.verdict == verdict]
        assert ceilings == sorted(ceilings, reverse=True)
    unmeasured = recommend(memory, bandwidth=None)  # the same order before the bandwidth is measured
    assert [r.model.repo for r in unmeasured] == [r.model.repo for r in ranked]


def test_a_small_machine_puts_what_does_not_fit_last_and_says_so():
    memory = fit.Memory("cpu", 2 * GIB, "test")
    ranked = recommend(memory, bandwidth=None)
    assert ranked[0].estimate.verdict == "fits" and ranked[-1].estimate.verdict == "will not fit"
    assert all(r.ceiling_tokens_per_s is None for r in ranked)  # no measured bandwidth: no speed promised
    data = ranked[-1].to_dict()
    assert data["verdict"] == "will not fit" and data["ceiling_tokens_per_s"] is None and data["repo"]


def test_a_gpu_is_judged_in_bf16():
    memory = fit.Memory("cuda", 80 * GIB, "test")
    assert {r.estimate.precision for r in recommend(memory, bandwidth=3e12)} == {"bf16"}
    # The loader's policy decides, not a rule of the list's own: a CPU gets what auto loads there.
    cpu = fit.Memory("cpu", 64 * GIB, "test")
    assert {r.estimate.precision_rule for r in recommend(cpu, bandwidth=None)} <= {"quality unmeasured", "device float"}
