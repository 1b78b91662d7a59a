"""The inference lab: five experiments (and a precision A/B) as measured, exportable results.

Headless (``python -m engine lab``) and in the GUI's Lab tab, every figure comes from real runs of
the loaded model through the engine's own session. Importing this package loads no torch: the GUI
imports the catalogue and the result types from here, and the session and the attention experiment
(which import torch) load when an experiment runs. This package owns the experiments, their results,
charts and exports; it does not own loading, generation or sampling (``engine.models.loader``,
``engine.generate.session``, ``engine.generate.sampling``).
"""

from engine.lab.experiments import EXPERIMENTS, FIVE, ExperimentInfo, LabOptions, run_all, run_experiment
from engine.lab.results import ExperimentResult, Heatmap, Series

__all__ = ["EXPERIMENTS", "FIVE", "ExperimentInfo", "ExperimentResult", "Heatmap", "LabOptions", "Series",
           "run_all", "run_experiment"]
