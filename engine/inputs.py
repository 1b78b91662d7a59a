"""The precisions a model can be loaded in: one list for the loader, the command lines and the window.

Two families of quantized weights, named for what they are:
- ``int8`` / ``int4``: weight-only quantization on torch's native kernels (``engine/models/quant.py``): fewer
  bytes per weight to read, so decoding one token is faster — the reason to pick them.
- ``bnb-int8`` (LLM.int8()), ``nf4``, ``fp4``: bitsandbytes. They save memory and load checkpoints
  already quantized with bitsandbytes, but their kernels are built for training and memory, not for
  batch-1 speed: on a CPU they decode several times slower than bf16.

Imports nothing heavy, so the window (which never imports torch) can use it. Owns names and their
one-line explanations; not how any of them is loaded.
"""

from __future__ import annotations

FLOATS = ("fp32", "bf16", "fp16")
NATIVE_QUANTIZED = ("int8", "int4")  # engine/models/quant.py
BNB_QUANTIZED = ("bnb-int8", "nf4", "fp4")  # bitsandbytes through transformers' BitsAndBytesConfig
PRECISIONS = ("auto",) + FLOATS + NATIVE_QUANTIZED + BNB_QUANTIZED

INT4_GROUP_SIZE = 32  # weights sharing one scale and zero in int4: GGUF Q4_0/Q4_1's block size

EXPLANATIONS = {
    "auto": "the fastest float type of the device: bf16 where it is native, else fp32 (fp16 on old GPUs)",
    "fp32": "32-bit floats: exact reference, 4 bytes per weight",
    "bf16": "16-bit brain floats: 2 bytes per weight",
    "fp16": "16-bit floats: 2 bytes per weight",
    "int8": "8-bit weights, one scale per output row, native kernel: ~1 byte per weight, faster decoding",
    "int4": (f"4-bit weights in groups of {INT4_GROUP_SIZE} with a scale and zero each, native kernel: "
             "~0.6 byte per weight, fastest decoding"),
    "bnb-int8": "bitsandbytes LLM.int8(): saves memory, slow at batch 1 on a CPU",
    "nf4": "bitsandbytes 4-bit NormalFloat: saves memory, slow at batch 1 on a CPU",
    "fp4": "bitsandbytes 4-bit float: saves memory, slow at batch 1 on a CPU",
}

__all__ = ["FLOATS", "NATIVE_QUANTIZED", "BNB_QUANTIZED", "PRECISIONS", "INT4_GROUP_SIZE", "EXPLANATIONS"]
