"""engine.models.loader: facts of what was loaded, precision/device rules, progress, cancel, load failures."""

from __future__ import annotations

import gc
import shutil
import threading
import weakref

import gguf
import pytest
import torch
from transformers import AutoModelForCausalLM

import engine.models.loader
from engine.errors import (BadInputError, CancelledError, CorruptModelError, EngineOutOfMemoryError,
                           ModelNotFoundError)
from engine.models.facts import count_params, weights_bytes
from engine.models.loader import LoadProgress, ResolvedSource, bnb_config, load_model, model_kwargs
from engine.inputs import LoadSpec
from tests.engine._local_models import add_to_hf_cache, write_llama_gguf


def _spec(folder, **kw) -> LoadSpec:
    return LoadSpec(model=str(folder), **kw)


def test_tiny_model_facts(tiny_model_dir):
    loaded = load_model(_spec(tiny_model_dir, precision="fp32", device="cpu"))
    facts = loaded.facts
    assert (facts.layers, facts.hidden_size, facts.heads, facts.kv_heads, facts.head_dim) == (2, 64, 4, 2, 16)
    assert facts.context_length == 256 and facts.vocab_size == len(loaded.tokenizer)
    # Tied embeddings: the shared matrix is counted once, like the on-disk tensors.
    unique = {id(p): p.numel() for p in loaded.model.parameters()}
    assert facts.params == sum(unique.values())
    assert loaded.model.get_input_embeddings().weight is loaded.model.get_output_embeddings().weight
    assert facts.weights_bytes == facts.params * 4 + sum(b.numel() * b.element_size() for b in loaded.model.buffers())
    assert facts.precision == "fp32" and facts.device == "cpu" and facts.kv_dtype_bytes == 4
    assert not loaded.model.training
    im_end = loaded.tokenizer.convert_tokens_to_ids("<|im_end|>")
    endoftext = loaded.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert im_end in loaded.eos_token_ids and endoftext in loaded.eos_token_ids


@pytest.mark.parametrize("precision,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_16_bit_halves_weights_bytes(tiny_model_dir, precision, dtype):
    fp32 = load_model(_spec(tiny_model_dir, precision="fp32", device="cpu")).facts
    half = load_model(_spec(tiny_model_dir, precision=precision, device="cpu"))
    assert next(half.model.parameters()).dtype == dtype
    assert half.facts.params == fp32.params and half.facts.kv_dtype_bytes == 2
    # Parameters halve; the rotary inv_freq buffer stays fp32.
    assert half.facts.weights_bytes < fp32.weights_bytes * 0.51 + 4096


def test_eager_attention_on_request(tiny_model_dir):
    # The attention view needs weights out of every layer, which only the eager kernel returns.
    loaded = load_model(_spec(tiny_model_dir, precision="fp32", attn_implementation="eager"))
    assert loaded.model.config._attn_implementation == "eager"
    ids = loaded.tokenizer("Hello", return_tensors="pt").input_ids
    with torch.inference_mode():
        attentions = loaded.model(ids, output_attentions=True).attentions
    assert len(attentions) == 2 and attentions[0].shape == (1, 4, ids.shape[1], ids.shape[1])  # (batch, heads, q, k)


def test_progress_stages_in_order(tiny_model_dir):
    seen: list[LoadProgress] = []
    load_model(_spec(tiny_model_dir, precision="fp32"), progress=seen.append)
    stages = [p.stage for p in seen]
    assert stages[0] == "checking files" and stages[-1] == "ready"
    assert stages.index("reading config") < stages.index("loading weights") < stages.index("ready")
    fractions = [p.fraction for p in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_cancel_between_stages_raises_and_keeps_nothing(tiny_model_dir):
    cancel = threading.Event()
    built: list[weakref.ref] = []

    def loader(folder, **kwargs):
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        built.append(weakref.ref(model))
        cancel.set()  # the user presses Stop while weights load
        return model

    with pytest.raises(CancelledError):
        load_model(_spec(tiny_model_dir, precision="fp32"), cancel=cancel, from_pretrained=loader)
    gc.collect()
    assert built and built[0]() is None


def test_oom_at_load_is_clear_and_keeps_nothing(tiny_model_dir):
    built: list[weakref.ref] = []

    def loader(folder, **kwargs):
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        built.append(weakref.ref(model))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(EngineOutOfMemoryError) as info:
        load_model(_spec(tiny_model_dir, precision="bf16"), from_pretrained=loader)
    message = str(info.value)
    assert "\n" not in message and "nf4" in message
    assert info.value.__traceback__ is None or info.value.__cause__ is None
    gc.collect()
    assert built and built[0]() is None


def test_memory_error_at_load_is_oom(tiny_model_dir):
    def loader(folder, **kwargs):
        raise MemoryError()

    with pytest.raises(EngineOutOfMemoryError):
        load_model(_spec(tiny_model_dir, precision="fp32"), from_pretrained=loader)


def test_bad_options_refused(tiny_model_dir):
    with pytest.raises(BadInputError):
        load_model(_spec(tiny_model_dir, precision="int3"))
    with pytest.raises(BadInputError):
        load_model(_spec(tiny_model_dir, device="tpu"))
    with pytest.raises(BadInputError):
        load_model(_spec(tiny_model_dir, device="cpu", offload=True))


def test_cuda_asked_without_cuda_is_bad_input(tiny_model_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(BadInputError, match="no CUDA GPU"):
        load_model(_spec(tiny_model_dir, device="cuda"))


def test_tokenizer_failure_keeps_no_model(tiny_model_dir):
    built: list[weakref.ref] = []

    def loader(folder, **kwargs):
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        built.append(weakref.ref(model))
        return model

    def broken_tokenizer(folder, **kwargs):
        raise OSError("tokenizer.json: unexpected end of data\nmore detail")

    with pytest.raises(CorruptModelError) as info:
        load_model(_spec(tiny_model_dir, precision="fp32"), from_pretrained=loader,
                   tokenizer_from_pretrained=broken_tokenizer)
    assert "\n" not in str(info.value) and "tokenizer.json" in str(info.value)
    gc.collect()
    assert built and built[0]() is None


def test_missing_folder_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("MIAOHUI_HOME", str(tmp_path / "home"))
    with pytest.raises(ModelNotFoundError):
        load_model(LoadSpec(model=str(tmp_path / "nope")))
    assert not (tmp_path / "home").exists()  # a path is not looked up as an installed name: no data folder made


@pytest.mark.default_model
def test_default_model_facts(default_model_dir):
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision="bf16", device="cpu"))
    f = loaded.facts
    assert (f.layers, f.hidden_size, f.heads, f.kv_heads, f.head_dim) == (30, 576, 9, 3, 64)
    assert (f.vocab_size, f.context_length, f.params) == (49152, 8192, 134_515_008)
    assert f.attention_kind == "GQA" and f.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2
    assert count_params(loaded.model) == f.params and weights_bytes(loaded.model) == f.weights_bytes
    assert f.weights_bytes >= f.params * 2
    assert loaded.tokenizer.convert_tokens_to_ids("<|im_end|>") in loaded.eos_token_ids


# ---------------------------------------------------------------- other sources


def test_gguf_file_loads_with_the_same_weights(tiny_model_dir, tmp_path):
    gguf_path = write_llama_gguf(tiny_model_dir, tmp_path / "tiny.Q.gguf")
    reference = load_model(_spec(tiny_model_dir, precision="fp32"))
    loaded = load_model(LoadSpec(model=str(gguf_path), precision="fp32"))
    assert loaded.facts.params == reference.facts.params and loaded.facts.source == str(gguf_path)
    assert (loaded.facts.layers, loaded.facts.heads, loaded.facts.kv_heads) == (2, 4, 2)
    text = "Hello, how are you? 秒回"
    ids = reference.tokenizer(text, return_tensors="pt").input_ids
    assert loaded.tokenizer(text, return_tensors="pt").input_ids.tolist() == ids.tolist()
    with torch.inference_mode():
        torch.testing.assert_close(loaded.model(ids).logits, reference.model(ids).logits)
    assert reference.tokenizer.convert_tokens_to_ids("<|im_end|>") in loaded.eos_token_ids


def test_folder_holding_one_gguf_loads_it(tiny_model_dir, tmp_path):
    folder = tmp_path / "gguf-repo"
    folder.mkdir()
    write_llama_gguf(tiny_model_dir, folder / "tiny-f32.gguf")
    loaded = load_model(LoadSpec(model=str(folder), precision="fp32"))
    assert loaded.facts.name == "tiny-f32" and loaded.facts.source.endswith("tiny-f32.gguf")
    (folder / "tiny-q8.gguf").write_bytes((folder / "tiny-f32.gguf").read_bytes())
    with pytest.raises(BadInputError, match="2 .gguf files"):
        load_model(LoadSpec(model=str(folder)))


def test_repo_id_from_local_hf_cache(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    add_to_hf_cache(tmp_path / "hub", "acme/tiny-chat", tiny_model_dir)
    loaded = load_model(LoadSpec(model="acme/tiny-chat", precision="fp32"))
    assert loaded.facts.name == "tiny-chat" and loaded.facts.source == "acme/tiny-chat"
    with pytest.raises(ModelNotFoundError, match="not in the local Hugging Face cache"):
        load_model(LoadSpec(model="acme/other-model"))


def test_a_name_from_models_list_loads_the_installed_model(home, tiny_model_dir, tmp_path, monkeypatch):
    # `python -m engine models list` shows names; `--model` takes them (and the repo id a download came from).
    models = home / "models"
    shutil.copytree(tiny_model_dir, models / "acme--tiny-chat")
    (models / "ggufs").mkdir()
    gguf_path = write_llama_gguf(tiny_model_dir, models / "ggufs" / "tiny.gguf")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))  # the library, not the cache, has it
    monkeypatch.chdir(tmp_path)
    for name in ("acme--tiny-chat", "acme/tiny-chat"):
        loaded = load_model(LoadSpec(model=name, precision="fp32"))
        assert loaded.facts.name == "acme--tiny-chat" and loaded.facts.source == str(models / "acme--tiny-chat")
    loaded = load_model(LoadSpec(model="ggufs/tiny.gguf", precision="fp32"))
    assert loaded.facts.name == "tiny" and loaded.facts.source == str(gguf_path)
    # A folder of that name where the command runs is what the user pointed at: a path wins over a name.
    shutil.copytree(tiny_model_dir, tmp_path / "acme--tiny-chat")
    assert load_model(LoadSpec(model="acme--tiny-chat", precision="fp32")).facts.source == "acme--tiny-chat"
    with pytest.raises(ModelNotFoundError, match=r"installed model \(`python -m engine models list`\)") as info:
        load_model(LoadSpec(model="not-installed"))
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- bitsandbytes


