"""The inference lab: the seeds' five experiments (and a precision A/B) as measured, exportable results.

Headless (``python -m engine lab``) and in the GUI's Lab tab, every figure comes from real runs of
the loaded model through the engine's own session. Importing this package is cheap (no torch): the
GUI imports the catalogue and the result types from here, and each experiment's module loads when it
runs. This package owns the experiments, their results, charts and exports; it does not own loading,
generation or sampling (``engine.models.loader``, ``engine.generate.session``, ``engine.generate.sampling``).
"""

from engine.lab.experiments import EXPERIMENTS, FIVE, ExperimentInfo, LabOptions, lab_task, run_all, run_experiment
from engine.lab.results import ExperimentResult, Heatmap, Series

__all__ = ["EXPERIMENTS", "FIVE", "ExperimentInfo", "ExperimentResult", "Heatmap", "LabOptions", "Series", "lab_task",
           "run_all", "run_experiment"]
