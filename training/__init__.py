"""briskbert's shared training library: the one Accelerate loop (:mod:`briskbert.training.loop`) and its helpers.

Task code builds on :func:`briskbert.training.loop.run`; pretraining data and masking live in
:mod:`briskbert.training.pretraining_data` and :mod:`briskbert.training.masking`. Submodules are imported on
first use so the command line can parse its flags without loading torch.
"""

import importlib

_EXPORTS = {
    "FACTS_FILE": "facts",
    "read_training_facts": "facts",
    "write_training_facts": "facts",
    "EpochShuffleSampler": "loop",
    "TrainResult": "loop",
    "TrainingConfig": "arguments",
    "TrainingInterrupted": "loop",
    "TrainingState": "checkpointing",
    "add_training_arguments": "arguments",
    "count_examples": "loop",
    "create_accelerator": "loop",
    "evaluate_loss": "loop",
    "evaluation_loop": "loop",
    "run": "loop",
    "seed_everything": "loop",
    "validate_training_arguments": "arguments",
    "create_optimizer": "optim",
    "create_scheduler": "optim",
    "parameter_groups": "optim",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