@pytest.mark.parametrize("precision", ["bnb-int8", "nf4", "fp4"])
def test_bitsandbytes_on_cpu_tiny(tiny_model_dir, precision):
    fp32 = load_model(_spec(tiny_model_dir, precision="fp32", device="cpu"))
    loaded = load_model(_spec(tiny_model_dir, precision=precision, device="cpu", bnb_compute_dtype="fp32"))
    assert loaded.facts.precision == precision and loaded.facts.params == fp32.facts.params
    assert loaded.facts.weights_bytes < fp32.facts.weights_bytes
    linear = loaded.model.model.layers[0].self_attn.q_proj
    assert type(linear).__name__ == ("Linear8bitLt" if precision == "bnb-int8" else "Linear4bit")
    ids = loaded.tokenizer("Hello", return_tensors="pt").input_ids
    with torch.inference_mode():
        logits = loaded.model(ids).logits  # (batch, seq, vocab)
    assert logits.shape == (1, ids.shape[1], fp32.facts.vocab_size) and torch.isfinite(logits).all()


def test_quantized_load_reports_quantizing(tiny_model_dir):
    seen: list[str] = []
    load_model(_spec(tiny_model_dir, precision="nf4", bnb_compute_dtype="fp32"), progress=lambda p: seen.append(p.stage))
    assert seen.index("loading weights") < seen.index("quantizing") < seen.index("ready")


