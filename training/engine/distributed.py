# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Gathering a batch's embeddings from every process, for losses whose negatives span the global batch."""

from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _gather(tensor: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """Every process's shard concatenated in rank order, differentiable with respect to every shard (torch's
    all_gather, whose backward sums all processes' gradients, even on gloo); the shards' lengths."""
    from torch.distributed.nn.functional import all_gather

    size = torch.tensor([tensor.shape[0]], device=tensor.device)
    sizes = [torch.zeros_like(size) for _ in range(world_size())]
    dist.all_gather(sizes, size)
    sizes = [int(s) for s in sizes]
    # all_gather needs equal shapes: each shard is padded to the longest, and the padding cut off again
    padded = torch.cat([tensor, tensor.new_zeros((max(sizes) - tensor.shape[0], *tensor.shape[1:]))])
    return torch.cat([piece[:size] for piece, size in zip(all_gather(padded), sizes)]), sizes


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """All processes' ``tensor`` concatenated along dim 0 (shards may differ in length), differentiable with
    respect to every shard."""
    return _gather(tensor)[0] if world_size() > 1 else tensor


def gather_with_offset(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(all processes' tensor, where this process's shard starts)``, without gradients (labels, ids)."""
    if world_size() == 1:
        return tensor, 0
    gathered, sizes = _gather(tensor.detach())
    return gathered, sum(sizes[: dist.get_rank()])
