"""The order the loop reads its data in and the windows of micro-batches it accumulates.

* **Data order** is a shuffle seeded by ``seed + epoch`` (independent of the process count; Accelerate
  shards it). Collators and datasets with ``set_epoch(epoch)`` hear about every new epoch.
* One optimizer step consumes a window of ``gradient_accumulation_steps`` micro-batches
  (:func:`accumulation_windows`; fewer at the end of an epoch).
"""

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
    """Batches prepared in ``num_workers`` processes (None: :func:`default_workers`), in pinned memory on a GPU
    machine so that their copy to the GPU overlaps the step. The workers start anew each epoch (they are not
    persistent), after the collator and dataset heard ``set_epoch``: the same batches whatever their number."""
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
    """Loader processes by default: on a GPU machine 4 per training process (each prefetching 2 batches), fewer
    when this process has fewer cores, one core staying with the training loop; none on CPU, where the cores
    run the model and workers would only take them from it."""
    if not torch.cuda.is_available():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    per_process = cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(0, min(4, per_process - 1))


def accumulation_windows(
    dataloader, state: TrainingState, accumulation_steps: int, accelerator, epoch_listeners: Iterable = ()
) -> Iterator[list[dict]]:
    """Yield the micro-batches of one optimizer step at a time, epoch after epoch, without end.

    Starts at ``state``'s data position (a resumed run skips the batches it already consumed) and moves
    it: ``state.batches_in_epoch`` counts this process's batches yielded in ``state.epoch``. The last
    window of an epoch may be short. ``epoch_listeners`` (sampler, collator, dataset) hear each epoch.
    """
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
