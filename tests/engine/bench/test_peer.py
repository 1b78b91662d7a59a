"""engine.bench.peer and the llama.cpp column: the build flags from a cpuinfo text, the notes when the peer is
missing or dies (a real child killed by SIGILL), the table with and without the column, and, where
llama-cpp-python is installed (`make bench-peer`; CI does not install it), the real peer on the default GGUF."""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

import pytest

from engine.bench import peer
from engine.bench.peer import INSTALL_HINT, PeerError, PeerProcess, cmake_args, crash_note, gguf_for
from engine.bench.report import format_table
from engine.bench.run import open_peer
from engine.bench.variants import LlamaCpp
from engine.events import Message
from tests.helpers.scripted_child import scripted_child

_SAPPHIRE_RAPIDS = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                    "flags\t\t: fpu sse2 avx f16c fma avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 "
                    "avx512vbmi amx_tile amx_bf16 amx_int8\n\nprocessor\t: 1\nflags\t\t: fpu\n")
_HASWELL = "processor\t: 0\nflags\t\t: fpu sse2 avx f16c fma avx2 bmi2\n"


# ---------------------------------------------------------------------------------------- build flags


def test_avx512_cpu_gets_native_off_and_its_extensions_named():
    args = cmake_args(_SAPPHIRE_RAPIDS)
    assert args[0] == "-DGGML_NATIVE=OFF"
    for option in ("-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_AVX512=ON",
                   "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AVX512_VBMI=ON"):
        assert option in args
    assert not [a for a in args if "AMX" in a]  # the native build that crashed had AMX: left off
    assert len(args) == len(set(args))


def test_avx2_cpu_gets_no_avx512():
    args = cmake_args(_HASWELL)
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX2=ON" in args
    assert not [a for a in args if "AVX512" in a]


def test_cpu_without_avx2_or_flags_keeps_llama_cpps_defaults():
    assert cmake_args("processor\t: 0\nFeatures\t: fp asimd\n") == []
    assert cmake_args("") == []


def test_module_prints_this_cpus_flags(capsys):
    assert peer.main(["--cmake-args"]) == 0
    printed = capsys.readouterr().out.split()
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    assert printed == cmake_args(cpuinfo)


# ---------------------------------------------------------------------------------------- notes


def test_gguf_for_the_bench_model(tmp_path):
    file = tmp_path / "m.Q4_1.gguf"
    file.write_bytes(b"GGUF")
    assert gguf_for("default", file) == file
    assert gguf_for("default", None) is None
    assert gguf_for(str(file), None) == file
    assert gguf_for(str(tmp_path), file) is None  # a folder has no GGUF
    assert gguf_for(str(tmp_path / "missing.gguf"), None) is None


def test_crash_notes_name_the_rebuild():
    note = crash_note(-4, "")
    assert "SIGILL" in note and "make bench-peer" in note and "GGML_NATIVE=OFF" in note
    assert "make bench-peer" in crash_note(-11, "")
    assert "status 1 (boom)" in crash_note(1, "boom")


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"model": "default", "no_peer": False, **kw})


def test_not_installed_gives_the_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # what an environment without it looks like to import
    assert not peer.installed()
    variant, info = open_peer(_args(), "cpu", tokenizer=None, n_ctx=64)
    assert variant is None
    assert info["note"] == INSTALL_HINT == \
        "llama.cpp column: `make bench-peer` installs llama-cpp-python (compiles ~5 min)"
    assert info["ran"] is False


def test_no_peer_and_gpu_runs_leave_the_column_out():
    assert "--no-peer" in open_peer(_args(no_peer=True), "cpu", None, 64)[1]["note"]
    assert "CPU runs only" in open_peer(_args(), "cuda", None, 64)[1]["note"]


