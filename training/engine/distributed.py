# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Gathering a batch's embeddings from every process, for losses whose negatives or pairs span the global batch.

:func:`gather_with_grad` concatenates each process's tensor along the first dimension (shards may differ in
length) and keeps the whole result differentiable: the backward pass sums every process's gradient with
respect to each shard and hands each process the gradient of its own. With the loop's scaling (each
process's loss times its share of the items times the number of processes, DDP averaging the gradients),
training on several processes then follows the gradient of one process holding the global batch. Without
an initialised process group (or with one process) both functions return their input.

:func:`save_model_folder` saves a model however it is distributed (DDP, FSDP, DeepSpeed), whole or not at
all.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
import torch.distributed as dist

from briskbert.files import partial_path, replace_folder, space_for, write_manifest
from briskbert.training.engine.facts import TrainingFacts, write_training_facts
from briskbert.training.engine.finite import refuse_non_finite_weights


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _shard_sizes(tensor: torch.Tensor) -> list[int]:
    size = torch.tensor([tensor.shape[0]], device=tensor.device)
    sizes = [torch.zeros_like(size) for _ in range(world_size())]
    dist.all_gather(sizes, size)
    return [int(s) for s in sizes]


def _padded_gather(tensor: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """``(world, max size, *rest)``: every process's shard, zero-padded to the longest one."""
    padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    pieces = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(pieces, padded.contiguous())
    return torch.stack(pieces)


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        sizes = _shard_sizes(tensor)
        ctx.sizes, ctx.rank = sizes, dist.get_rank()
        gathered = _padded_gather(tensor, sizes)
        return torch.cat([piece[:size] for piece, size in zip(gathered, sizes)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        sizes, rank = ctx.sizes, ctx.rank
        padded = grad.new_zeros((len(sizes), max(sizes), *grad.shape[1:]))
        offset = 0
        for index, size in enumerate(sizes):
            padded[index, :size] = grad[offset : offset + size]
            offset += size
        # Every process's loss depends on every shard: sum their gradients, keep this process's shard.
        dist.all_reduce(padded)
        return padded[rank, : sizes[rank]]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """All processes' ``tensor`` concatenated along dim 0 in rank order, differentiable with respect to every
    shard (what sentence-transformers' ``gather_across_devices`` does with ``torch.distributed.nn``; this
    version also takes shards of different lengths and runs on gloo, which has no reduce-scatter)."""
    if world_size() == 1:
        return tensor
    return _GatherWithGrad.apply(tensor)


def gather_with_offset(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(all processes' tensor, concatenated; where this process's shard starts)``, without gradients: for
    labels and ids that travel with gathered embeddings."""
    if world_size() == 1:
        return tensor, 0
    sizes = _shard_sizes(tensor)
    gathered = _padded_gather(tensor, sizes)
    rank = dist.get_rank()
    return torch.cat([piece[:size] for piece, size in zip(gathered, sizes)]), sum(sizes[:rank])


@contextlib.contextmanager
def own_class(model):
    """FSDP2 gives a sharded model a class of torch's own, a subclass of the model's; ``save_pretrained`` copies
    the remote-code files of the class it sees, so during a save the model wears its own class again."""
    sharded_class = type(model)
    model.__class__ = next(cls for cls in sharded_class.__mro__ if not cls.__module__.startswith("torch."))
    try:
        yield model
    finally:
        model.__class__ = sharded_class


def save_model_folder(
    accelerator, model, tokenizer, folder: Path, facts: TrainingFacts | None = None
) -> None:
    """``save_pretrained`` model (+ tokenizer, + ``training_facts.json``), written whole or not at all;
    never with NaN or infinite weights."""
    accelerator.wait_for_everyone()
    refuse_non_finite_weights(accelerator, model, f"{folder.name}/", folder.parent)
    # The model itself, not torch.compile's wrapper (whose class cannot be swapped, nor saved as remote code).
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)
    # Sharded engines need their weights gathered; otherwise save_pretrained handles tied weights itself.
    sharded = accelerator.distributed_type.value in ("FSDP", "DEEPSPEED")
    state_dict = accelerator.get_state_dict(model) if sharded else None
    weight_bytes = sum(p.numel() * p.element_size() for p in unwrapped.parameters())
    if accelerator.is_main_process:
        partial = partial_path(folder)
        with space_for(folder, weight_bytes):  # a full disk: one line, and no partial folder left
            partial.mkdir(parents=True, exist_ok=True)
            with own_class(unwrapped):
                unwrapped.save_pretrained(partial, state_dict=state_dict, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(partial)
            if facts is not None:
                write_training_facts(partial, facts)
            write_manifest(partial)  # synced files, then the manifest, then the rename
        replace_folder(partial, folder)
    accelerator.wait_for_everyone()
