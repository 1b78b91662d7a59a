"""The inference lab: its text measures exactly, its result/CSV/JSON forms, and every experiment on the tiny model.

The whole ``python -m engine lab --quick`` run on the tiny model happens once (module fixture, in
process) and several tests read what it wrote; single experiments run with small sizes.
"""

from __future__ import annotations

import csv
import json
import math
import threading

import pytest
import torch

from engine.__main__ import main
from engine.errors import BadInputError, CancelledError
from engine.inputs import LoadSpec
from engine.lab import run_experiment
from engine.lab.charts import save_png
from engine.lab.precision_ab import run_precision_ab
from engine.lab.results import ExperimentResult, Heatmap, Series, median, write_csv, write_json
from engine.lab.sampling_stats import distinct_n, ngrams, repetition_rate, run_sampling, text_measures
from engine.lab.timing import first_divergence, run_kv_cache, slope
from engine.models.loader import load_model

FIVE_FILES = [f"{key}.{ext}" for key in ("greedy20", "ttft_length", "kv_cache", "sampling", "attention")
              for ext in ("csv", "png")]


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread: on a shared 2-core CI machine two threads contending make tiny-model runs 10× slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir, one_thread):
    return load_model(LoadSpec(model=str(tiny_model_dir)))


@pytest.fixture(scope="module")
def lab_run(tiny_model_dir, one_thread, tmp_path_factory):
    """``python -m engine lab --out DIR --quick --model <tiny>``, in process."""
    out = tmp_path_factory.mktemp("lab")
    status = main(["lab", "--out", str(out), "--quick", "--model", str(tiny_model_dir)])
    return status, out


# ------------------------------------------------------------------ text measures


def test_distinct_n_on_known_sequences():
    assert distinct_n("abcd", 1) == 1.0
    assert distinct_n("aaaa", 1) == 0.25
    assert distinct_n("abab", 2) == pytest.approx(2 / 3)  # ab, ba, ab
    assert distinct_n("the cat the cat".split(), 2) == pytest.approx(2 / 3)
    assert distinct_n("a", 2) == 0.0  # too short to have a bigram


def test_repetition_rate_counts_ngrams_seen_before():
    assert repetition_rate("abcdef", 3) == 0.0
    # abc abc abc: 3-grams abc bca cab abc bca cab abc -> 7, of which 4 repeat an earlier one
    assert repetition_rate("abcabcabc", 3) == pytest.approx(4 / 7)
    assert repetition_rate([5, 5, 5, 5, 5], 3) == pytest.approx(2 / 3)
    assert repetition_rate([1, 2], 3) == 0.0
    seq = [1, 2, 3, 1, 2, 3, 4]
    assert repetition_rate(seq, 2) == pytest.approx(1 - distinct_n(seq, 2))


def test_text_measures_and_ngrams():
    measures = text_measures([7, 8, 7, 8, 7, 8])
    assert measures == {"repetition_rate_3": pytest.approx(0.5), "distinct_1": pytest.approx(2 / 6),
                        "distinct_2": pytest.approx(2 / 5)}
    assert ngrams([1, 2, 3], 2) == [(1, 2), (2, 3)]
    with pytest.raises(ValueError):
        ngrams([1], 0)


def test_slope_median_and_divergence():
    assert slope([1, 2, 3, 4], [2, 4, 6, 8]) == pytest.approx(2.0)
    assert slope([1, 2, 3], [5, 5, 5]) == 0.0
    assert math.isnan(slope([1], [1]))
    assert median([3, 1, 2]) == 2 and median([4, 1, 2, 3]) == 2.5 and math.isnan(median([]))
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


# ------------------------------------------------------------------ result forms


