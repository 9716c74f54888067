"""Open-domain QA: answers scored comparably across passages, and the evaluation's figures, worked out by hand
from a real QA forward path over a model whose start and end logits are fixed per token."""

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from briskbert.errors import SettingError
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.retrieval import open_domain_qa
from briskbert.retrieval.dense import RetrievalTask, Retrieved, Retriever
from briskbert.retrieval.fusion import Reranker
from briskbert.retrieval.open_domain_qa import Reader, evaluate_open_domain_qa, read_passages, select_answer

LOW = -8.0  # every token not listed below


class TokenLogits(nn.Module):
    """A QA model whose start and end logits are a fixed value per vocabulary entry."""

    def __init__(self, tokenizer, values: dict[str, float]):
        super().__init__()
        table = torch.full((len(tokenizer),), LOW)
        for word, value in values.items():
            (token,) = tokenizer(word, add_special_tokens=False)["input_ids"]
            table[token] = value
        self.table = nn.Parameter(table, requires_grad=False)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        logits = self.table[input_ids]
        return SimpleNamespace(start_logits=logits, end_logits=logits)


def _reader(tokenizer, values) -> Reader:
    return Reader(TokenLogits(tokenizer, values), tokenizer, max_seq_length=64, doc_stride=16)


def _log_softmax_at(values: list[float], index: int) -> float:
    return values[index] - math.log(sum(math.exp(v) for v in values))


# ---------------------------------------------------------------------------------- shared normalisation
def test_a_confident_wrong_span_loses_to_the_gold_passage_when_normalised_jointly(tokenizer):
    # "berlin" is the only likely token of its passage (per-passage probability ~1); "paris" has a higher
    # logit but shares its passage with other likely tokens (per-passage probability well under 1).
    reader = _reader(tokenizer, {"paris": 7.0, "answer": 6.5, "city": 6.5, "berlin": 6.0})
    passages = {"wrong": "the town of berlin", "gold": "the answer city is paris"}
    readings = read_passages(reader, {"q": "which capital?"}, {"q": list(passages)}, passages)["q"]

    def per_passage_probability(pid):
        reading = readings[pid]
        best = reading.spans[0]
        return math.exp(
            best["start_logit"] - reading.start_logsumexp + best["end_logit"] - reading.end_logsumexp
        )

    assert readings["wrong"].spans[0]["text"] == "berlin" and readings["gold"].spans[0]["text"] == "paris"
    # Normalised per passage, berlin would win.
    assert per_passage_probability("wrong") > 0.99 > 0.5 > per_passage_probability("gold")
    answer = select_answer(readings, ["wrong", "gold"])
    assert (answer.text, answer.passage_id) == ("paris", "gold")

    # The score is the span's log-probability among every context token of both passages, by hand: the
    # context tokens are "the town of berlin" and "the answer city is paris" (the question is left out).
    tokens = [LOW, LOW, LOW, 6.0, LOW, 6.5, 6.5, LOW, 7.0]
    assert answer.score == pytest.approx(2 * _log_softmax_at(tokens, tokens.index(7.0)), abs=1e-5)


def test_the_ranking_probability_outweighs_a_slightly_better_span_in_a_doubted_passage(tokenizer):
    reader = _reader(tokenizer, {"berlin": 6.0, "paris": 5.5})
    passages = {"wrong": "the town of berlin", "gold": "the city of paris"}
    readings = read_passages(reader, {"q": "which capital?"}, {"q": list(passages)}, passages)["q"]
    assert select_answer(readings, ["wrong", "gold"]).text == "berlin"  # the reader alone: 12 > 11
    # The ranking puts gold 3 logits ahead: log P(gold) - log P(wrong) = 3 > 12 - 11.
    answer = select_answer(readings, ["wrong", "gold"], ranking_logits=[0.0, 3.0])
    assert (answer.text, answer.passage_id) == ("paris", "gold")
    tokens = [LOW, LOW, LOW, 6.0, LOW, LOW, LOW, 5.5]
    expected = 2 * _log_softmax_at(tokens, 7) + _log_softmax_at([0.0, 3.0], 1)
    assert answer.score == pytest.approx(expected, abs=1e-5)
    assert answer.passage_probabilities == pytest.approx([1 / (1 + math.e**3), math.e**3 / (1 + math.e**3)])


def test_long_passages_are_normalised_over_all_their_windows(tokenizer):
    # 150 filler words then the answer: with 64-token windows and a 16-token stride the passage spans
    # several windows; the log-sum-exp must cover the context tokens of each window.
    reader = _reader(tokenizer, {"paris": 5.0, "city": 3.0})
    text = " ".join(["city"] * 150 + ["paris"])
    readings = read_passages(reader, {"q": "where?"}, {"q": ["p"]}, {"p": text})["q"]
    from briskbert.training.tasks.qa import prepare_eval_features

    example = {"id": ["x"], "question": ["where?"], "context": [text]}
    features = prepare_eval_features(example, tokenizer, 64, 16, max_query_length=64)
    assert len(features["input_ids"]) > 1  # windows
    context_logits = [
        3.0 if token == tokenizer.convert_tokens_to_ids("city") else 5.0
        for ids, offsets in zip(features["input_ids"], features["offset_mapping"])
        for token, offset in zip(ids, offsets)
        if offset is not None
    ]
    expected = math.log(sum(math.exp(value) for value in context_logits))
    assert readings["p"].start_logsumexp == pytest.approx(expected, abs=1e-5)


