"""The declared experiments (scripts/experiment.py NAME): each file of this package declares one
experiment or a family of them with experiments.base.register; every file is imported here, as
fairseq imports its models/ (a new experiment is a new file, nothing else)."""
import importlib
import pkgutil

from fairseq_alibi_lab.experiments.base import (BEFORE_SEPARABLE, COMMITTED, EXPERIMENTS, Experiment, Model, Stages,  # noqa: F401  (the package's names)
                                                declared_updates, names, register, slug)

for _declaration in pkgutil.iter_modules(__path__):
    if _declaration.name != "base":
        importlib.import_module(f"{__name__}.{_declaration.name}")
