"""The lab on a model served over the OpenAI API (a real ``engine serve`` on 127.0.0.1): the timing and sampling
experiments run and say which server produced them; what the API cannot tell is null; the experiments that need
the model's internals are refused in one line before anything runs."""

from __future__ import annotations

import json
import threading

import pytest

from engine.__main__ import main
from engine.lab import run_experiment
from engine.lab.experiments import EXPERIMENTS, NeedsLocalModelError, run_all
from engine.lab.timing import run_ttft_vs_length
from engine.remote import RemoteSpec, connect


@pytest.fixture(scope="module")
def remote(server):
    model = connect(RemoteSpec(server.url, "default", server.key))
    yield model
    model.close()


@pytest.fixture(scope="module")
def remote_lab(server, tmp_path_factory):
    """``python -m engine lab --quick --base-url URL --api-key K --model default``, in process."""
    out = tmp_path_factory.mktemp("remote-lab")
    status = main(["lab", "--out", str(out), "--quick", "--base-url", server.url, "--api-key", server.key,
                   "--model", "default"])
    return status, out, json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_the_cli_runs_what_a_server_can_and_names_the_server(remote_lab, server, capsys):
    status, out, data = remote_lab
    assert status == 0
    assert list(data["experiments"]) == ["greedy20", "ttft_length", "sampling"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{k}.{e}" for k in ("greedy20", "ttft_length", "sampling") for e in ("csv", "png")] + ["results.json"])
    engine = data["engine"]
    assert engine["kind"] == "remote" and engine["base_url"] == server.url + "/v1"
    assert engine["model"] == server.worker.model_id and "torch" not in data["machine"]
    assert data["model"]["source"] == server.url + "/v1" and data["model"]["kv_bytes_per_token"] is None
    for result in data["experiments"].values():
        assert server.url in result["model"] and "remote server" in result["model"]


def test_greedy_runs_are_timed_on_the_client_with_the_server_counts(remote_lab):
    greedy = remote_lab[2]["experiments"]["greedy20"]
    assert len(greedy["rows"]) == 3
    for _run, generated, prompt_tokens, ttft, total, avg, _decode, finish in greedy["rows"]:
        assert 1 <= generated <= 20 and prompt_tokens > 0 and finish in ("eos", "length")
        assert 0 < ttft <= total and avg == pytest.approx(generated / total, rel=0.01)
    assert any("measured on this client" in note for note in greedy["notes"])


def test_ttft_against_length_reports_no_prefill_figures_it_cannot_measure(remote_lab, server):
    ttft = remote_lab[2]["experiments"]["ttft_length"]
    columns = ttft["columns"]
    rows = [dict(zip(columns, row)) for row in ttft["rows"]]
    assert [r["lang"] for r in rows].count("en") == 4 and [r["lang"] for r in rows].count("zh") == 4
    context = server.worker.loaded.facts.context_length
    for row in rows:
        assert row["ttft_s"] > 0 and 0 < row["prompt_tokens"] < context  # fitted to the server's context
        assert row["prefill_s"] is None and row["prefill_tok_s"] is None  # the API does not say: never invented
    # Each request carried its own tag: the server's prefix cache reused only the template's opening before it,
    # the same few tokens whatever the prompt's length (the passage itself was never served from the cache).
    reused = [r["reused_tokens"] for r in rows]
    assert all(n is not None for n in reused) and max(reused) < min(r["prompt_tokens"] for r in rows) // 2
    whole = [r["prompt_tokens"] for r in rows if r["lang"] == "en" and not r["note"]]  # not cut to fit
    assert len(whole) >= 2 and whole == sorted(whole) and whole[0] < whole[-1]
    assert [s["panel"] for s in ttft["series"]] == [0, 0]  # TTFT only, no panel of prefill rates
    assert any("not reported through the API" in note for note in ttft["notes"])


def test_sampling_measures_the_tokens_the_server_sent_and_no_others(remote_lab):
    sampling = remote_lab[2]["experiments"]["sampling"]
    rows = sampling["rows"]
    assert [(r[0], r[1]) for r in rows] == [("greedy", None), ("T=0.9 top-p=0.9", 0), ("T=0.9 top-p=0.9", 1),
                                            ("T=0.9 top-p=0.9", 2)]
    greedy = rows[0]
    assert greedy[2] > 0 and 0.0 <= greedy[3] <= 1.0 and 0.0 < greedy[4] <= 1.0 and 0.0 < greedy[5] <= 1.0
    # The random tiny model samples bytes that cut characters: the stream then merges tokens into one chunk whose
    # logprob entries no longer spell its text, so those replies' measures are not reported (never chunk-based).
    unmeasured = [r for r in rows if r[3] is None]
    for row in rows:
        assert row[2] > 0
        assert (row[3], row[4], row[5]) == (None, None, None) or all(0.0 <= v <= 1.0 for v in row[3:6])
    if unmeasured:
        assert sampling["flags"] == [f"the server sent no per-token logprobs for {len(unmeasured)} of 4 replies: "
                                     "their stream pieces may hold several tokens each, so their measures are not "
                                     "reported"]
    else:
        assert sampling["flags"] == []
    assert any("generated tokens' texts" in note for note in sampling["notes"])


@pytest.mark.parametrize("args", [["--only", "kv_cache"], ["--only", "greedy20,attention"], ["--precision-ab"]])
def test_the_cli_refuses_internals_on_a_server_in_one_line_before_connecting(args, tmp_path, capsys):
    out = tmp_path / "out"
    # Port 9 (discard) on loopback: nothing listens, so a connection attempt would fail differently.
    status = main(["lab", "--out", str(out), "--base-url", "http://127.0.0.1:9/v1", *args])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in err and "Traceback" not in err
    assert err.startswith("error: the experiment") and "needs a model loaded on this computer" in err
    assert not out.exists()  # nothing ran, nothing was written


def test_run_experiment_and_run_all_refuse_internals_up_front(remote, tmp_path):
    needs_local = [e.key for e in EXPERIMENTS if e.needs_local]
    assert needs_local == ["kv_cache", "attention", "precision_ab", "speculation", "docs", "image_cost"]
    for key in needs_local:
        with pytest.raises(NeedsLocalModelError, match="needs a model loaded on this computer"):
            run_experiment(key, remote, threading.Event())
    with pytest.raises(NeedsLocalModelError):
        run_all(remote, tmp_path / "all", threading.Event(), keys=("greedy20", "kv_cache"))
    assert not (tmp_path / "all").exists()  # refused before the first experiment, not halfway


def test_prompts_too_long_for_the_servers_context_are_cut_from_its_own_counts(remote):
    # 500 Chinese characters are far more than the tiny model's 256 positions in its byte-level tokens.
    result = run_ttft_vs_length(remote, threading.Event(), lengths=(10, 500), reps=1)
    rows = [dict(zip(result.columns, row)) for row in result.rows]
    zh_long = [r for r in rows if r["lang"] == "zh"][-1]
    assert zh_long["note"] == "trimmed to fit the context" and zh_long["chars"] < 500
    assert zh_long["prompt_tokens"] < remote.facts.context_length
