"""A :class:`Task`: what one training job hands the loop: it builds the model and data, counts the items its
loss is a mean over, evaluates, and states its facts. Importing it loads neither torch nor transformers."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from briskbert.training.engine.config import TrainingConfig
from briskbert.training.engine.facts import JobFacts


@dataclass
class TaskInputs:
    """What :meth:`Task.build` makes: the model to train and the data it trains and is evaluated on."""

    model: Any  # a torch module whose forward(**batch) returns an output with a mean ``loss``
    train_dataset: Any  # a map-style dataset, or an IterableDataset (streamed)
    data_collator: Callable[[list], dict]  # a list of examples -> a batch of tensors
    tokenizer: Any = None  # saved next to the final model
    eval_dataset: Any = None
    eval_collator: Callable[[list], dict] | None = None  # default: data_collator


def count_examples(batch: dict) -> int:
    """Examples in ``batch`` (the first dimension of its first tensor): the default loss items."""
    import torch

    first = next(value for value in batch.values() if isinstance(value, torch.Tensor))
    return first.shape[0]


class Task(abc.ABC):
    """One training job, as the loop drives it (see the module docstring)."""

    #: set by :meth:`evaluate` when the predictions show nothing learned yet (one line, e.g.
    #: ``training.tasks.metrics.not_learned``'s); the end-of-run summary prints the last evaluation's.
    verdict: str | None = None

    @abc.abstractmethod
    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        """The model, tokenizer, datasets and collators, on every process (shared files on the main process
        first); refuse contradicting training settings before anything heavy is loaded."""

    def count_items(self, batch: dict) -> int:
        """What the model's loss is a mean over in ``batch`` (masked tokens, labelled tokens, examples)."""
        return count_examples(batch)

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        """Metrics over the evaluation data; None: the loop reports the loss weighted by :meth:`count_items`."""
        return None

    def finish(self, final_dir) -> None:
        """A job's last step on the saved ``final/`` folder, before the model card (on every process)."""
        return None

    @abc.abstractmethod
    def facts(self) -> JobFacts:
        """What this job says about the model it trains (for its card), asked after training."""
