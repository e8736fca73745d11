"""The studies: one module per notebook (``notebooks/NN_<name>.ipynb`` uses ``cnnlab.studies.<name>``), each
following the study contract (:mod:`cnnlab.contract`: ``PARAMETERS``, ``configure``, ``measure``, ``check_claims``,
``figures``), so that every notebook reads the same way. A study's figures are drawn by ``cnnlab.plotting.<name>``;
its results are combined, checked and saved by :mod:`cnnlab.results`.

Notebooks call only a study's own functions, :func:`configure`, :func:`tables`, :func:`save`,
:func:`check_results`, :func:`cnnlab.report.show` and :mod:`cnnlab.plotting`: this package re-exports the
contract's and the results' names, so that ``studies.<name>`` is all a notebook imports.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from cnnlab.contract import (CONTRACT, DEVICE, MAX_ROUNDS, MIN_ROUNDS, TF32, THREADS, Config, Experiment, Parameter,
                             Parameters, configure, measurement, signature_problems)
from cnnlab.results import STATUSES, beside, check_results, combine, read, save, tables

STUDIES = ("quickstart", "batch_size", "fp16", "amp_amc", "tiling", "ddp_scaling", "lstm_pruning",
           "vgg_quantization", "validation_li2016")
# Which of the three papers (../shared/papers/README.md) each study reproduces.
PAPERS = {"001": "Towards Efficient CNN Inference: Memory Profiling and Optimization",
          "002": "Comparative Analysis of Runtime and Memory Optimization with ResNet152",
          "003": "HPML Project: VGG on CIFAR-10 and an LSTM on IMDB"}
STUDY_PAPER = {"quickstart": "001", "batch_size": "001", "fp16": "001", "amp_amc": "001", "tiling": "001",
               "ddp_scaling": "002", "lstm_pruning": "003", "vgg_quantization": "003", "validation_li2016": "001"}


def paper_of(notebook: str) -> str | None:
    """The paper (a key of :data:`PAPERS`) a notebook or its results folder reproduces: "01_batch_size" or
    "batch_size" -> "001"; None for a name that is not one of the studies."""
    return STUDY_PAPER.get(notebook.split("_", 1)[1] if notebook[:2].isdigit() and "_" in notebook else notebook)


def load(name: str) -> ModuleType:
    """The study module ``cnnlab.studies.<name>``, checked against the contract (ValueError naming what is
    missing)."""
    if name not in STUDIES:
        raise ValueError(f"study={name!r} is not known; valid studies: {', '.join(STUDIES)}")
    module = importlib.import_module(f"cnnlab.studies.{name}")
    missing = [n for n in CONTRACT if not hasattr(module, n)]
    if missing:
        raise ValueError(f"cnnlab.studies.{name} does not follow the study contract: no {', '.join(missing)}")
    return module


__all__ = ["CONTRACT", "DEVICE", "MAX_ROUNDS", "MIN_ROUNDS", "PAPERS", "STATUSES", "STUDIES", "STUDY_PAPER", "TF32",
           "THREADS", "Config", "Experiment", "Parameter", "Parameters", "beside", "check_results", "combine", "configure", "load",
           "measurement", "paper_of", "read", "save", "signature_problems", "tables"]
