"""The optimiser and schedule contract, checked against torch's AdamW and transformers' own schedulers.

Written to kill the mutants of ``training/engine/optim.py`` (see docs/testing.md): which parameters decay, that
the optimiser is AdamW with the given hyper-parameters, and that every ``--lr_scheduler_type`` gives exactly
the learning rates transformers gives.
"""

import pytest
import torch
from torch import nn
from transformers import get_scheduler

from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM
from briskbert.training.engine.config import SCHEDULER_NAMES
from briskbert.training.engine.optim import (
    create_optimizer,
    create_scheduler,
    is_no_decay_module,
    parameter_groups,
)


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


def test_no_decay_modules_are_embeddings_and_norms_by_type():
    assert is_no_decay_module(nn.Embedding(3, 2))
    assert is_no_decay_module(nn.LayerNorm(2))
    assert is_no_decay_module(nn.GroupNorm(1, 2))
    assert is_no_decay_module(RMSNorm(2))
    assert not is_no_decay_module(nn.Linear(2, 2))
    assert not is_no_decay_module(nn.Conv1d(2, 2, 1))


def test_parameter_groups_of_a_hand_built_model():
    model = Block()
    decay, no_decay = parameter_groups(model, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    m = model
    ids = lambda params: sorted(id(p) for p in params)  # noqa: E731
    assert ids(decay["params"]) == ids([m.proj.weight, m.scale, m.alpha, m.conditional.shift.weight])
    expected_no_decay = [
        m.embed.weight,
        m.proj.bias,
        m.layer_norm.weight,
        m.layer_norm.bias,
        m.group_norm.weight,
        m.group_norm.bias,
        m.rms.weight,
        m.attn_bias,
        m.conditional.weight,
        m.conditional.shift.bias,
    ]
    assert ids(no_decay["params"]) == ids(expected_no_decay)


def test_parameter_groups_list_every_trainable_parameter_of_a_real_model_once():
    model = BriskBertForMaskedLM(BriskBertConfig.from_preset("bert-tiny", vocab_size=64))
    next(m for m in model.modules() if isinstance(m, nn.Embedding)).requires_grad_(False)  # frozen: left out
    groups = parameter_groups(model, 0.01)
    listed = [id(p) for g in groups for p in g["params"]]
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert len(listed) == len(set(listed)) == len(trainable) and set(listed) == trainable


def test_create_optimizer_steps_exactly_like_torch_adamw_with_the_same_groups():
    torch.manual_seed(0)
    model, reference = Block(), Block()
    reference.load_state_dict(model.state_dict())
    ours = create_optimizer(model, learning_rate=0.1, weight_decay=0.3, betas=(0.8, 0.95), eps=1e-3)
    assert isinstance(ours, torch.optim.AdamW)
    theirs = torch.optim.AdamW(
        [
            {
                "params": [
                    reference.proj.weight,
                    reference.scale,
                    reference.alpha,
                    reference.conditional.shift.weight,
                ],
                "weight_decay": 0.3,
            },
            {
                "params": [
                    p
                    for n, p in reference.named_parameters()
                    if p.requires_grad
                    and n not in ("proj.weight", "scale", "alpha", "conditional.shift.weight")
                ],
                "weight_decay": 0.0,
            },
        ],
        lr=0.1,
        betas=(0.8, 0.95),
        eps=1e-3,
    )
    x = torch.randint(0, 10, (6,))
    for _ in range(3):
        for net, optimizer in ((model, ours), (reference, theirs)):
            optimizer.zero_grad()
            hidden = net.rms.weight * net.group_norm(
                net.layer_norm(net.proj(net.embed(x))).unsqueeze(-1)
            ).squeeze(-1)
            loss = (net.head(hidden * net.scale + net.attn_bias) ** 2).mean() * net.alpha.squeeze()
            loss.backward()
            optimizer.step()
    for (name, ours_p), theirs_p in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(ours_p, theirs_p, rtol=0, atol=0, msg=name)
    assert not torch.equal(model.proj.weight, Block().proj.weight)  # it moved


def test_create_optimizer_defaults_are_torch_adamw_defaults():
    ours = create_optimizer(Block(), learning_rate=0.01, weight_decay=0.1)
    theirs = torch.optim.AdamW(Block().parameters(), lr=0.01)
    for key in ("betas", "eps", "amsgrad", "maximize", "foreach", "fused", "capturable", "differentiable"):
        assert ours.defaults[key] == theirs.defaults[key], key
    assert [g["lr"] for g in ours.param_groups] == [0.01, 0.01]


def lrs(scheduler, optimizer, steps):
    out = []
    for _ in range(steps):
        out.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return out


def sgd(lr=2.0):
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)


