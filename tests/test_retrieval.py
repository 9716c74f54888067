# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Sentence embeddings, retrieval and the retrieval commands on tiny models, checked against sentence-transformers
and sums written out by hand; the end-to-end test checks that the four commands' outputs fit together."""

import json
import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from briskbert.cli import main as cli
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec, read_embedding_spec
from briskbert.retrieval.dense import RANK_DEPTH, RECALL_DEPTHS, encode_texts, exact_search, retrieval_metrics
from briskbert.retrieval.settings import EmbeddingSettings
from briskbert.training.retrieval import embeddings
from briskbert.training.retrieval.embeddings import DualEncoder, Pair, multiple_negatives_ranking_loss
from briskbert.training.retrieval.similarity import cosent_loss, cosine_mse_loss

ROOT = Path(__file__).resolve().parents[1]
XQUAD = str(ROOT / "data" / "xquad_en_excerpt.json")
PAIRS = [
    Pair("who wrote les miserables?", "Victor Hugo wrote Les Miserables in 1862."),
    Pair("where is the eiffel tower?", "The Eiffel Tower stands in Paris, on the Champ de Mars."),
    Pair("what do bees make?", "Bees collect nectar and turn it into honey."),
    Pair("how tall is everest?", "Mount Everest is 8,849 metres high."),
]

# bert-tiny's layers, narrower: the checks are of the plumbing
SMALL = dict(hidden_size=32, intermediate_size=64)


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return lambda model_class, **config: tiny_model(model_class, **{**SMALL, **config})


# ------------------------------------------------------------------------------------------------ metrics
def test_metrics_match_a_hand_computed_example():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"d": 2, "e": 1}}
    rankings = {"q1": ["x", "a", "y"], "q2": ["b", "x", "y", "c"], "q3": ["e", "d"]}
    metrics = retrieval_metrics(rankings, qrels)
    # q1: hit at rank 2; q2: one of two relevant at rank 1, the other at 4; q3: both, the better second.
    log2 = math.log2
    assert metrics["recall@1"] == pytest.approx((0 + 0.5 + 0.5) / 3)
    assert metrics["recall@5"] == metrics["recall@100"] == pytest.approx(1.0)
    assert metrics["mrr@10"] == pytest.approx((0.5 + 1 + 1) / 3)
    ndcg = [1 / log2(3), (1 + 1 / log2(5)) / (1 + 1 / log2(3)), (1 + 2 / log2(3)) / (2 + 1 / log2(3))]
    assert metrics["ndcg@10"] == pytest.approx(sum(ndcg) / 3)  # graded: d (2) counts twice e (1)


def test_metrics_equal_sentence_transformers_evaluator_on_random_rankings():
    """20 queries ranking 150 passages, 1 to 3 relevant each, near the top half the time."""
    st_evaluation = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
    rng, num_passages = random.Random(0), 150
    passages = [f"p{i}" for i in range(num_passages)]
    rankings, qrels = {}, {}
    for query in range(20):
        ranking = rng.sample(passages, num_passages)
        relevant = rng.sample(ranking[:12] if rng.random() < 0.5 else ranking, rng.randint(1, 3))
        rankings[f"q{query}"], qrels[f"q{query}"] = ranking, dict.fromkeys(relevant, 1.0)
    corpus = {passage: passage for passage in next(iter(rankings.values()))}
    relevant = {query: set(graded) for query, graded in qrels.items()}
    depths = dict(mrr_at_k=[RANK_DEPTH], ndcg_at_k=[RANK_DEPTH], map_at_k=[RANK_DEPTH], accuracy_at_k=[1])
    depths.update(precision_recall_at_k=list(RECALL_DEPTHS), write_csv=False)
    queries = {query: query for query in rankings}
    evaluator = st_evaluation.InformationRetrievalEvaluator(queries, corpus, relevant, **depths)
    # Scores that sort into each ranking's order (the evaluator re-sorts by score).
    scored = [
        [{"corpus_id": passage, "score": float(-rank)} for rank, passage in enumerate(rankings[query])]
        for query in evaluator.queries_ids
    ]
    theirs = evaluator.compute_metrics(scored)
    ours = retrieval_metrics(rankings, qrels)
    for k in RECALL_DEPTHS:
        assert ours[f"recall@{k}"] == pytest.approx(theirs["recall@k"][k], abs=1e-12), k
    assert ours[f"mrr@{RANK_DEPTH}"] == pytest.approx(theirs["mrr@k"][RANK_DEPTH], abs=1e-12)
    assert ours[f"ndcg@{RANK_DEPTH}"] == pytest.approx(theirs["ndcg@k"][RANK_DEPTH], abs=1e-12)


def test_exact_search_returns_the_best_dot_products_in_order():
    torch.manual_seed(0)
    queries, passages = torch.randn(5, 8), torch.randn(40, 8)
    scores, indices = exact_search(queries, passages, top_k=3, block_size=2)
    full = queries @ passages.T
    assert torch.equal(indices, full.topk(3).indices)
    assert torch.allclose(scores, full.topk(3).values)


