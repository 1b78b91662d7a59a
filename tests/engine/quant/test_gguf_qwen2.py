"""A Qwen2-shaped GGUF (q/k/v biases beside 4-bit projections) loaded natively (engine/quant/gguf_quant.py).

The file is written here from a random-weight Qwen2 model built from transformers' Qwen2Config (Qwen2.5-0.5B's
ratios, scaled down; tied head as that model has it) with gguf's own writer and quantizer, as llama.cpp's
converter lays a Qwen2 out: Q4_0 projections, F32 biases and norms, a Q8_0 token embedding. What must hold:
``auto`` keeps the 4-bit blocks as int4 (a layout with biases used to be refused and dequantized to float), the
biases stay exactly the file's fp32 values beside the kernel, the note says so, the model takes the fast path,
and its logits stay within the int4 kernel's rounding of the same file dequantized to fp32 by transformers.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import quantize
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from engine.executor.fastpath import FastRunner
from engine.executor.runners import choose_runner
from engine.inputs import LoadSpec
from engine.quant.gguf_quant import GGUFFile, blocks_precision
from engine.models.loader import load_model
from tests.engine._local_models import gguf_writer
from tests.helpers.reference_forward import random_prompt
from tests.helpers.tiny_model import build_tiny_tokenizer

LOGIT_TOLERANCE = 0.1  # int4 kernel in bf16 against the fp32 dequantized file (measured ~0.02)


def _write_qwen2_gguf(dest: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A random Qwen2 as a GGUF at ``dest``; returns it and the model's fp32 tensors by transformers' name."""
    tokenizer = build_tiny_tokenizer()
    bos, eos = tokenizer.convert_tokens_to_ids("<|im_start|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=224, intermediate_size=1216, num_hidden_layers=2,
                         num_attention_heads=7, num_key_value_heads=1, max_position_embeddings=512,
                         rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                         bos_token_id=bos, eos_token_id=eos)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(torch.randn_like(param) * 0.5)
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    state = {name: tensor.detach().numpy().copy() for name, tensor in model.state_dict().items()}

    writer = gguf_writer(dest, "qwen2", config, tokenizer, pre="qwen2")

    def q4(name: str, data: np.ndarray) -> None:
        writer.add_tensor(name, quantize(data, gguf.GGMLQuantizationType.Q4_0), raw_dtype=gguf.GGMLQuantizationType.Q4_0)

    writer.add_tensor("token_embd.weight", quantize(state["model.embed_tokens.weight"], gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        writer.add_tensor(f"blk.{i}.attn_norm.weight", state[p + "input_layernorm.weight"])
        for short, name in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj")):
            q4(f"blk.{i}.attn_{short}.weight", state[p + f"self_attn.{name}.weight"])
            writer.add_tensor(f"blk.{i}.attn_{short}.bias", state[p + f"self_attn.{name}.bias"])
        q4(f"blk.{i}.attn_output.weight", state[p + "self_attn.o_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", state[p + "post_attention_layernorm.weight"])
        q4(f"blk.{i}.ffn_gate.weight", state[p + "mlp.gate_proj.weight"])
        q4(f"blk.{i}.ffn_up.weight", state[p + "mlp.up_proj.weight"])
        q4(f"blk.{i}.ffn_down.weight", state[p + "mlp.down_proj.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest, state


@pytest.fixture(scope="module")
def qwen2_gguf(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    return _write_qwen2_gguf(tmp_path_factory.mktemp("qwen2gguf") / "qwen2-tiny.Q4_0.gguf")


def test_auto_keeps_a_biased_qwen2_ggufs_4bit_blocks(qwen2_gguf):
    path, _ = qwen2_gguf
    assert blocks_precision(GGUFFile(path)) == "int4"


def test_qwen2_gguf_loads_as_int4_with_its_fp32_biases_on_the_fast_path(qwen2_gguf, home):
    path, state = qwen2_gguf
    loaded = load_model(LoadSpec(model=str(path), precision="auto", device="cpu"))
    assert loaded.facts.precision == "int4"
    assert loaded.facts.load_note == ("GGUF weights: 14 Q4_0 kept 4-bit (int4, exact); 6 F32 biases kept in fp32; "
                                      "1 Q8_0 re-scaled to per-row int8")
    for i in range(2):
        fused = loaded.model.model.layers[i].self_attn.q_proj.fused
        want = np.concatenate([state[f"model.layers.{i}.self_attn.{n}.bias"] for n in ("q_proj", "k_proj", "v_proj")])
        assert fused.bias.dtype == torch.float32
        assert torch.equal(fused.bias, torch.from_numpy(want))  # the file's values, not a bf16 round trip
    assert choose_runner(loaded.model, True).runner == "fast"

    reference = load_model(LoadSpec(model=str(path), precision="fp32", device="cpu"))  # transformers dequantizes
    prompt = random_prompt(loaded.model.config.vocab_size, 24, seed=7)
    with torch.inference_mode():
        expected = reference.model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    fast = [logits for _, logits in FastRunner(loaded.model).prefill(prompt)][-1][0].float()
    assert (fast - expected).abs().max().item() < LOGIT_TOLERANCE
    # The top token is one the reference ranks at its top within two bf16 steps: random weights leave near-ties
    # (this prompt's two best are 0.0045 apart, and a bf16 step at 0.88 is 0.0039, so SDPA's bf16 logits tie them).
    assert expected.max() - expected[int(fast.argmax())] <= 2 * 2.0 ** -8