def test_result_csv_and_json_round_trip(tmp_path):
    result = ExperimentResult(
        key="demo", title="Demo", columns=("lang", "value", "text"),
        rows=(("zh", 1.5, "我昨天认识的那个人"), ("en", None, "a, \"quoted\" text")),
        series=(Series("s", (1.0, 2.0), (3.0, math.nan), "x", "y", x_ticks=("a", "b")),),
        heatmaps=(Heatmap("h", ((1.0, 0.0), (0.5, 0.5)), ("a", "b"), ("a", "b")),),
        summary={"ratio": 2.0, "nan": math.nan}, flags=("f",), notes=("n",))
    path = write_csv(result, tmp_path / "demo.csv")
    with path.open(encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows == [["lang", "value", "text"], ["zh", "1.5", "我昨天认识的那个人"], ["en", "", "a, \"quoted\" text"]]
    json_path = write_json({"demo": result.to_dict()}, tmp_path / "r.json")
    data = json.loads(json_path.read_text(encoding="utf-8"))  # strict JSON: NaN became null
    assert data["demo"]["summary"]["nan"] is None
    back = ExperimentResult.from_dict(data["demo"])
    assert back.rows[0] == ("zh", 1.5, "我昨天认识的那个人")
    assert back.series[0].x_ticks == ("a", "b") and back.heatmaps[0].matrix == ((1.0, 0.0), (0.5, 0.5))


def test_unknown_experiment_is_refused(tiny):
    with pytest.raises(BadInputError, match="unknown experiment"):
        run_experiment("nope", tiny, threading.Event())


# ------------------------------------------------------------------ experiments on the tiny model


def test_lab_cli_quick_writes_every_file(lab_run):
    status, out = lab_run
    assert status == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(FIVE_FILES + ["results.json"])
    for name in FIVE_FILES:
        assert (out / name).stat().st_size > 0
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert list(data["experiments"]) == ["greedy20", "ttft_length", "kv_cache", "sampling", "attention"]
    assert data["model"]["layers"] == 2 and data["options"]["quick"] is True


def test_greedy20_measures_each_run(lab_run):
    _, out = lab_run
    greedy = json.loads((out / "results.json").read_text(encoding="utf-8"))["experiments"]["greedy20"]
    assert greedy["summary"]["runs"] == 3 and len(greedy["rows"]) == 3
    for run, generated, prompt_tokens, ttft, total, avg, decode, finish in greedy["rows"]:
        assert 1 <= generated <= 20 and prompt_tokens > 0
        assert 0 < ttft <= total
        assert avg == pytest.approx(generated / total, rel=0.01)
    assert greedy["summary"]["ttft_s_min"] <= greedy["summary"]["ttft_s_median"] <= greedy["summary"]["ttft_s_max"]


def test_ttft_covers_lengths_and_languages(lab_run):
    _, out = lab_run
    ttft = json.loads((out / "results.json").read_text(encoding="utf-8"))["experiments"]["ttft_length"]
    langs = [row[0] for row in ttft["rows"]]
    assert langs.count("en") == 4 and langs.count("zh") == 4
    en_tokens = [row[3] for row in ttft["rows"] if row[0] == "en"]
    assert en_tokens == sorted(en_tokens) and en_tokens[0] < en_tokens[-1]  # longer prompt, more tokens
    for row in ttft["rows"]:
        assert row[5] > 0 and row[7] > 0  # ttft_s, prefill_tok_s measured
        assert row[4] == row[3]  # fresh session: every prompt token computed, nothing reused


def test_kv_cache_experiment_compares_the_same_greedy_text(lab_run):
    _, out = lab_run
    kv = json.loads((out / "results.json").read_text(encoding="utf-8"))["experiments"]["kv_cache"]
    s = kv["summary"]
    assert s["generated_tokens_on"] == s["generated_tokens_off"] == 96
    assert s["texts_identical"] is True and s["first_divergence"] is None and kv["flags"] == []
    positions = [row for row in kv["rows"] if isinstance(row[0], int)]
    assert len(positions) == 95  # one latency per gap between 96 tokens
    assert all(on > 0 and off > 0 for _, on, off, _ in positions)
    assert [row[0] for row in kv["rows"][-2:]] == ["text, KV on", "text, KV off"]
    assert kv["rows"][-1][1] == kv["rows"][-2][1]
    with (out / "kv_cache.csv").open(encoding="utf-8-sig") as fh:
        assert next(csv.reader(fh)) == ["position", "kv_on_ms", "kv_off_ms", "ratio"]


def test_sampling_compares_greedy_with_seeded_samples(lab_run):
    _, out = lab_run
    sampling = json.loads((out / "results.json").read_text(encoding="utf-8"))["experiments"]["sampling"]
    configs = [(row[0], row[1]) for row in sampling["rows"]]
    assert configs == [("greedy", None), ("T=0.9 top-p=0.9", 0), ("T=0.9 top-p=0.9", 1), ("T=0.9 top-p=0.9", 2)]
    for row in sampling["rows"]:
        assert 0.0 <= row[3] <= 1.0 and 0.0 < row[4] <= 1.0 and 0.0 < row[5] <= 1.0


def test_sampling_is_reproducible_per_seed(tiny):
    a = run_sampling(tiny, threading.Event(), seeds=(3,), max_new_tokens=12)
    b = run_sampling(tiny, threading.Event(), seeds=(3,), max_new_tokens=12)
    assert a.rows == b.rows  # same seed, same text and measures
    assert [row[-1] for row in a.rows] == [row[-1] for row in b.rows]


def test_kv_cache_progress_moves_token_by_token_within_the_long_step(tiny):
    # Issue 41: the quick run sat at 50 % for minutes while decoding without the cache; each token now reports.
    seen: list[tuple[float, str]] = []
    run_kv_cache(tiny, threading.Event(), max_new_tokens=6, passage_chars=40,
                 progress=lambda fraction, message: seen.append((fraction, message)))
    off = [(f, m) for f, m in seen if m.startswith("KV cache off: token")]
    assert [m for _, m in off][-1] == "KV cache off: token 6 of 6"
    assert len(off) == 6 and all(a < b for (a, _), (b, _) in zip(off, off[1:]))  # it moves within the step
    assert all(b >= a - 1e-9 for (a, _), (b, _) in zip(seen, seen[1:])) and seen[-1] == (1.0, "KV cache: done")


def test_cancel_stops_an_experiment(tiny):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError):
        run_experiment("greedy20", tiny, cancel)