@pytest.mark.skipif(not hasattr(os, "kill") or sys.platform == "win32", reason="POSIX signals")
def test_child_killed_by_sigill_at_load_is_a_peer_error(tmp_path):
    python = scripted_child(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGILL)\n")
    with pytest.raises(PeerError) as caught:
        PeerProcess(tmp_path / "m.gguf", 1, 64, python=python)
    assert "SIGILL" in str(caught.value) and "make bench-peer" in str(caught.value)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_child_dying_in_prefill_ends_the_column_not_the_bench(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    python = scripted_child(tmp_path, """
        import json, os, signal, sys
        print(json.dumps({"ready": True, "version": "test"}), flush=True)
        sys.stdin.readline()
        os.kill(os.getpid(), signal.SIGILL)
        """)
    process = PeerProcess(tmp_path / "m.gguf", 1, 64, python=python)
    variant = LlamaCpp(process, AutoTokenizer.from_pretrained(tiny_model_dir))
    sample = variant.run([Message("user", "Hi")], 4)
    assert (sample.ttft_s, sample.decode_tok_s, sample.ids) == (None, None, ())
    assert "SIGILL" in variant.note and "make bench-peer" in variant.note
    assert variant.run([Message("user", "Hi")], 4).ids == ()  # later runs: null, no new child
    process.close()


# ---------------------------------------------------------------------------------------- the report


def test_report_without_the_column_says_why(quick_json):
    info = quick_json["peer"]
    assert info["ran"] is False and info["note"]  # the tiny model has no GGUF (or llama_cpp is missing)
    assert quick_json["metrics"]["decode_tok_s"]["median"]["llama.cpp"] is None  # the key is kept, null
    table = format_table(quick_json)
    header = next(line for line in table.splitlines() if line.startswith("figure"))
    assert "llama.cpp" not in header
    assert info["note"] in table


def test_report_with_the_column(quick_json):
    result = copy.deepcopy(quick_json)
    result["peer"].update(ran=True, note=None, version="0.3.36", gguf="/m/SmolLM2.Q4_1.gguf", threads=2,
                          first_difference_vs_baseline=3)
    result["metrics"]["decode_tok_s"]["median"]["llama.cpp"] = 123.4
    result["metrics"]["ttft_long_s"]["median"]["llama.cpp"] = 0.25
    result["precisions"]["int4"] = {
        "weights_bytes": 1e8, "decode_tok_s": {"median": {"fastpath": 61.7}, "ratio": {}},
        "ttft_short_s": {"median": {"fastpath": 0.1}}, "ttft_long_s": {"median": {"fastpath": 0.3}},
        "decode_tok_s_long": {"median": {"fastpath": 50.0}}, "top1_agreement": 0.99, "perplexity": 3.0}
    table = format_table(result)
    header = next(line for line in table.splitlines() if line.startswith("figure"))
    assert "llama.cpp" in header
    decode = next(line for line in table.splitlines() if line.startswith("decode_tok_s ("))
    assert "123.4" in decode
    assert "250 ms" in next(line for line in table.splitlines() if line.startswith("ttft_long_s"))
    assert "llama.cpp 0.3.36: SmolLM2.Q4_1.gguf, 2 threads" in table and "at token 3" in table
    assert "fastpath int4 ÷ llama.cpp on SmolLM2.Q4_1.gguf (decode): 0.5×" in table


# ---------------------------------------------------------------------------------------- the real peer


@pytest.mark.default_model
def test_real_peer_answers_greedy_on_the_default_gguf(default_model_dir):
    if not peer.installed():
        pytest.skip("llama-cpp-python is not installed (optional: `make bench-peer`)")
    from engine.models.fetch import default_gguf
    from transformers import AutoTokenizer

    gguf = default_gguf(default_model_dir)
    if gguf is None:
        pytest.skip("the default model was fetched before its GGUF was kept: `python -m engine fetch` in a new home")
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    process = PeerProcess(gguf, 1, 256)
    try:
        variant = LlamaCpp(process, tokenizer)
        # The bench's system prompt: with the template's default one the first token is a near-tie ("The" 0.14,
        # "L" 0.15 in llama.cpp; the reverse in transformers) and the greedy answer wanders off to "L'Étoile".
        messages = [Message("system", "You are a helpful assistant."),
                    Message("user", "What is the capital of France?")]
        first = variant.run(messages, 16)
        again = variant.run(messages, 16)
        # The context sweep's decode runs: the same prompt again with its cache kept gives the same greedy tokens.
        prompt = tokenizer("The capital of France is")["input_ids"]
        whole = process.generate(prompt, 8)
        kept = process.generate(prompt, 8, reuse=True)
    finally:
        process.close()
    assert variant.note is None, variant.note
    assert len(first.ids) == 16 and first.ttft_s > 0 and first.decode_tok_s > 0
    assert again.ids == first.ids  # greedy, the whole prompt prefilled each time
    assert "Paris" in tokenizer.decode(first.ids)
    assert kept.ids == whole.ids and len(kept.ids) == 8
