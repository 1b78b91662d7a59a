"""Quantized weights: the int8/int4 linears on torch's CPU kernels (``quant``), their on-disk cache
(``quant_cache``), a GGUF's blocks kept as they are (``gguf_quant``), the quantizing step of a load
(``quantize_step``) and ``auto``'s quality bar (``auto_quant``, measured by ``quality``).

Importing this package loads no torch (the loader imports ``quantize_step`` before torch is needed). Owns no
loading (``engine/models/loader.py``) and no generation (``engine/generate/``).
"""