# ------------------------------------------------------------------------------------------ evaluation
def _world(tokenizer, monkeypatch, rankings, scores):
    corpus = dict(corpus_ids=["p1", "p2", "p3"], corpus_texts=["it was alpha", "it was beta", "it was gamma"])
    queries = dict(query_ids=["q1", "q2"], query_texts=["first question?", "second question?"])
    gold = dict(qrels={"q1": {"p1": 1.0}, "q2": {"p3": 1.0}}, answers={"q1": ["alpha"], "q2": ["gamma"]})
    task = RetrievalTask(**corpus, **queries, **gold)
    retrieved = Retrieved(rankings, scores)
    monkeypatch.setattr(open_domain_qa, "retrieve", lambda corpus, questions, retriever, top_k: retrieved)
    retriever = Retriever(encoder=None, tokenizer=None, spec=EmbeddingSpec(), scale=20.0)
    # The reader is most confident about "beta" (6 + 6), and equally about alpha and gamma (5 + 5).
    reader = _reader(tokenizer, {"alpha": 5.0, "beta": 6.0, "gamma": 5.0})
    return task, retriever, reader


def test_evaluation_figures_by_hand(tokenizer, monkeypatch):
    rankings = {"q1": ["p2", "p1", "p3"], "q2": ["p3", "p1", "p2"]}
    scores = {"q1": [0.50, 0.45, 0.10], "q2": [0.60, 0.20, 0.10]}  # x20: q1 10/9/2, q2 12/4/2
    task, retriever, reader = _world(tokenizer, monkeypatch, rankings, scores)
    metrics, answers = evaluate_open_domain_qa(task, retriever, reader, read_depths=(1, 3))

    assert metrics["reader_on_gold_paragraph"] == {"exact_match": 1.0, "f1": 1.0}
    top1, top3 = metrics["read_top_1"], metrics["read_top_3"]
    # Top 1: q1 reads only p2 (beta, wrong), q2 reads p3 (gamma, right).
    assert (top1["exact_match"], top1["gold_in_read_set"]) == (0.5, 0.5)
    assert top1["target_exact_match"] == pytest.approx(0.9 * 1.0 * 0.5)
    # Top 3: q1: beta 12 + log P(p2) vs alpha 10 + log P(p1), P(p2)/P(p1) = e -> beta (13 vs 10 + 0).
    # q2: gamma 10 + 12 against beta 12 + 2 -> gamma. The reader alone picks beta for both.
    assert (answers[3]["q1"].text, answers[3]["q2"].text) == ("beta", "gamma")
    assert top3["exact_match"] == 0.5 and top3["gold_in_read_set"] == 1.0
    assert top3["exact_match_reader_scores_only"] == 0.0
    assert top3["target_exact_match"] == pytest.approx(0.9)
    assert metrics["retrieval"]["recall@1"] == 0.5 and "warning" not in metrics
    with pytest.raises(SettingError, match="squad_file is needed"):  # one line, not a traceback
        evaluate_open_domain_qa(dataclasses.replace(task, answers={}), retriever, reader)


def test_evaluation_with_a_reranker_reports_its_ranking_and_warns_when_it_hurts(tokenizer, monkeypatch):
    rankings = {"q1": ["p1", "p2", "p3"], "q2": ["p3", "p1", "p2"]}
    scores = {"q1": [0.50, 0.45, 0.10], "q2": [0.60, 0.20, 0.10]}
    task, retriever, reader = _world(tokenizer, monkeypatch, rankings, scores)

    def prefers_beta(self, queries, retrieved, corpus, depth=None):
        return {
            q: [8.0 if pid == "p2" else 0.0 for pid in r[: depth or self.top_k]]
            for q, r in retrieved.rankings.items()
        }

    monkeypatch.setattr(Reranker, "score", prefers_beta)
    metrics, answers = evaluate_open_domain_qa(
        task, retriever, reader, Reranker(None, None, top_k=3, fusion_weight=1.0), read_depths=(1,)
    )
    assert metrics["ranking"]["recall@1"] == 0.0 and metrics["retrieval"]["recall@1"] == 1.0
    assert metrics["warning"].startswith(
        "re-ranking fused at weight 1 scores below retrieval alone (Recall@1 1.000 -> 0.000"
    )
    assert [answers[1][q].text for q in ("q1", "q2")] == ["beta", "beta"]
