"""Files on disk to a loaded model: where models live (``fetch``, ``catalog``), what is safe to open (``safety``, with
``engine.shapes.config_check``'s numbers), loading (``loader``) and what the loaded model holds (``model``, ``facts``).

Owns no quantized weights (``engine/quant/``) and no generation (``engine/generate/``).
"""
