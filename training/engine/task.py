"""A :class:`Task`: what one training job hands the loop (:func:`briskbert.training.engine.loop.run`).

A job (pretraining, classification, QA, distillation, ...) is a small class: its constructor takes the
job's settings dataclasses and checks its inputs (files, model folders) before anything heavy is loaded;
the loop then asks it, in this order, to

1. :meth:`~Task.build` the model, the tokenizer, the datasets and their collators (refusing training
   settings that contradict the job's first),
2. :meth:`~Task.count_items` of every batch: what the model's loss is a mean over,
3. :meth:`~Task.evaluate` the model on the evaluation data, and
4. state its :meth:`~Task.facts`, which the loop saves next to the final model.

Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from briskbert.training.engine.facts import JobFacts

if TYPE_CHECKING:
    from briskbert.training.engine.config import TrainingConfig


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
        """The model, tokenizer, datasets and collators. Runs on every process: prepare shared files on the
        main process first (``accelerator.main_process_first()``). Refuse training settings that contradict
        the job's (a ``UserError`` naming them) before anything heavy is loaded."""

    def count_items(self, batch: dict) -> int:
        """What the model's loss is a mean over in ``batch`` (masked tokens, labelled tokens, examples);
        the loop weighs micro-batches and processes by it."""
        return count_examples(batch)

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        """Metrics over the evaluation data (``training.engine.evaluation.evaluation_loop`` gathers them across
        processes); None: the loop reports the loss weighted by :meth:`count_items`."""
        return None

    def finish(self, final_dir) -> None:
        """A job's last step on the saved ``final/`` folder, after training and before the model card and the
        manifest are written (called on every process; nothing by default)."""
        return None

    @abc.abstractmethod
    def facts(self) -> JobFacts:
        """What this job says about the model it trains (for its card); asked after :meth:`build` and the
        training."""
