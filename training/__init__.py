"""briskbert's shared training library: the one Accelerate loop (:mod:`training.loop`) and its helpers.

Task code builds on :func:`run`; pretraining data and masking live in :mod:`training.pretraining_data`
and :mod:`training.masking`.
"""

from .facts import FACTS_FILE, read_training_facts, write_training_facts
from .loop import (
    EpochShuffleSampler,
    TrainResult,
    add_training_arguments,
    count_examples,
    create_accelerator,
    evaluate_loss,
    evaluation_loop,
    run,
    seed_everything,
    validate_training_arguments,
)
from .optim import create_optimizer, create_scheduler, parameter_groups

__all__ = [
    "FACTS_FILE", "EpochShuffleSampler", "TrainResult", "add_training_arguments", "count_examples",
    "create_accelerator", "create_optimizer", "create_scheduler", "evaluate_loss", "evaluation_loop",
    "parameter_groups", "read_training_facts", "run", "seed_everything", "validate_training_arguments",
    "write_training_facts",
]
