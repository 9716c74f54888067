"""The dual encoder's losses against sentence-transformers and hand-written sums.

Written to kill the mutants of the losses in ``training/retrieval/embeddings.py`` (see docs/testing.md): the
symmetric ranking loss, positives shared by several queries, the targets of a process that is not the first,
and which loss the dual encoder applies for each ``--loss``.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.training.retrieval import embeddings
from briskbert.training.retrieval.embeddings import ContrastiveLossSpec, DualEncoder
from briskbert.training.retrieval.similarity import cosent_loss, cosine_mse_loss

ranking_loss = embeddings.multiple_negatives_ranking_loss


def random_pairs(n=4, dim=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, dim, generator=generator), torch.randn(n, dim, generator=generator)


def test_the_symmetric_loss_equals_sentence_transformers_both_directions():
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    queries, positives = random_pairs()
    ours = ranking_loss(queries, positives, torch.arange(4), torch.arange(4), scale=20.0, symmetric=True)
    reference = MultipleNegativesRankingLoss(
        model=None, scale=20.0, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
    )
    theirs = reference.compute_loss_from_embeddings([queries, positives], labels=None)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-5)


def _cross_entropy(scores: list[float], target: int, allowed: list[bool]) -> float:
    return -scores[target] + math.log(sum(math.exp(s) for s, keep in zip(scores, allowed) if keep))


def test_queries_sharing_a_positive_are_not_each_others_negatives_in_the_reverse_direction():
    queries, positives = random_pairs(n=3)
    ids = [7, 8, 7]  # queries 0 and 2 have the same positive passage
    loss = ranking_loss(queries, positives, torch.arange(3), torch.tensor(ids), scale=20.0, symmetric=True)
    q, p = F.normalize(queries, dim=-1), F.normalize(positives, dim=-1)
    forward = reverse = 0.0
    for i in range(3):
        others_allowed = [j == i or ids[j] != ids[i] for j in range(3)]
        forward += _cross_entropy([20 * float(q[i] @ p[j]) for j in range(3)], i, others_allowed)
        reverse += _cross_entropy([20 * float(p[i] @ q[j]) for j in range(3)], i, others_allowed)
    assert float(loss) == pytest.approx((forward + reverse) / 6, rel=1e-5)


def test_the_second_process_scores_its_queries_against_its_own_positives(monkeypatch):
    """Process 1 of 2: the gathered candidates start with process 0's, so its targets are shifted by them."""
    queries, positives = random_pairs(n=5)
    theirs = F.normalize(positives[:2], dim=-1)  # process 0's candidates, normalised there before the gather
    monkeypatch.setattr(embeddings, "gather_with_grad", lambda local: torch.cat([theirs, local]))
    monkeypatch.setattr(
        embeddings, "gather_with_offset", lambda local: (torch.cat([torch.arange(2), local]), 2)
    )
    mine = ranking_loss(queries[2:], positives[2:], torch.arange(3), torch.arange(2, 5), scale=20.0)
    scores = 20 * F.normalize(queries, dim=-1) @ F.normalize(positives, dim=-1).T
    one_process = F.cross_entropy(scores, torch.arange(5), reduction="none")
    assert float(mine) == pytest.approx(float(one_process[2:].mean()), rel=1e-5)


class Encoder(nn.Module):
    pooler = None


@pytest.mark.parametrize("name", ["cosent", "cosine_mse", "multiple_negatives_ranking"])
def test_the_dual_encoder_applies_the_loss_it_was_given(name):
    spec = ContrastiveLossSpec(name=name, score_range=(0.0, 5.0))
    model = DualEncoder(Encoder(), EmbeddingSpec(pooling="mean"), spec)
    first, second = random_pairs(n=3)
    labels = torch.tensor([0.5, 4.0, 2.0]) if spec.on_scored_pairs else torch.arange(3)
    output = model._loss(torch.cat([first, second]), labels, torch.arange(3))
    expected = {
        "cosent": lambda: cosent_loss(first, second, labels, 20.0),
        "cosine_mse": lambda: cosine_mse_loss(first, second, labels, (0.0, 5.0)),
        "multiple_negatives_ranking": lambda: ranking_loss(first, second, labels, torch.arange(3), 20.0),
    }[name]()
    assert float(output.loss) == pytest.approx(float(expected), rel=1e-6)
    assert torch.equal(output.query_embeddings, first) and torch.equal(output.candidate_embeddings, second)
