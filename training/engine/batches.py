"""The order the loop reads its data in (a shuffle seeded by ``seed + epoch``, whatever the process count) and
the windows of ``gradient_accumulation_steps`` micro-batches it accumulates."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator

import torch
from torch.utils.data import DataLoader, Sampler

from briskbert.training.engine.checkpointing import TrainingState
from briskbert.training.engine.config import TrainingSetupError


class EpochShuffleSampler(Sampler[int]):
    """A permutation of ``range(n)`` seeded by ``seed + epoch``: reproducible, and the same whatever the
    number of processes (Accelerate shards the batches of this one order)."""

    def __init__(self, num_samples: int, seed: int):
        self.num_samples, self.seed, self.epoch = num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.num_samples, generator=generator).tolist())


def make_dataloader(dataset, collator, batch_size, sampler, num_workers: int | None) -> DataLoader:
    """Batches prepared in ``num_workers`` processes (None: :func:`default_workers`), pinned on a GPU machine so
    their copy overlaps the step; workers start anew each epoch, after ``set_epoch``: the same batches whatever
    their number."""
    workers = default_workers() if num_workers is None else num_workers
    # An own generator: creating an iterator then never draws from the global torch RNG, which would
    # otherwise shift dropout masks between an uninterrupted and a resumed run.
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collator,
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
        generator=torch.Generator().manual_seed(0),
    )


def default_workers() -> int:
    """On a GPU machine 4 loader processes per training process (fewer on fewer cores, one staying with the loop);
    none on CPU, where the cores run the model."""
    if not torch.cuda.is_available():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    per_process = cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(0, min(4, per_process - 1))


def accumulation_windows(
    dataloader, state: TrainingState, accumulation_steps: int, accelerator, epoch_listeners: Iterable = ()
) -> Iterator[list[dict]]:
    """The micro-batches of one optimizer step at a time, without end, from ``state``'s data position (a resumed
    run skips what it consumed), which it moves; the last window of an epoch may be short."""
    while True:
        for listener in epoch_listeners:
            listener.set_epoch(state.epoch)
        batches = dataloader
        if state.batches_in_epoch:
            batches = accelerator.skip_first_batches(dataloader, state.batches_in_epoch)
        if hasattr(batches, "set_epoch"):  # Accelerate's loaders re-set their sampler's epoch on iter()
            batches.set_epoch(state.epoch)
        iterator = iter(batches)
        while window := list(itertools.islice(iterator, accumulation_steps)):
            state.batches_in_epoch += len(window)
            yield window
        if state.batches_in_epoch == 0:
            raise TrainingSetupError("The training data yielded no batches.")
        state.epoch += 1
        state.batches_in_epoch = 0


def count_tokens(batch: dict) -> torch.Tensor | int:
    """Non-padding tokens of a batch (0 for batches without token ids); counted on the batch's device."""
    if "attention_mask" in batch:
        return batch["attention_mask"].sum()
    if "input_ids" in batch:
        return batch["input_ids"].numel()
    return 0