@pytest.mark.parametrize("name", [n for n in SCHEDULER_NAMES if n != "warmup_stable_decay"])
def test_every_scheduler_matches_transformers_get_scheduler(name):
    ours_opt, theirs_opt = sgd(), sgd()
    ours = create_scheduler(ours_opt, name, num_warmup_steps=3, num_training_steps=12)
    kwargs = {"min_lr_rate": 0.1} if "min_lr" in name else {}
    theirs = get_scheduler(
        name, theirs_opt, num_warmup_steps=3, num_training_steps=12, scheduler_specific_kwargs=kwargs
    )
    assert lrs(ours, ours_opt, 12) == lrs(theirs, theirs_opt, 12)


@pytest.mark.parametrize(
    "warmup, total, ratio, decay_steps",
    [
        (2, 10, 0.2, 2),  # 20 % of 10
        (0, 20, 0.25, 5),
        (1, 10, 0.26, 3),  # 2.6 rounds to 3
        (0, 10, 0.04, 1),  # rounds to 0: at least one decay step
        (7, 10, 0.5, 3),  # 5 would overlap the warm-up: what is left after it
        (9, 10, 0.2, 1),  # 2 would overlap it: the one step left
        (10, 10, 0.2, 1),  # nothing left: still one
    ],
)
def test_warmup_stable_decay_matches_transformers_with_the_decay_length(warmup, total, ratio, decay_steps):
    ours_opt, theirs_opt = sgd(), sgd()
    ours = create_scheduler(ours_opt, "warmup_stable_decay", warmup, total, decay_ratio=ratio)
    theirs = get_scheduler(
        "warmup_stable_decay",
        theirs_opt,
        num_warmup_steps=warmup,
        num_training_steps=total,
        scheduler_specific_kwargs={"num_decay_steps": decay_steps, "decay_type": "linear"},
    )
    assert lrs(ours, ours_opt, total + 1) == lrs(theirs, theirs_opt, total + 1)


def test_warmup_stable_decay_by_hand():
    opt = sgd(1.0)
    schedule = lrs(create_scheduler(opt, "warmup_stable_decay", 2, 8, decay_ratio=0.25), opt, 9)
    assert schedule == [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0]


def test_an_unknown_scheduler_name_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"'cosine_warm'.*linear, cosine, "):
        create_scheduler(sgd(), "cosine_warm", 1, 10)


def test_warmup_stable_decay_decays_over_the_last_fifth_by_default():
    opt = sgd(1.0)
    schedule = lrs(create_scheduler(opt, "warmup_stable_decay", 0, 10), opt, 10)
    assert schedule == [1.0] * 9 + [0.5]


@pytest.mark.parametrize("name", ["cosine_with_min_lr", "cosine_warmup_with_min_lr"])
@pytest.mark.parametrize("floor", [0.25, None])
def test_min_lr_cosines_take_their_floor_like_transformers(name, floor):
    ours_opt, theirs_opt = sgd(), sgd()
    given = {} if floor is None else {"min_lr_rate": floor}
    ours = create_scheduler(ours_opt, name, 2, 10, **given)
    theirs = get_scheduler(
        name,
        theirs_opt,
        2,
        10,
        scheduler_specific_kwargs={"min_lr_rate": floor or 0.1},  # 0.1 by default
    )
    schedule = lrs(ours, ours_opt, 11)
    assert schedule == lrs(theirs, theirs_opt, 11)
    assert min(schedule[2:]) >= 2.0 * (floor or 0.1) - 1e-12
