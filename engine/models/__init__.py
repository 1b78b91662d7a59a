"""Files on disk to a loaded model: where models live (``fetch``, ``catalog``), what is safe to open (``safety``,
``config_check``), loading (``loader``), quantized weights (``quant``, ``quant_cache``) and what the loaded model
holds (``model``, ``facts``).

Owns no generation (``engine/generate/``).
"""
