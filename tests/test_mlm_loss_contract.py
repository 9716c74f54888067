"""The masked-language-modelling loss against transformers' own ``ForMaskedLMLoss``.

Written to kill the mutants of ``masked_lm_loss`` in ``modeling/modeling_briskbert.py`` (see docs/testing.md):
full ``(batch, sequence, vocabulary)`` logits as a model without sparse prediction gives them, positions
labelled -100 left out, and the sum over a gradient-accumulation window divided by the window's item count.
"""

import pytest
import torch
from transformers.loss.loss_utils import ForMaskedLMLoss

from briskbert.modeling.modeling_briskbert import masked_lm_loss

VOCAB = 11


def logits_and_labels(seed=0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 5, VOCAB, generator=generator)  # sequence length 5 != vocabulary size
    labels = torch.randint(0, VOCAB, (2, 5), generator=generator)
    labels[0, :3] = labels[1, 4] = -100  # unlabelled positions
    return logits, labels


def test_mean_over_labelled_positions_of_full_logits_equals_transformers():
    logits, labels = logits_and_labels()
    ours = masked_lm_loss(logits, labels)
    assert float(ours) == pytest.approx(float(ForMaskedLMLoss(logits, labels, VOCAB)), rel=1e-6)


def test_a_window_sum_is_divided_by_the_windows_item_count_as_in_transformers():
    logits, labels = logits_and_labels(seed=1)
    window_items = torch.tensor(16)  # more labelled positions in the window than in this micro-batch (6)
    ours = masked_lm_loss(logits, labels, num_items_in_batch=window_items)
    theirs = ForMaskedLMLoss(logits, labels, VOCAB, num_items_in_batch=window_items)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-6)
    assert float(ours) == pytest.approx(float(masked_lm_loss(logits, labels)) * 6 / 16, rel=1e-6)
