"""Edge cases of the linear-chain CRF that its brute-force tests (tests/test_crf.py) do not reach.

Written to kill the mutants of ``modeling/crf.py`` (see docs/testing.md): a batch without any tagged
position, and sentences of a single word, whose marginals are one softmax written out by hand.
"""

import pytest
import torch

from briskbert.modeling.crf import IGNORE_INDEX, LinearChainCRF


def crf_with_scores(num_tags=3, seed=0):
    torch.manual_seed(seed)
    crf = LinearChainCRF(num_tags)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.normal_()
    return crf


def test_a_batch_without_tagged_positions_scores_zero_per_row_and_decodes_nothing():
    crf = crf_with_scores()
    emissions, tags = (
        torch.randn(2, 5, 3),
        torch.zeros(2, 5, dtype=torch.long),
    )  # 2 rows, 3 tags: shapes differ
    nothing = torch.zeros(2, 5, dtype=torch.bool)
    for value in (crf.log_partition(emissions, nothing), crf.score(emissions, tags, nothing)):
        assert torch.equal(value, torch.zeros(2))
    assert torch.equal(crf.neg_log_likelihood(emissions, tags, nothing), torch.zeros(2))
    assert torch.equal(crf.decode(emissions, nothing), torch.full((2, 5), IGNORE_INDEX))
    assert torch.equal(crf.marginals(emissions, nothing), torch.zeros(2, 5, 3))


def test_the_marginals_of_one_word_sentences_are_a_softmax_of_start_emission_and_end():
    crf = crf_with_scores(seed=1)
    emissions = torch.randn(2, 4, 3)
    mask = torch.tensor([[False, True, False, False], [True, False, False, False]])  # one word each
    marginals = crf.marginals(emissions, mask)
    for row, position in [(0, 1), (1, 0)]:
        by_hand = (crf.start_transitions + emissions[row, position] + crf.end_transitions).softmax(-1)
        torch.testing.assert_close(marginals[row, position], by_hand.detach(), rtol=1e-5, atol=1e-6)
    assert marginals[mask == 0].abs().sum() == 0


def test_a_path_scores_start_emissions_transitions_and_the_end_of_its_last_word():
    crf = crf_with_scores(seed=2)
    emissions = torch.randn(2, 5, 3)
    mask = torch.tensor([[True, True, True, False, False], [True, False, True, True, True]])
    tags = torch.tensor([[2, 0, 1, 0, 0], [1, 0, 0, 2, 2]])
    scores = crf.score(emissions, tags, mask)
    for row in range(2):
        positions = mask[row].nonzero().flatten().tolist()
        path = tags[row, positions].tolist()
        by_hand = crf.start_transitions[path[0]] + crf.end_transitions[path[-1]]
        by_hand = by_hand + sum(emissions[row, p, t] for p, t in zip(positions, path))
        by_hand = by_hand + sum(crf.transitions[a, b] for a, b in zip(path, path[1:]))
        torch.testing.assert_close(scores[row], by_hand.detach(), rtol=1e-5, atol=1e-6)


def test_tag_ids_outside_the_tag_set_are_refused():
    crf = crf_with_scores()
    emissions, mask = torch.randn(1, 3, 3), torch.ones(1, 3, dtype=torch.bool)
    for wrong in (3, 4, -1):  # the tag count itself, beyond it, below 0
        with pytest.raises(ValueError, match=r"tag ids must lie in \[0, 3\)"):
            crf.score(emissions, torch.tensor([[0, wrong, 1]]), mask)
