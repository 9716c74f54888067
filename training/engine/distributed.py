# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Gathering a batch's embeddings from every process, for losses whose negatives span the global batch."""

from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _shard_sizes(tensor: torch.Tensor) -> list[int]:
    size = torch.tensor([tensor.shape[0]], device=tensor.device)
    sizes = [torch.zeros_like(size) for _ in range(world_size())]
    dist.all_gather(sizes, size)
    return [int(s) for s in sizes]


def _gather(tensor: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Every process's shard (of length ``sizes[rank]``), concatenated in rank order."""
    padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))  # all_gather needs equal shapes
    padded[: tensor.shape[0]] = tensor
    pieces = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(pieces, padded.contiguous())
    return torch.cat([piece[:size] for piece, size in zip(pieces, sizes)])


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        ctx.sizes, ctx.rank = _shard_sizes(tensor), dist.get_rank()
        return _gather(tensor, ctx.sizes)

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
    """All processes' ``tensor`` concatenated along dim 0, differentiable with respect to every shard (unlike
    ``torch.distributed.nn.all_gather``, for shards of different lengths and on gloo)."""
    if world_size() == 1:
        return tensor
    return _GatherWithGrad.apply(tensor)


def gather_with_offset(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(all processes' tensor, where this process's shard starts)``, without gradients (labels, ids)."""
    if world_size() == 1:
        return tensor, 0
    sizes = _shard_sizes(tensor)
    return _gather(tensor, sizes), sum(sizes[: dist.get_rank()])