# ---------------------------------------------------------------------------------------------- training
def random_pairs(n=4, dim=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, dim, generator=generator), torch.randn(n, dim, generator=generator)


def test_the_symmetric_loss_equals_sentence_transformers_both_directions():
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    queries, positives = random_pairs()
    ours = multiple_negatives_ranking_loss(
        queries, positives, torch.arange(4), torch.arange(4), scale=20.0, symmetric=True
    )
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
    loss = multiple_negatives_ranking_loss(
        queries, positives, torch.arange(3), torch.tensor(ids), scale=20.0, symmetric=True
    )
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
    mine = multiple_negatives_ranking_loss(
        queries[2:], positives[2:], torch.arange(3), torch.arange(2, 5), scale=20.0
    )
    scores = 20 * F.normalize(queries, dim=-1) @ F.normalize(positives, dim=-1).T
    one_process = F.cross_entropy(scores, torch.arange(5), reduction="none")
    assert float(mine) == pytest.approx(float(one_process[2:].mean()), rel=1e-5)


class Encoder(nn.Module):
    pooler = None


@pytest.mark.parametrize("name", ["cosent", "cosine_mse", "multiple_negatives_ranking"])
def test_the_dual_encoder_applies_the_loss_it_was_given(name):
    spec = EmbeddingSettings(loss=name, score_range=(0.0, 5.0))
    model = DualEncoder(Encoder(), EmbeddingSpec(pooling="mean"), spec)
    first, second = random_pairs(n=3)
    labels = torch.tensor([0.5, 4.0, 2.0]) if spec.on_scored_pairs else torch.arange(3)
    output = model._loss(torch.cat([first, second]), labels, torch.arange(3))
    expected = {
        "cosent": lambda: cosent_loss(first, second, labels, 20.0),
        "cosine_mse": lambda: cosine_mse_loss(first, second, labels, (0.0, 5.0)),
        "multiple_negatives_ranking": lambda: multiple_negatives_ranking_loss(
            first, second, labels, torch.arange(3), 20.0
        ),
    }[name]()
    assert float(output.loss) == pytest.approx(float(expected), rel=1e-6)
    assert torch.equal(output.query_embeddings, first) and torch.equal(output.candidate_embeddings, second)