def test_from_pretrained_arguments_per_device_and_precision(tiny_model_dir):
    folder = ResolvedSource(folder=tiny_model_dir, name="tiny")
    cpu = model_kwargs(LoadSpec(), folder, "cpu", "bf16")
    assert cpu["dtype"] == torch.bfloat16 and cpu["use_safetensors"] and cpu["local_files_only"]
    assert "device_map" not in cpu and not cpu["trust_remote_code"] and "quantization_config" not in cpu
    cuda = model_kwargs(LoadSpec(attn_implementation="eager"), folder, "cuda", "fp16")
    assert cuda["device_map"] == {"": "cuda:0"} and cuda["dtype"] == torch.float16
    assert cuda["attn_implementation"] == "eager"
    nf4 = model_kwargs(LoadSpec(bnb_compute_dtype="bf16"), folder, "cuda", "nf4")
    assert nf4["quantization_config"].bnb_4bit_compute_dtype == torch.bfloat16 and nf4["dtype"] == torch.bfloat16
    offload = model_kwargs(LoadSpec(offload=True, offload_gpu_bytes=10**8), folder, "cuda", "bnb-int8")
    assert offload["device_map"] == "auto" and offload["max_memory"][0] == 10**8
    assert offload["quantization_config"].llm_int8_enable_fp32_cpu_offload
    gguf = model_kwargs(LoadSpec(), ResolvedSource(folder=tiny_model_dir, name="t", gguf_file="t.gguf"), "cpu", "fp32")
    assert gguf["gguf_file"] == "t.gguf" and "use_safetensors" not in gguf


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["bf16", "nf4", "bnb-int8"])
def test_cuda_load(tiny_model_dir, precision):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    loaded = load_model(_spec(tiny_model_dir, precision=precision, device="cuda"))
    assert loaded.facts.device.startswith("cuda") and loaded.facts.precision == precision


@pytest.mark.cuda
def test_cuda_offload_reports_split(tiny_model_dir):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    loaded = load_model(_spec(tiny_model_dir, precision="bf16", device="cuda", offload=True, offload_gpu_bytes=60_000))
    assert loaded.facts.device_map and "cpu" in set(loaded.facts.device_map.values())


def test_bnb_config_options():
    cfg = bnb_config("nf4", "bf16", double_quant=False, offload=False)
    assert cfg.load_in_4bit and cfg.bnb_4bit_quant_type == "nf4" and not cfg.bnb_4bit_use_double_quant
    assert cfg.bnb_4bit_compute_dtype == torch.bfloat16
    assert bnb_config("bnb-int8", "fp32", double_quant=True, offload=True).llm_int8_enable_fp32_cpu_offload


def _first_reply_token(loaded) -> str:
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                               add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        logits = loaded.model(**ids).logits  # (batch, seq, vocab)
    return loaded.tokenizer.decode(logits[0, -1].argmax())


@pytest.mark.default_model
@pytest.mark.slow  # bitsandbytes quantises on the CPU in plain torch ops: ~10 s a load, more on a busy machine
@pytest.mark.parametrize("precision,max_bytes", [("bnb-int8", 170_000_000), ("nf4", 120_000_000),
                                                 ("int8", 136_000_000), ("int4", 95_000_000)])
def test_default_model_quantized_on_cpu(default_model_dir, precision, max_bytes, aten_kernels):
    # bf16 for the unquantised parts, as on a GPU: 269 MB bf16 -> ~163 MB bnb-int8 -> ~112 MB nf4; the native
    # int8/int4 also keep the embedding table in int8: ~135 MB and ~95 MB (0.50x and 0.35x of bf16).
    loaded = load_model(LoadSpec(model=str(default_model_dir), precision=precision, device="cpu",
                                 bnb_compute_dtype="bf16"))
    assert loaded.facts.params == 134_515_008 and loaded.facts.weights_bytes < max_bytes
    # As in bf16: "The capital of France is Paris." Pinned on aten's bf16-activation kernels (aten_kernels): with int8
    # activations (engine/quant/tiled.py, measured in docs/BENCHMARK.md) int4's first token is "L", and
    # tests/engine/quant/test_quant.py's Paris test checks that path's answer.
    assert _first_reply_token(loaded).strip() == "The"


def test_gguf_with_an_absurd_block_count_is_refused_before_the_model_is_built(tiny_model_dir, tmp_path, monkeypatch):
    # A GGUF has no config.json: its numbers come from metadata, checked once transformers has read them.
    real = gguf.GGUFWriter.add_block_count
    monkeypatch.setattr(gguf.GGUFWriter, "add_block_count", lambda self, _n: real(self, 100000))
    path = write_llama_gguf(tiny_model_dir, tmp_path / "tiny.gguf")
    built = []
    with pytest.raises(CorruptModelError, match=r"tiny\.gguf: num_hidden_layers is 100000, not a whole number"):
        load_model(LoadSpec(model=str(path), precision="fp32", device="cpu"),
                   from_pretrained=lambda *a, **k: built.append(1))
    assert built == []  # refused before from_pretrained was asked to build anything
