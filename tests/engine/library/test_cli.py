"""``python -m engine models …``: offline by default (exit 2, one line, no socket), JSON shapes, the whole path from
search to a pulled model, and one-line errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.__main__ import main
from tests.engine.library.conftest import GGUF_F16, GGUF_Q8, GGUF_REPO, PICKLE_ONLY, TINY

ROOT = Path(__file__).resolve().parents[3]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["models", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys, *argv: str) -> dict:
    code, out, err = _run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("argv", [["search", "smol"], ["show", "HuggingFaceTB/SmolLM2-360M-Instruct"],
                                  ["pull", "HuggingFaceTB/SmolLM2-360M-Instruct"],
                                  ["fit", "HuggingFaceTB/SmolLM2-360M-Instruct"],
                                  ["pull", "HuggingFaceTB/SmolLM2-360M-Instruct", "--json"]])
def test_downloads_off_exit_2_with_one_line_and_no_socket(home, no_network, capsys, argv):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: downloads from Hugging Face are off")
    assert "--allow-downloads" in err
    assert no_network == []


def test_list_and_fit_work_offline(home, no_network, capsys, tiny_model_dir):
    data = _json(capsys, "list")
    assert data == {"models_dir": str(home / "models"), "models": [], "partial": []}
    fit = _json(capsys, "fit", str(tiny_model_dir), "--context", "64", "--precision", "bf16")
    assert fit["params"] == 99_648 and fit["kv_bytes"] == 64 * 256 and fit["precision"] == "bf16"
    assert fit["verdict"] in ("fits", "tight", "will not fit") and fit["memory"]["device"] in ("cpu", "cuda")
    assert [p["precision"] for p in fit["per_precision"]] == ["fp32", "bf16", "fp16", "int8", "int4", "bnb-int8",
                                                              "nf4", "fp4"]
    code, out, err = _run(capsys, "fit", str(tiny_model_dir))
    assert code == 0 and "99,648" in out and "2 · 2 layers · 256 tokens · 2 KV heads · 16 head dim" in out
    assert no_network == []


def test_fit_assumes_what_auto_loads_and_says_which(home, no_network, capsys, tiny_model_dir):
    """Issue 30: without --precision, fit judges the precision `auto` would load here and names it and why."""
    fit = _json(capsys, "fit", str(tiny_model_dir))
    assert fit["precision_rule"] in ("device float", "small gpu")
    assert fit["precision"] in ("bf16", "fp32", "fp16", "nf4")
    assert fit["precision_reason"].startswith(f"{fit['precision']}: ")
    code, out, err = _run(capsys, "fit", str(tiny_model_dir))
    assert code == 0 and f"weights in {fit['precision']}" in out
    assert f"  assumed     {fit['precision_reason']}" in out.splitlines()


@pytest.mark.default_model
def test_fit_of_the_default_model_assumes_the_int4_auto_loads(no_network, capsys, default_model_dir, monkeypatch):
    monkeypatch.setenv("MIAOHUI_HOME", str(default_model_dir.parent.parent))
    fit = _json(capsys, "fit", "default")
    if fit["memory"]["device"] != "cpu":
        pytest.skip("auto on a GPU is its float type (or nf4): the int4 rule is the CPU's")
    assert (fit["precision"], fit["precision_rule"]) == ("int4", "quality unmeasured")
    code, out, err = _run(capsys, "fit", "default")
    assert code == 0 and "weights in int4" in out and "  assumed     int4: what auto loads on this CPU" in out


@pytest.mark.default_model
def test_fit_of_the_default_model_offline(no_network, capsys, default_model_dir, monkeypatch):
    monkeypatch.setenv("MIAOHUI_HOME", str(default_model_dir.parent.parent))
    fit = _json(capsys, "fit", "default", "--context", "2048", "--precision", "bf16")
    assert fit["params"] == 134_515_008 and fit["kv_bytes_per_token"] == 23_040
    assert fit["kv_bytes"] == 23_040 * 2048 and fit["download_bytes"] is None
    assert no_network == []


def test_search_show_fit_pull_list_rm_against_the_fake_hub(home, fake_hub, only_fake_hub, capsys):
    hub = ["--allow-downloads", "--endpoint", fake_hub.url]
    found = _json(capsys, "search", "tiny", *hub, "--page-size", "5")
    assert set(found) == {"query", "sort", "format", "page", "page_size", "hits", "more"}
    assert [h["repo"] for h in found["hits"]] == [TINY, GGUF_REPO]
    assert set(found["hits"][0]) == {"repo", "downloads", "likes", "last_modified", "formats", "gated", "license"}
    page = _json(capsys, "show", TINY, *hub)
    assert page["repo"] == TINY and page["refusal"] is None and "model.safetensors" in page["needed"]
    assert {f["name"] for f in page["files"]} >= {"config.json", "pytorch_model.bin"}
    refused = _json(capsys, "show", PICKLE_ONLY, *hub)
    assert refused["format"] == "pickle only" and "pickle" in refused["refusal"]

    # fit of a Hub repo reads config.json only: no weights move.
    remote = _json(capsys, "fit", TINY, *hub, "--context", "100")
    assert remote["params"] == 99_648 and remote["download_bytes"] > 400_000
    assert not fake_hub.requests_for("model.safetensors")
    # fit of a GGUF file reads its header with a Range request, not the file.
    gguf = _json(capsys, "fit", GGUF_REPO, "--file", GGUF_F16, *hub)
    assert gguf["params"] == 99_648 and gguf["arch"]["file_quant"] == "F16"
    served = [e for e in fake_hub.requests_for(GGUF_F16) if e.status == 206]
    assert [e.range for e in served] == ["bytes=0-65535"]
    assert fake_hub.bytes_sent(GGUF_F16) == 65536 < len(fake_hub.repos[GGUF_REPO].files[GGUF_F16])

    pulled = _json(capsys, "pull", TINY, *hub)
    assert set(pulled) == {"repo", "revision", "path", "files", "total_bytes", "transferred_bytes", "resumed_bytes"}
    assert pulled["path"] == str(home / "models" / "miaohui-test--tiny-chat")
    listed = _json(capsys, "list")
    assert [m["name"] for m in listed["models"]] == ["miaohui-test--tiny-chat"]
    model = listed["models"][0]
    assert model["repo"] == TINY and model["format"] == "safetensors" and model["default"] is False
    assert set(model) == {"name", "path", "format", "size_bytes", "params", "precisions", "default", "repo", "problem"}
    # An installed model is fitted from disk, by its name or its repo id, offline.
    assert _json(capsys, "fit", TINY)["download_bytes"] is None
    code, out, err = _run(capsys, "pull", GGUF_REPO, *hub)
    assert code == 2 and "pick one with --file" in err and err.count("\n") == 1
    code, out, err = _run(capsys, "pull", GGUF_REPO, "--file", GGUF_Q8, *hub)
    assert code == 0 and "installed" in out and GGUF_Q8 in out
    assert _json(capsys, "rm", TINY) == {"removed": pulled["path"]}
    assert [m["name"] for m in _json(capsys, "list")["models"]] == [f"miaohui-test--tiny-chat-GGUF/{GGUF_Q8}"]
    assert only_fake_hub == []


def test_a_paused_download_resumes_in_another_process(home, fake_hub, only_fake_hub):
    import os
    import threading

    from engine.errors import CancelledError
    from engine.library.download import download

    pause = threading.Event()
    with pytest.raises(CancelledError):
        download(TINY, allow_downloads=True, endpoint=fake_hub.url, pause=pause, chunk_bytes=16 * 1024,
                 progress=lambda p: pause.set() if p.file == "model.safetensors" and p.file_done > 100_000 else None)
    env = {**os.environ, "MIAOHUI_HOME": str(home)}
    result = subprocess.run([sys.executable, "-m", "engine", "models", "pull", TINY, "--allow-downloads",
                             "--endpoint", fake_hub.url, "--json"], capture_output=True, text=True, cwd=ROOT,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    pulled = json.loads(result.stdout)
    assert pulled["resumed_bytes"] > 100_000 and pulled["transferred_bytes"] < pulled["total_bytes"]
    assert any(e.status == 206 for e in fake_hub.requests_for("model.safetensors"))


def test_bad_input_is_one_line_exit_2(home, capsys, no_network):
    for argv in (["rm", "../etc"], ["rm", "/etc/passwd"], ["rm", "nothing-here"], ["fit", "nothing-here"],
                 ["fit", "default"], ["fit", "x/y/z"], ["search", "x", "--allow-downloads", "--endpoint", "ftp://x"],
                 ["rm", "x", "--partial"], ["show", "not a repo", "--allow-downloads"]):
        code, out, err = _run(capsys, *argv)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (argv, err)
    assert no_network == []


def test_the_default_model_is_deleted_only_with_the_flag(home, capsys, tiny_model_dir):
    import shutil

    from engine.library import installed
    from engine.models.fetch import MARKER

    target = home / "models" / "SmolLM2-135M-Instruct"
    shutil.copytree(tiny_model_dir, target)
    (target / MARKER).write_text("{}")
    [default] = installed.list_installed()
    assert default.default and default.name == "SmolLM2-135M-Instruct"
    code, _out, err = _run(capsys, "rm", "default")
    assert code == 2 and "--allow-default" in err and target.is_dir()
    assert _json(capsys, "rm", "default", "--allow-default") == {"removed": str(target)}
    assert not target.exists()


def test_help_is_quick_and_lists_models():
    result = subprocess.run([sys.executable, "-m", "engine", "models", "--help"], capture_output=True, text=True,
                            cwd=ROOT, timeout=60)
    assert result.returncode == 0 and all(word in result.stdout for word in ("list", "search", "fit", "pull", "rm"))


def test_recommended_ranks_the_curated_list_offline_with_the_stored_bandwidth(home, no_network, capsys):
    from engine import paths
    from engine.bench import roofline
    from engine.library import fit
    from engine.library.curated import CURATED

    device = fit.machine_memory().device
    # Stamped fresh and quiet: a figure without its load would be measured again (roofline.stale_reason).
    stored = {"read_bytes_s": 20e9, "measured_at": time.time(), "others_cpu_share": 0.0}
    (paths.data_dir() / roofline.BANDWIDTH_FILE).write_text(json.dumps({device: stored}))
    data = _json(capsys, "recommended")
    assert data["bandwidth"]["read_bytes_s"] == 20e9 and len(data["models"]) == len(CURATED)
    assert {m["repo"] for m in data["models"]} == {c.repo for c in CURATED}
    for m in data["models"]:
        assert m["ceiling_tokens_per_s"] == 20e9 / m["bytes_per_token"]
    code, out, err = _run(capsys, "recommended")
    assert code == 0 and "Qwen/Qwen2.5-1.5B-Instruct" in out and "ceiling = bandwidth" in out
    assert no_network == []
