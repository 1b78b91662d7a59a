"""A Qwen2-shaped config (q/k/v biases) offers int8 and int4 in the library like a bias-free one: the loader keeps
biases dense beside the quantized kernels (engine/quant/quant.py), so the fit estimate must not refuse them."""

from __future__ import annotations

from engine.library.arch import from_config

QWEN25_05B = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
              "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
              "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
              "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0}


def test_a_biased_family_offers_int8_and_int4():
    arch = from_config(QWEN25_05B)
    assert arch.qkv_bias
    assert arch.precision_problem("int8") is None and arch.precision_problem("int4") is None
    llama_biased = from_config({**QWEN25_05B, "model_type": "llama", "attention_bias": True, "mlp_bias": True})
    assert llama_biased.o_bias and llama_biased.mlp_bias and llama_biased.precision_problem("int4") is None
