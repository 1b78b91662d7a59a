"""The fit estimate equals the formulas, and the engine's measured figures after a real load and reply."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import BadInputError, CorruptModelError
from engine.events import Finished, Message
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.library import arch as arch_mod
from engine.library.fit import FITS_FRACTION, Memory, architecture_of, estimate, machine_memory, verdict
from engine.shapes.gguf_header import parse, read_header
from engine.models import safety
from engine.models.loader import load_model
from tests.engine._local_models import write_llama_gguf
from tests.helpers.fake_hub import make_gguf

ROOT = Path(__file__).resolve().parents[3]
PLENTY = Memory("cpu", 64 << 30, "test")


def _by_hand(config: dict) -> int:
    """V·d + L·(q + k + v + o + gate/up/down + two norms) + final norm, tied head counted once."""
    v, d, layers = config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]
    h, kv, hd, inner = (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"],
                        config["intermediate_size"])
    per_layer = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * inner + 2 * d
    return v * d + layers * per_layer + d + (0 if config["tie_word_embeddings"] else v * d)


def test_tiny_model_parameters_and_kv_equal_the_formulas(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    arch = architecture_of(tiny_model_dir)
    est = estimate(arch, model="tiny", context=128, precision="bf16", memory=PLENTY)
    assert est.params == _by_hand(config) == safety.check_source(tiny_model_dir).param_count == 99_648
    assert est.params_estimate == 400 * 64 + 12 * 2 * 64 ** 2  # the seeds' V·d + 12·L·d²
    assert est.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2  # 2 · layers · kv heads · head dim · bf16
    assert est.kv_bytes == 128 * est.kv_bytes_per_token and est.kv_bytes_no_gqa == 2 * 2 * 128 * 64 * 2
    assert "99,648" in est.params_formula and "GQA: 4 query heads share 2 KV heads" in est.kv_formula
    assert est.total_bytes == est.weights_bytes + est.kv_bytes + est.working_bytes and est.verdict == "fits"
    fp32 = {p.precision: p for p in est.per_precision}["fp32"]
    assert fp32.kv_bytes_per_token == 2 * est.kv_bytes_per_token


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8", "int4", "bnb-int8", "nf4"])
def test_weights_bytes_equal_what_the_loader_builds(tiny_model_dir, precision):
    loaded = load_model(LoadSpec(model=str(tiny_model_dir), precision=precision, device="cpu"))
    arch = architecture_of(tiny_model_dir)
    # bitsandbytes computes in bf16 where the CPU has it natively, else fp32: the loaded model says which.
    est = estimate(arch, model="tiny", precision=precision, memory=PLENTY,
                   bnb_float_bytes=loaded.facts.kv_dtype_bytes)
    assert est.weights_bytes == loaded.facts.weights_bytes
    assert est.params == loaded.facts.params
    assert est.kv_bytes_per_token == loaded.facts.kv_bytes_per_token


@pytest.mark.default_model
@pytest.mark.slow
def test_default_model_fit_and_the_measured_kv_after_a_reply(default_model_dir):
    arch = architecture_of(default_model_dir)
    fits = [estimate(arch, model="default", context=n, precision="bf16", memory=PLENTY) for n in (512, 2048, 8192)]
    assert {f.params for f in fits} == {134_515_008}
    assert {f.kv_bytes_per_token for f in fits} == {23_040}  # 2 · 30 layers · 3 KV heads · 64 · 2 bytes
    assert [f.kv_bytes for f in fits] == [23_040 * 512, 23_040 * 2048, 23_040 * 8192]
    assert fits[0].kv_bytes_no_gqa == 2 * 30 * 512 * 576 * 2  # 3× more without GQA (9 heads vs 3)
    with pytest.raises(BadInputError, match="beyond the model's 8,192 positions"):
        estimate(arch, model="default", context=8193, memory=PLENTY)

    loaded = load_model(LoadSpec(model=str(default_model_dir), precision="bf16", device="cpu"))
    events = list(ChatSession(loaded).generate([Message("user", "What is the capital of France?")],
                                               SamplingConfig(temperature=0.0, max_new_tokens=8)))
    metrics = next(e for e in events if isinstance(e, Finished)).metrics
    cached = metrics.kv_cache_bytes_formula // loaded.facts.kv_bytes_per_token
    assert cached in (metrics.context_tokens - 1, metrics.context_tokens) and cached > 10
    assert metrics.kv_cache_bytes / cached == fits[0].kv_bytes_per_token == 23_040
    assert loaded.facts.weights_bytes == fits[0].weights_bytes


def test_gguf_header_gives_the_same_numbers_as_the_config(tiny_model_dir, tmp_path):
    path = make_gguf(tmp_path / "tiny-Q8_0.gguf", "Q8_0")
    from_gguf = architecture_of(path)
    from_config = architecture_of(tiny_model_dir)
    assert from_gguf.source == "GGUF header" and from_gguf.file_quant == "Q8_0"
    assert from_gguf.stored_params == from_config.params == 99_648
    # (in one precision: `auto` itself differs, int8 for the GGUF's Q8_0 blocks, the float type for the config)
    a = estimate(from_gguf, model="gguf", context=200, precision="bf16", memory=PLENTY)
    b = estimate(from_config, model="config", context=200, precision="bf16", memory=PLENTY)
    assert [p.weights_bytes for p in a.per_precision] == [p.weights_bytes for p in b.per_precision]
    assert a.kv_bytes == b.kv_bytes and a.params_formula.startswith("sum of the GGUF header's tensor elements")
    # A folder holding one GGUF file is that file.
    assert architecture_of(tmp_path).stored_params == 99_648


def test_gguf_header_is_read_from_its_first_bytes_only(tmp_path):
    path = make_gguf(tmp_path / "tiny-F16.gguf", "F16")
    data = path.read_bytes()
    asked: list[int] = []

    def first(count: int) -> bytes:
        asked.append(count)
        return data[:count]

    header = read_header(first, "tiny", size=None)
    assert header.elements == 99_648 and header.header_bytes < len(data)
    assert asked == [64 * 1024]  # one read of the first 64 KiB held the whole header
    # A header longer than the first read is read again, four times as far, until it parses.
    asked.clear()
    big = make_gguf(tmp_path / "big-vocab.gguf", "F32", vocab=40_000).read_bytes()
    big_header = read_header(lambda n: asked.append(n) or big[:n], "big", size=len(big))
    assert big_header.elements > 40_000 * 64 and asked[:2] == [64 * 1024, 256 * 1024]
    with pytest.raises(CorruptModelError, match="truncated"):
        read_header(lambda n: data[:header.header_bytes // 2], "cut", size=header.header_bytes // 2)
    with pytest.raises(CorruptModelError, match="bad magic"):
        parse(b"GGML" + data[4:], "wrong")


def test_verdict_rule():
    assert verdict(int(FITS_FRACTION * 1000), 1000) == "fits"
    assert verdict(900, 1000) == "tight" and verdict(1000, 1000) == "tight"
    assert verdict(1001, 1000) == "will not fit"
    arch = arch_mod.from_config({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                                 "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                                 "vocab_size": 128256, "max_position_embeddings": 131072,
                                 "tie_word_embeddings": False})
    est = estimate(arch, model="8B", context=8192, precision="bf16", memory=Memory("cpu", 8 << 30, "test"))
    assert est.params == 8_030_261_248  # Llama-3-8B's published count
    assert est.kv_bytes_per_token == 131_072 and est.verdict == "will not fit"
    assert estimate(arch, model="8B", context=8192, precision="int4", memory=Memory("cpu", 32 << 30, "t")).verdict == "fits"


def test_unknown_layouts_use_the_seeds_estimate():
    arch = arch_mod.from_config({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                                 "vocab_size": 50257, "n_positions": 1024})
    est = estimate(arch, model="gpt2", precision="bf16", memory=PLENTY)
    assert est.params == 50257 * 768 + 12 * 12 * 768 ** 2 and est.params_formula.startswith("estimate")
    assert est.context == 1024 and est.kv_bytes_per_token == 2 * 12 * 12 * 64 * 2
    assert {p.precision: p.usable for p in est.per_precision}["int8"] is False


def test_bad_values_are_one_line_errors(tiny_model_dir):
    arch = architecture_of(tiny_model_dir)
    for context in (0, -5, 1.5, True):
        with pytest.raises(BadInputError):
            estimate(arch, model="t", context=context, memory=PLENTY)
    with pytest.raises(BadInputError, match="unknown precision"):
        estimate(arch, model="t", precision="int3", memory=PLENTY)
    with pytest.raises(CorruptModelError, match="num_hidden_layers"):
        arch_mod.from_config({"model_type": "llama", "num_hidden_layers": 10 ** 9, "hidden_size": 8,
                              "num_attention_heads": 1, "vocab_size": 10})


def test_auto_precision_follows_the_loaders_rule(tiny_model_dir, monkeypatch):
    pytest.importorskip("torch")  # with torch loaded, "auto" asks engine/cpu.py as the loader does

    arch = architecture_of(tiny_model_dir)
    monkeypatch.setenv("MIAOHUI_CPU_BF16", "0")
    assert estimate(arch, model="t", memory=PLENTY).precision == "fp32"
    monkeypatch.setenv("MIAOHUI_CPU_BF16", "1")
    assert estimate(arch, model="t", memory=PLENTY).precision == "bf16"


def test_machine_memory_reads_free_ram_or_gpu():
    memory = machine_memory()
    assert memory.free_bytes > 0 and memory.device in ("cpu", "cuda")
    assert machine_memory("cpu").source == "psutil.virtual_memory().available"


def test_the_library_imports_without_torch():
    code = ("import sys, engine.library.fit, engine.library.hub, engine.library.download, engine.library.installed, "
            "engine.cli.models; assert 'torch' not in sys.modules, 'torch'; "
            "import engine.library.fit as f; print(f.machine_memory().device)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "cpu"


def test_auto_judges_what_the_loader_loads_and_says_why(tiny_model_dir, tmp_path, home):
    """Issue 30: `auto`'s fit is judged in the precision `auto` loads on this machine, by the loader's own policy
    (engine/quant/precision.py) and without loading: the tiny model's float type (under the quality bar's size
    floor), a Q4_1 GGUF's 4-bit blocks kept as int4, a Q5_0 GGUF dequantized to the float type."""
    for path in (tiny_model_dir, write_llama_gguf(tiny_model_dir, tmp_path / "t.Q4_1.gguf", "Q4_1", "Q8_0"),
                 write_llama_gguf(tiny_model_dir, tmp_path / "t.Q5_0.gguf", "Q5_0", "F32")):
        arch = architecture_of(path)
        est = estimate(arch, model="t", memory=PLENTY)
        loaded = load_model(LoadSpec(model=str(path), precision="auto", device="cpu"))
        assert est.precision == loaded.facts.precision, path.name
        assert est.weights_bytes == arch.weights_bytes(est.precision)
        assert est.precision_reason.startswith(f"{est.precision}: ")
    assert (est.precision_rule, estimate(architecture_of(tmp_path / "t.Q4_1.gguf"), model="t",
                                         memory=PLENTY).precision_rule) == ("device float", "gguf blocks")
    asked = estimate(architecture_of(tiny_model_dir), model="t", precision="fp16", memory=PLENTY)
    assert (asked.precision, asked.precision_rule, asked.precision_reason) == ("fp16", "asked", "fp16: asked for")


@pytest.mark.default_model
def test_auto_on_the_default_model_is_the_int4_the_loader_loads(default_model_dir):
    """The loader's `auto` loads the default model in int4 (its measured agreement meets the bar:
    tests/engine/quant/test_auto_quant.py) and keeps its GGUF's Q4_1 blocks: the fit judges int4 for both, not bf16."""
    from engine.models.fetch import default_gguf

    arch = architecture_of(default_model_dir)
    est = estimate(arch, model="default", memory=PLENTY)
    assert (est.precision, est.precision_rule) == ("int4", "quality unmeasured")
    assert est.weights_bytes == arch.weights_bytes("int4")
    assert est.weights_bytes < estimate(arch, model="default", precision="bf16", memory=PLENTY).weights_bytes / 2
    assert "reaches 90%" in est.precision_reason and "measured at the first load" in est.precision_reason
    gguf_file = default_gguf(default_model_dir)
    if gguf_file is not None:
        kept = estimate(architecture_of(gguf_file), model="default gguf", memory=PLENTY)
        assert (kept.precision, kept.precision_rule) == ("int4", "gguf blocks")
