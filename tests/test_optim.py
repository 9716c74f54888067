"""The optimizer's parameter groups (which parameters decay, listed by hand) and the learning-rate schedules,
worked out by hand or given by transformers with the decay length worked out by hand."""

import pytest
import torch
from torch import nn
from transformers import get_scheduler

from briskbert.training.engine.optim import create_scheduler, parameter_groups


class RMSNorm(nn.Module):  # stands for any norm the project or a user defines: decided by the class name
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))


class ConditionalNorm(nn.Module):
    """A norm that holds a layer of its own (adaptive norms do): that layer is not a norm's parameter."""

    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.shift = nn.Linear(width, width)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied: listed once, not decayed
        self.layer_norm = nn.LayerNorm(4)
        self.group_norm = nn.GroupNorm(2, 4)
        self.rms = RMSNorm(4)
        self.conditional = ConditionalNorm(4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.scale = nn.Parameter(torch.ones(4))  # a plain weight: decayed
        self.attn_bias = nn.Parameter(torch.zeros(4))  # a bias by name: not decayed
        self.alpha = nn.Parameter(torch.ones(1))  # sorts before "bias", but is a plain weight: decayed

    def decayed(self):
        return [self.proj.weight, self.scale, self.alpha, self.conditional.shift.weight]

    def loss(self, x):
        hidden = self.layer_norm(self.proj(self.embed(x)))
        hidden = self.rms.weight * self.group_norm(hidden.unsqueeze(-1)).squeeze(-1)
        return (self.head(hidden * self.scale + self.attn_bias) ** 2).mean() * self.alpha.squeeze()


def ids(params):
    return sorted(id(p) for p in params)


def test_biases_embeddings_and_norms_are_not_decayed():
    m = Block()
    decay, no_decay = parameter_groups(m, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert ids(decay["params"]) == ids(m.decayed())
    expected = [m.embed.weight, m.proj.bias, m.attn_bias, m.conditional.weight, m.conditional.shift.bias]
    expected += [*m.layer_norm.parameters(), *m.group_norm.parameters(), m.rms.weight]
    assert ids(no_decay["params"]) == ids(expected)


def lrs(scheduler, optimizer, steps):
    out = []
    for _ in range(steps):
        out.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return out


def sgd(lr=2.0):
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)


def test_warmup_stable_decay_by_hand():
    opt = sgd(1.0)
    schedule = lrs(create_scheduler(opt, "warmup_stable_decay", 2, 8, decay_ratio=0.25), opt, 9)
    assert schedule == [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0]
    opt = sgd(1.0)  # by default it decays over the last fifth
    assert lrs(create_scheduler(opt, "warmup_stable_decay", 0, 10), opt, 10) == [1.0] * 9 + [0.5]


@pytest.mark.parametrize(
    "warmup, total, ratio, decay_steps",
    [
        (1, 10, 0.26, 3),  # 2.6 rounds to 3
        (0, 10, 0.04, 1),  # rounds to 0: at least one decay step
        (7, 10, 0.5, 3),  # 5 would overlap the warm-up: what is left after it
        (9, 10, 0.2, 1),  # one step left: one
        (10, 10, 0.2, 1),  # nothing left: still one
    ],
)
def test_warmup_stable_decay_matches_transformers_with_the_decay_length(warmup, total, ratio, decay_steps):
    ours_opt, theirs_opt = sgd(), sgd()
    ours = create_scheduler(ours_opt, "warmup_stable_decay", warmup, total, decay_ratio=ratio)
    decay = {"num_decay_steps": decay_steps, "decay_type": "linear"}
    theirs = get_scheduler("warmup_stable_decay", theirs_opt, warmup, total, scheduler_specific_kwargs=decay)
    assert lrs(ours, ours_opt, total + 1) == lrs(theirs, theirs_opt, total + 1)


@pytest.mark.parametrize("name", ["cosine_with_min_lr", "cosine_warmup_with_min_lr"])
def test_min_lr_cosines_end_at_a_tenth_of_the_peak(name):
    opt = sgd()
    assert min(lrs(create_scheduler(opt, name, 2, 10), opt, 11)[2:]) == pytest.approx(0.2)
