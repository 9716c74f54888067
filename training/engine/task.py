"""A :class:`Task`: what one training job hands the loop (:func:`briskbert.training.engine.loop.run`).

A job (pretraining, classification, QA, distillation, ...) is a small class: its constructor takes the
job's settings dataclasses and checks its inputs (files, model folders) before anything heavy is loaded;
the loop then asks it, in this order, to

1. :meth:`~Task.check` the training settings against the job's (contradictions between the two),
2. :meth:`~Task.build` the model, the tokenizer, the datasets and their collators,
3. :meth:`~Task.count_items` of every batch: what the model's loss is a mean over,
4. :meth:`~Task.evaluate` the model on the evaluation data,
5. state its :meth:`~Task.facts` for the model card, and
6. do what comes :meth:`~Task.after_training` with the saved model (e.g. choose a re-ranker's fusion weight).

Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from briskbert.hub_cards.facts import JobFacts

if TYPE_CHECKING:
    from briskbert.training.engine.config import TrainingConfig
    from briskbert.training.engine.loop import TrainResult


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

    def check(self, config: TrainingConfig) -> None:  # noqa: B027 - optional hook, nothing to check by default
        """Refuse training settings that contradict the job's (a ``UserError`` naming the flags)."""

    @abc.abstractmethod
    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        """The model, tokenizer, datasets and collators. Runs on every process: prepare shared files on the
        main process first (``accelerator.main_process_first()``)."""

    def count_items(self, batch: dict) -> int:
        """What the model's loss is a mean over in ``batch`` (masked tokens, labelled tokens, examples);
        the loop weighs micro-batches and processes by it."""
        return count_examples(batch)

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        """Metrics over the evaluation data (``training.engine.loop.evaluation_loop`` gathers them across
        processes); None: the loop reports the loss weighted by :meth:`count_items`."""
        return None

    @abc.abstractmethod
    def facts(self) -> JobFacts:
        """What the model card says about this job; asked after :meth:`build` and the training."""

    def after_training(self, result: TrainResult, accelerator) -> None:  # noqa: B027 - optional hook
        """Work on the saved model (``result.final_dir``) once training ended normally, on every process."""


@dataclass
class PreparedTask(Task):
    """A task from pieces built beforehand: a model, datasets, a collator, optional evaluation and counting
    functions. For code that builds its own pieces (notebooks, tests, jobs not yet written as a Task)."""

    model: Any
    train_dataset: Any
    data_collator: Callable[[list], dict]
    tokenizer: Any = None
    eval_dataset: Any = None
    eval_collator: Callable[[list], dict] | None = None
    evaluate_fn: Callable[..., dict] | None = None  # (model, dataloader, accelerator) -> metrics
    count_items_fn: Callable[[dict], int] | None = None  # default: examples
    job_facts: JobFacts = field(default_factory=JobFacts)

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        return TaskInputs(
            model=self.model,
            train_dataset=self.train_dataset,
            data_collator=self.data_collator,
            tokenizer=self.tokenizer,
            eval_dataset=self.eval_dataset,
            eval_collator=self.eval_collator,
        )

    def count_items(self, batch: dict) -> int:
        return (self.count_items_fn or count_examples)(batch)

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        return None if self.evaluate_fn is None else self.evaluate_fn(model, dataloader, accelerator)

    def facts(self) -> JobFacts:
        return self.job_facts
