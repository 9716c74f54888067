"""briskbert's shared training library: the one Accelerate loop (:mod:`briskbert.training.engine.loop`) and its helpers.

Task code builds on :func:`briskbert.training.engine.loop.run`; pretraining data and masking live in
:mod:`briskbert.training.data.pretraining_data` and :mod:`briskbert.training.data.masking`. Submodules are imported on
first use so the command line can parse its flags without loading torch.
"""

import importlib

_EXPORTS = {
    "FACTS_FILE": "engine.facts",
    "read_training_facts": "engine.facts",
    "write_training_facts": "engine.facts",
    "EpochShuffleSampler": "engine.loop",
    "TrainResult": "engine.loop",
    "TrainingConfig": "engine.arguments",
    "TrainingInterrupted": "engine.loop",
    "TrainingState": "engine.checkpointing",
    "add_training_arguments": "engine.arguments",
    "count_examples": "engine.loop",
    "create_accelerator": "engine.loop",
    "evaluate_loss": "engine.loop",
    "evaluation_loop": "engine.loop",
    "run": "engine.loop",
    "seed_everything": "engine.loop",
    "validate_training_arguments": "engine.arguments",
    "create_optimizer": "engine.optim",
    "create_scheduler": "engine.optim",
    "parameter_groups": "engine.optim",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
