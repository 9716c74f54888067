"""The distillation losses against torch's KL divergence and sums written out by hand: the T² scaling, the mix
of losses, the teacher layers each student layer learns from (the job end to end is in test_finetune.py)."""

import pytest
import torch
from torch.distributions import Categorical, kl_divergence

from briskbert.modeling import BriskBertConfig, BriskBertForSequenceClassification
from briskbert.training.tasks.distill import DistillationModel, soft_target_loss

VOCAB = 50


def reference_kl(student_logits, teacher_logits, temperature):
    """Per item KL(teacher || student) of the softened distributions, by torch.distributions."""
    teacher = Categorical(logits=teacher_logits / temperature)
    return kl_divergence(teacher, Categorical(logits=student_logits / temperature))


def test_soft_targets_are_the_t_squared_scaled_kl_of_softened_distributions():
    generator = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(4, 3, generator=generator), torch.randn(4, 3, generator=generator)
    for temperature, problem_type in [
        (1.0, "single_label_classification"),
        (3.0, "multi_label_classification"),
    ]:
        expected = reference_kl(student, teacher, temperature).mean() * temperature**2
        loss = soft_target_loss(student, teacher, temperature, problem_type)
        assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    regression = soft_target_loss(student[:, :1], teacher[:, :1], 3.0, "regression")
    assert float(regression) == pytest.approx(float(((student[:, 0] - teacher[:, 0]) ** 2).mean()), rel=1e-6)


def tiny(head, layers: int, seed: int, hidden_size: int = 32):
    torch.manual_seed(seed)
    sizes = dict(vocab_size=VOCAB, hidden_size=hidden_size, intermediate_size=64, num_hidden_layers=layers)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return head(BriskBertConfig.from_preset("bert-tiny", num_labels=3, **sizes, **no_dropout))


def batch(labels):
    generator = torch.Generator().manual_seed(2)
    input_ids = torch.randint(5, VOCAB, (2, 6), generator=generator)
    attention_mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def test_the_training_loss_mixes_soft_hard_and_hidden_state_losses_as_weighted():
    student = tiny(BriskBertForSequenceClassification, 2, seed=0)
    teacher = tiny(BriskBertForSequenceClassification, 4, seed=1)
    model = DistillationModel(student, teacher, temperature=2.0, alpha_kd=0.25, hidden_loss_weight=0.5)
    assert model.layer_map == [1, 3]  # each student layer learns from the teacher layer at the same depth
    inputs = batch(torch.tensor([0, 2]))
    loss = model.train()(**inputs).loss.detach()
    with torch.no_grad():
        own = student(**inputs, output_hidden_states=True)
        theirs = teacher(**{k: v for k, v in inputs.items() if k != "labels"}, output_hidden_states=True)
    soft = reference_kl(own.logits, theirs.logits, 2.0).mean() * 4.0
    real = inputs["attention_mask"].bool()
    hidden = torch.stack(
        [
            (own.hidden_states[s] - theirs.hidden_states[t]).pow(2).mean(-1)[real].mean()
            # embeddings, then student layer k against teacher layer map[k]
            for s, t in [(0, 0), (1, 2), (2, 4)]
        ]
    ).mean()
    expected = 0.25 * soft + 0.75 * own.loss + 0.5 * hidden  # an alpha below 0.5: 1 % alpha != 1 - alpha
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    evaluation = model.eval()(**inputs)  # evaluation scores the student alone, on the hard labels
    assert float(evaluation.loss) == pytest.approx(float(own.loss), rel=1e-6)


def test_a_narrower_student_learns_hidden_states_through_a_projection():
    student = tiny(BriskBertForSequenceClassification, 2, seed=0, hidden_size=16)
    teacher = tiny(BriskBertForSequenceClassification, 4, seed=1)
    model = DistillationModel(student, teacher, alpha_kd=1.0, hidden_loss_weight=1.0)
    assert (model.projection.in_features, model.projection.out_features) == (16, 32)
    assert DistillationModel(tiny(BriskBertForSequenceClassification, 2, 0), teacher).projection is None
    model.train()(**batch(torch.tensor([0, 2]))).loss.backward()
    assert model.projection.weight.grad.abs().sum() > 0
