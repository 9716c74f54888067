"""briskbert's shared training library: a job is a :class:`~briskbert.training.engine.task.Task` handed to
:func:`briskbert.training.engine.loop.run`. Names are imported on first use, so the command line parses its flags
without loading torch."""

import importlib

_MODULES = {
    "engine.facts": "FACTS_FILE JobFacts RunFacts TrainingFacts read_training_facts write_training_facts",
    "engine.task": "Task TaskInputs count_examples",
    "engine.config": "TrainingConfig",
    "engine.checkpointing": "TrainingDiverged TrainingState",
    "engine.loop": "EpochShuffleSampler TrainResult create_accelerator run seed_everything",
    "engine.signals": "TrainingInterrupted",
    "engine.evaluation": "evaluation_loop",
    "engine.optim": "create_optimizer create_scheduler parameter_groups",
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names.split()}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
