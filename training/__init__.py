"""briskbert's shared training library: the one Accelerate loop (:mod:`briskbert.training.engine.loop`) and its helpers.

A job is a :class:`~briskbert.training.engine.task.Task` handed to :func:`briskbert.training.engine.loop.run`;
pretraining data and masking live in :mod:`briskbert.training.data`. Submodules are imported on first use so
the command line can parse its flags without loading torch.
"""

import importlib

_EXPORTS = {
    "FACTS_FILE": "engine.facts",
    "JobFacts": "engine.facts",
    "RunFacts": "engine.facts",
    "TrainingFacts": "engine.facts",
    "read_training_facts": "engine.facts",
    "write_training_facts": "engine.facts",
    "Task": "engine.task",
    "TaskInputs": "engine.task",
    "count_examples": "engine.task",
    "TrainingConfig": "engine.config",
    "TrainingDiverged": "engine.checkpointing",
    "EpochShuffleSampler": "engine.loop",
    "TrainResult": "engine.loop",
    "TrainingInterrupted": "engine.signals",
    "TrainingState": "engine.checkpointing",
    "create_accelerator": "engine.loop",
    "evaluation_loop": "engine.evaluation",
    "run": "engine.loop",
    "seed_everything": "engine.loop",
    "create_optimizer": "engine.optim",
    "create_scheduler": "engine.optim",
    "parameter_groups": "engine.optim",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
