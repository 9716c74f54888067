"""Optimizer parameter groups and learning-rate schedules shared by every training script."""

from __future__ import annotations

import torch
from torch import nn
from transformers import get_scheduler


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Trainable parameters in a decayed group and a group without decay: biases, embeddings and norms (any
    class whose name ends in ``Norm``)."""
    no_decay: set[int] = set()
    for module in model.modules():
        is_norm = isinstance(module, (nn.Embedding, nn.LayerNorm)) or type(module).__name__.endswith("Norm")
        for name, param in module.named_parameters(recurse=False):
            if is_norm or name == "bias" or name.endswith("_bias"):
                no_decay.add(id(param))
    trainable = [param for param in model.parameters() if param.requires_grad]  # a tied parameter once
    decay_params = [param for param in trainable if id(param) not in no_decay]
    no_decay_params = [param for param in trainable if id(param) in no_decay]
    return [
        {"params": decay_params, "weight_decay": weight_decay},
        {"params": no_decay_params, "weight_decay": 0.0},
    ]


def create_optimizer(
    model: nn.Module, learning_rate: float, weight_decay: float, betas: tuple[float, float], eps: float
) -> torch.optim.Optimizer:
    """Fused AdamW over :func:`parameter_groups`, which skips a step on the device's word (``found_inf``)."""
    groups = parameter_groups(model, weight_decay)
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps, fused=True)


def create_scheduler(
    optimizer, name: str, num_warmup_steps: int, num_training_steps: int, decay_ratio: float = 0.2
):
    """A transformers scheduler by name; ``warmup_stable_decay`` decays linearly over the last ``decay_ratio``
    of the steps, the ``*_min_lr`` cosines end at a tenth of the peak rate (transformers requires a floor)."""
    kwargs = {}
    if name == "warmup_stable_decay":
        num_decay = max(1, round(decay_ratio * num_training_steps))
        num_decay = min(num_decay, max(1, num_training_steps - num_warmup_steps))
        kwargs = {"num_decay_steps": num_decay, "decay_type": "linear"}
    elif name.endswith("_min_lr"):
        kwargs = {"min_lr_rate": 0.1}
    return get_scheduler(
        name, optimizer, num_warmup_steps, num_training_steps, scheduler_specific_kwargs=kwargs
    )