# ------------------------------------------------------------------------------------ saved folders
def test_saved_folders_load_in_sentence_transformers(tokenizer, tiny, tmp_path):
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from briskbert.modeling import BriskBertForSequenceClassification, BriskBertModel
    from briskbert.retrieval.fusion import score_pairs

    spec = EmbeddingSpec("cls", True, 64)
    encoder = tiny(BriskBertModel).eval()
    DualEncoder(encoder, spec, EmbeddingSettings()).save_pretrained(tmp_path / "embed")
    tokenizer.save_pretrained(tmp_path / "embed")
    assert read_embedding_spec(tmp_path / "embed") == spec
    texts = [pair.positive for pair in PAIRS]
    ours = encode_texts(encoder, tokenizer, texts, spec)
    loaded = SentenceTransformer(str(tmp_path / "embed"), trust_remote_code=True, device="cpu")
    torch.testing.assert_close(loaded.encode(texts, convert_to_tensor=True), ours, atol=1e-5, rtol=0)
    loaded.save(str(tmp_path / "resaved"))  # in sentence-transformers' own current layout
    assert read_embedding_spec(tmp_path / "resaved") == spec

    reranker = tiny(BriskBertForSequenceClassification, num_labels=1).eval()
    reranker.save_pretrained(tmp_path / "rerank")
    tokenizer.save_pretrained(tmp_path / "rerank")
    queries = [pair.query for pair in PAIRS]
    logits = score_pairs(reranker, tokenizer, queries, texts, max_seq_length=64)
    scores = CrossEncoder(str(tmp_path / "rerank"), trust_remote_code=True, device="cpu").predict(
        list(zip(queries, texts)), convert_to_tensor=True
    )
    # a sigmoid: CrossEncoder's default activation
    torch.testing.assert_close(scores.cpu(), torch.sigmoid(logits), atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------ commands
def test_a_json_lines_collection_keeps_judged_queries_and_graded_relevance(tmp_path):
    from briskbert.retrieval.dense import load_collection
    from briskbert.retrieval.settings import CollectionSource

    files = {
        "corpus": [{"id": 1, "text": "Paris is in France."}, {"id": 2, "text": "Bees make honey."}],
        "queries": [{"id": "a", "text": "where is paris?"}, {"id": "b", "text": "unjudged"}],
        "qrels": [{"query_id": "a", "passage_id": 1, "relevance": 2}, {"query_id": "a", "passage_id": 2}],
    }
    for name, rows in files.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = CollectionSource(**{f"{name}_file": str(tmp_path / f"{name}.jsonl") for name in files})
    task = load_collection(source)
    assert task.corpus == {"1": "Paris is in France.", "2": "Bees make honey."}
    assert task.queries == {"a": "where is paris?"} and task.qrels == {"a": {"1": 2.0, "2": 1.0}}


# Slow (about 30 s idle, more on a loaded machine): four commands, each loading models and data, and the
# only check that their outputs fit together (the embedder feeds the re-ranker's negatives and both tools).
@pytest.mark.slow
def test_the_four_commands_end_to_end(tiny, tokenizer, tmp_path, capsys):
    from briskbert.modeling import BriskBertForMaskedLM, BriskBertForQuestionAnswering
    from briskbert.retrieval.fusion import Fusion

    start = tmp_path / "start"
    tiny(BriskBertForMaskedLM).save_pretrained(start)
    tokenizer.save_pretrained(start)
    fast = "--max_train_steps 3 --logging_steps 1 --max_seq_length 96 --learning_rate 1e-3".split()
    cli(
        ["finetune-embeddings", "--model_name_or_path", str(start), "--train_file", XQUAD, "--train_articles", "0:3",
         "--validation_file", XQUAD, "--validation_articles", "3:4", "--mine_hard_negatives",
         "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "embed"), *fast]
    )  # fmt: skip
    embedder = tmp_path / "embed" / "final"
    last = (tmp_path / "embed" / "log_history.jsonl").read_text().splitlines()[-1]
    assert "eval_recall@1" in json.loads(last) and (embedder / "modules.json").is_file()

    distractors = tmp_path / "distractors.txt"
    distractors.write_text(
        " = Heading = \n" + "\n".join(f"filler passage number {i} about nothing" for i in range(30))
    )
    capsys.readouterr()
    cli(
        ["finetune-reranker", "--model_name_or_path", str(start), "--train_file", XQUAD, "--train_articles", "0:3",
         "--negatives_from", str(embedder), "--num_negatives", "2", "--per_device_train_batch_size", "4",
         "--validation_extra_corpus_file", str(distractors), "--rerank_top_k", "5",
         "--output_dir", str(tmp_path / "rerank"), *fast]
    )  # fmt: skip
    reranker = tmp_path / "rerank" / "final"
    last = (tmp_path / "rerank" / "log_history.jsonl").read_text().splitlines()[-1]
    assert {"eval_accuracy", "eval_mrr", "eval_chance_accuracy", "eval_chance_mrr"} <= set(json.loads(last))
    # No validation file: 10 % of the 3 articles, one whole, among all 15 paragraphs and the 30 distractors.
    fusion = Fusion.load(reranker)
    assert (
        fusion.top_k == 5 and fusion.retriever == str(embedder) and "among 45 passages" in fusion.validation
    )
    (title,) = fusion.held_out["articles"]
    held = f"{fusion.num_queries} questions held out of xquad_en_excerpt.json (articles {title}: 10% of its"
    assert f"No validation file: {held}" in capsys.readouterr().out
    card = (reranker / "README.md").read_text()
    assert held in card and fusion.summary() in card  # what the weights were chosen on, and their figures
    assert "fusion.json" in (reranker / "manifest.json").read_text()

    collection = ["--squad_file", XQUAD, "--articles", "3:4", "--extra_corpus_file", str(distractors)]
    cli(
        ["evaluate-retrieval", "--model_name_or_path", str(embedder), "--reranker_model_name_or_path", str(reranker),
         "--rerank_top_k", "5", *collection, "--output_dir", str(tmp_path / "eval")]
    )  # fmt: skip
    report = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    retrieved, reranked = report["retrieval"], report["reranked"]
    assert report["num_passages"] == 5 + 30 and report["rerank_top_k"] == 5
    # The saved weights apply by default; re-ranking reorders the top 5 only.
    assert (report["fusion_weight"], report["lexical_weight"]) == (fusion.weight, fusion.lexical_weight)
    assert [reranked[f"recall@{k}"] for k in (5, 10, 100)] == [retrieved[f"recall@{k}"] for k in (5, 10, 100)]

    reader = tmp_path / "reader"
    tiny(BriskBertForQuestionAnswering).save_pretrained(reader)
    tokenizer.save_pretrained(reader)
    models = ["--retriever_model_name_or_path", str(embedder), "--reader_model_name_or_path", str(reader)]
    cli(["open-domain-qa", *models, "--read_top_k", "2", *collection, "--output_dir", str(tmp_path / "odqa")])
    metrics = json.loads((tmp_path / "odqa" / "metrics.json").read_text())
    rates = [metrics[f"read_top_{depth}"]["gold_in_read_set"] for depth in (1, 2, 3, 5)]
    assert rates == sorted(rates) and rates[-1] == metrics["retrieval"]["recall@5"]
    assert metrics["num_questions"] == len(json.loads((tmp_path / "odqa" / "predictions.json").read_text()))
