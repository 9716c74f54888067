"""Recall@k, MRR@10 and nDCG@10 against implementations nobody here wrote: sentence-transformers'
``InformationRetrievalEvaluator.compute_metrics`` (binary relevance) and scikit-learn's ``ndcg_score``
(graded relevance), on random rankings."""

import random

import numpy as np
import pytest

from briskbert.training.retrieval.dense import RANK_DEPTH, RECALL_DEPTHS, retrieval_metrics

NUM_PASSAGES = 150  # more than the deepest recall depth, so every depth cuts the ranking somewhere


def random_run(seed: int, grades=(1,), max_relevant: int = 3):
    """``(rankings, qrels)`` of 20 queries: each ranks every passage; 1 to ``max_relevant`` are relevant."""
    rng = random.Random(seed)
    passages = [f"p{i}" for i in range(NUM_PASSAGES)]
    rankings, qrels = {}, {}
    for query in range(20):
        ranking = passages[:]
        rng.shuffle(ranking)
        # Relevant passages drawn near the top half the time, so every metric takes many values.
        pool = ranking[:12] if rng.random() < 0.5 else ranking
        relevant = rng.sample(pool, rng.randint(1, max_relevant))
        rankings[f"q{query}"] = ranking
        qrels[f"q{query}"] = {passage: float(rng.choice(grades)) for passage in relevant}
    return rankings, qrels


def sentence_transformers_metrics(rankings, qrels) -> dict:
    st_evaluation = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
    evaluator = st_evaluation.InformationRetrievalEvaluator(
        queries={query: query for query in rankings},
        corpus={f"p{i}": f"p{i}" for i in range(NUM_PASSAGES)},
        relevant_docs={query: set(graded) for query, graded in qrels.items()},
        mrr_at_k=[RANK_DEPTH],
        ndcg_at_k=[RANK_DEPTH],
        accuracy_at_k=[1],
        precision_recall_at_k=list(RECALL_DEPTHS),
        map_at_k=[RANK_DEPTH],
        write_csv=False,
    )
    # Scores that sort into each ranking's order (the evaluator re-sorts by score).
    results = [
        [{"corpus_id": passage, "score": float(-rank)} for rank, passage in enumerate(rankings[query])]
        for query in evaluator.queries_ids
    ]
    return evaluator.compute_metrics(results)


@pytest.mark.parametrize("seed", range(5))
def test_recall_mrr_and_ndcg_equal_sentence_transformers_evaluator(seed):
    rankings, qrels = random_run(seed)
    ours = retrieval_metrics(rankings, qrels)
    theirs = sentence_transformers_metrics(rankings, qrels)
    for k in RECALL_DEPTHS:
        assert ours[f"recall@{k}"] == pytest.approx(theirs["recall@k"][k], abs=1e-12), k
    assert ours[f"mrr@{RANK_DEPTH}"] == pytest.approx(theirs["mrr@k"][RANK_DEPTH], abs=1e-12)
    assert ours[f"ndcg@{RANK_DEPTH}"] == pytest.approx(theirs["ndcg@k"][RANK_DEPTH], abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_graded_ndcg_equals_scikit_learn(seed):
    from sklearn.metrics import ndcg_score

    rankings, qrels = random_run(seed, grades=(1, 2, 3), max_relevant=6)
    expected = []
    for query, ranking in rankings.items():
        position = {passage: rank for rank, passage in enumerate(ranking)}
        passages = sorted(position)
        gains = np.array([[qrels[query].get(passage, 0.0) for passage in passages]])
        scores = np.array([[-float(position[passage]) for passage in passages]])
        expected.append(ndcg_score(gains, scores, k=RANK_DEPTH))
    assert retrieval_metrics(rankings, qrels)[f"ndcg@{RANK_DEPTH}"] == pytest.approx(
        np.mean(expected), abs=1e-12
    )


def test_a_query_without_a_relevant_passage_is_refused():
    with pytest.raises(ValueError, match="q1"):
        retrieval_metrics({"q1": ["p1", "p2"]}, {"q1": {"p1": 0.0}})
