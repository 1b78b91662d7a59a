"""Measuring the engine: the benchmark against ``generate()`` (``run``, over ``scenarios``, ``variants`` and
``report``; its command line is ``engine.cli.bench``), the CUDA bench (``cuda``), the memory bandwidth probe
(``membw``), the quality of a precision (``quality``), and the measuring core they share (``core``:
warm-up, alternated repetitions, medians, best-of timing).
"""
