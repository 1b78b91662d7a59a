"""Test helpers that lay out models the way users have them: a GGUF file, a Hugging Face cache.

``gguf_writer`` starts a GGUF with an architecture's header and a tokenizer; ``write_llama_gguf`` turns a (tiny) Llama safetensors folder into a llama.cpp-style GGUF with its
byte-level BPE tokenizer and chat template, so the loader's GGUF path runs on real bytes.
``add_to_hf_cache`` copies a folder into the hub cache layout (``models--org--name/snapshots/<rev>``
plus ``refs/main``) that huggingface_hub resolves offline.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path


def _permute_for_gguf(weight, heads: int):
    # llama.cpp interleaves the two rotary halves of each head's q/k rows; transformers undoes
    # exactly this on load, so writing the permuted form is what a real GGUF holds.
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_writer(dest: Path, arch: str, cfg, tokenizer, *, pre: str, rope_dims: int | None = None):
    """A ``gguf.GGUFWriter`` at ``dest`` holding the header llama.cpp's converter writes for ``arch``: the
    architecture numbers of transformers config ``cfg`` and ``tokenizer``'s byte-level BPE vocabulary, merges,
    special ids and chat template (``pre``: its pre-tokenizer name). The caller adds the tensors."""
    import gguf

    writer = gguf.GGUFWriter(str(dest), arch)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    if rope_dims is not None:
        writer.add_rope_dimension_count(rope_dims)
    writer.add_vocab_size(cfg.vocab_size)
    tokens = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    specials = set(tokenizer.all_special_tokens) | {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3 if token in specials else 1 for token in tokens])  # 3: control token
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(cfg.bos_token_id)
    writer.add_eos_token_id(cfg.eos_token_id)
    writer.add_pad_token_id(cfg.pad_token_id if cfg.pad_token_id is not None else cfg.eos_token_id)
    writer.add_chat_template(tokenizer.chat_template)
    return writer


def write_llama_gguf(source: Path, dest: Path, projections: str = "F32", embedding: str = "F32") -> Path:
    """Write the Llama model in ``source`` (safetensors folder) as one GGUF file at ``dest``: F32, or its
    projections (q, k, v, o, gate, up, down) and token embedding quantized to the named GGUF types
    (e.g. ``Q4_1`` and ``Q8_0``, as the default model's file)."""
    import gguf
    import torch
    from gguf.quants import quantize
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    cfg = model.config
    writer = gguf_writer(dest, "llama", cfg, tokenizer, pre="default", rope_dims=cfg.head_dim)
    state = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    add_tensor = writer.add_tensor

    def add_as(kind: str):
        qtype = gguf.GGMLQuantizationType[kind]
        if qtype == gguf.GGMLQuantizationType.F32:
            return add_tensor
        return lambda name, data: add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    project = add_as(projections)
    add_as(embedding)("token_embd.weight", state["model.embed_tokens.weight"])
    add_tensor("output_norm.weight", state["model.norm.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        add_tensor(f"blk.{i}.attn_norm.weight", state[p + "input_layernorm.weight"])
        project(f"blk.{i}.attn_q.weight", _permute_for_gguf(state[p + "self_attn.q_proj.weight"],
                                                            cfg.num_attention_heads))
        project(f"blk.{i}.attn_k.weight", _permute_for_gguf(state[p + "self_attn.k_proj.weight"],
                                                            cfg.num_key_value_heads))
        project(f"blk.{i}.attn_v.weight", state[p + "self_attn.v_proj.weight"])
        project(f"blk.{i}.attn_output.weight", state[p + "self_attn.o_proj.weight"])
        add_tensor(f"blk.{i}.ffn_norm.weight", state[p + "post_attention_layernorm.weight"])
        project(f"blk.{i}.ffn_gate.weight", state[p + "mlp.gate_proj.weight"])
        project(f"blk.{i}.ffn_up.weight", state[p + "mlp.up_proj.weight"])
        project(f"blk.{i}.ffn_down.weight", state[p + "mlp.down_proj.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


def add_to_hf_cache(cache: Path, repo_id: str, source: Path, revision: str = "0123456789abcdef") -> Path:
    """Put ``source``'s files in ``cache`` as ``repo_id``'s snapshot; return the snapshot folder.

    Like huggingface_hub: each file is a blob named by its hash, and the snapshot holds
    relative symlinks to the blobs.
    """
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    blobs = repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir(exist_ok=True)
    files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.is_file())
    for path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, blobs / digest)
        (snapshot / path.name).symlink_to(Path("..", "..", "blobs", digest))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot
