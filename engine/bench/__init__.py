"""Measuring the engine: the benchmark against ``generate()`` (``run``), the CUDA bench (``cuda``), the memory
bandwidth probe (``membw``) and the quality of a precision (``quality``).
"""