def test_precision_ab_loads_each_precision_in_turn(tiny_model_dir, one_thread):
    result = run_precision_ab(str(tiny_model_dir), threading.Event(), precisions=("fp32", "bf16", "nf4"),
                              max_new_tokens=8)
    assert [row[0] for row in result.rows] == ["fp32", "bf16", "nf4"]
    fp32, bf16, nf4 = result.rows
    assert fp32[6] == "reference"
    assert nf4[1] < fp32[1]  # 4-bit weights are smaller than fp32 ones
    assert all(row[4] is None or row[4] > 0 for row in result.rows)
    assert set(result.summary) >= {"fp32_decode_tok_s", "nf4_weights_mb"}
    assert save_png(result, tiny_model_dir.parent / "ab.png").stat().st_size > 0


def test_precision_ab_reports_a_precision_that_cannot_load(tiny_model_dir, one_thread):
    result = run_precision_ab(str(tiny_model_dir), threading.Event(), precisions=("fp32", "int3"), max_new_tokens=4)
    assert result.rows[1][0] == "int3" and result.rows[1][-1].startswith("not loaded:")
    assert any("int3" in flag for flag in result.flags)


def test_result_csv_escapes_formula_text_but_keeps_numbers_numeric(tmp_path):
    # A token label is model output: "=HYPERLINK(...)" in a reply must not become a live formula.
    texts = ("=HYPERLINK(\"http://evil.example\")", "+1", "-x", "@A1", "\tTAB", "\rCR", "plain", "'quoted")
    result = ExperimentResult(key="inj", title="Injection", columns=("=col", "text", "value"),
                              rows=tuple((str(i), text, -1.5) for i, text in enumerate(texts)))
    with write_csv(result, tmp_path / "inj.csv").open(encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["'=col", "text", "value"]
    assert [row[1] for row in rows[1:]] == ["'" + t if t[0] in "=+-@\t\r" else t for t in texts]
    assert {row[2] for row in rows[1:]} == {"-1.5"}  # a negative number is not a formula
