"""BM25 in the re-ranking stage against Lucene's definition; the fusion of BM25, the re-ranker and retrieval, its
weights chosen on validation, the fusion file and the weights a loaded re-ranker applies (cases by hand)."""

import json
import math
from pathlib import Path

import pytest

from briskbert.errors import SettingError, UserError
from briskbert.retrieval.dense import Retrieved
from briskbert.retrieval.fusion import (
    FUSION_FILE,
    Fusion,
    Reranker,
    bm25_head_scores,
    choose_fusion_weight,
    fuse,
    load_reranker,
    words,
)
from briskbert.retrieval.settings import RerankerArguments
from briskbert.training.data.task_data import DataError

ROOT = Path(__file__).resolve().parents[1]
XQUAD = ROOT / "data" / "xquad_en_excerpt.json"


def lucene_bm25(query: str, passage: str, collection: list[str], k1: float, b: float) -> float:
    """Lucene's BM25 from its definition: every word of the query, repeats included, over the collection."""
    documents = [words(text) for text in collection]
    mean_length = sum(map(len, documents)) / len(documents)
    passage_words = words(passage)
    total = 0.0
    for word in words(query):
        frequency = passage_words.count(word)
        df = sum(word in document for document in documents)
        idf = math.log(1 + (len(documents) - df + 0.5) / (df + 0.5))
        total += idf * frequency / (frequency + k1 * (1 - b + b * len(passage_words) / mean_length))
    return total


@pytest.mark.parametrize("k1, b, num_paragraphs, depth", [(None, None, 20, 8), (0.9, 0.4, 1, 5)])
def test_head_scores_are_lucene_bm25_over_the_collection_scaled_to_the_best(k1, b, num_paragraphs, depth):
    assert words("Tesla's 1943 DEATH, in New_York; Zürich!") == [
        "tesla", "s", "1943", "death", "in", "new_york", "zürich",
    ]  # fmt: skip
    articles = json.loads(XQUAD.read_text(encoding="utf-8"))["data"]
    paragraphs = [paragraph["context"] for article in articles for paragraph in article["paragraphs"]]
    corpus = {f"p{index}": text for index, text in enumerate(paragraphs[:num_paragraphs])}
    queries = {
        "no words": "?!",  # first: the queries after it are still scored
        "normans": "When did the Normans conquer England?",
        "repeats": "What is the the name of the river river?",  # repeated words count each time, as in Lucene
        "nowhere": "zyzzyva",  # in no paragraph: every score 0, nothing divided by zero
    }
    rankings = {query_id: list(reversed(corpus)) for query_id in queries}  # the head: the last `depth` ids
    options = {} if k1 is None else {"k1": k1, "b": b}
    scores = bm25_head_scores(queries, rankings, corpus, depth, **options)
    for query_id, query in queries.items():
        head = rankings[query_id][:depth]
        raw = [lucene_bm25(query, corpus[pid], list(corpus.values()), k1 or 1.2, b or 0.75) for pid in head]
        expected = [value / max(raw) for value in raw] if max(raw) > 0 else [0.0] * len(head)
        assert scores[query_id] == pytest.approx(expected, rel=1e-9, abs=1e-12), query_id
    assert max(scores["normans"]) == 1.0 and scores["nowhere"] == scores["no words"] == [0.0] * len(head)
    # A collection without a word (bm25s cannot index it) scores 0 too.
    empty = bm25_head_scores({"q": "cat"}, {"q": ["b", "a"]}, {"a": "", "b": " ... "}, depth=5)
    assert empty == {"q": [0.0, 0.0]}


def _retrieved() -> tuple[Retrieved, dict, dict]:
    # q1: retrieval puts the relevant "b" second (0.50 vs 0.45: 1 logit apart at scale 20), and "b" shares
    # the question's words (BM25 1.0 against 0.2); q2: retrieval is right ("e" first by 4 logits) and
    # BM25 slightly prefers the wrong "d" (1.0 against 0.9).
    rankings = {"q1": ["a", "b", "c", "z"], "q2": ["e", "d", "f", "z"]}
    retrieved = Retrieved(rankings, scores={"q1": [0.50, 0.45, 0.10, 0.0], "q2": [0.60, 0.40, 0.30, 0.0]})
    lexical = {"q1": [0.2, 1.0, 0.0], "q2": [0.9, 1.0, 0.0]}
    return retrieved, {"q1": {"b": 1.0}, "q2": {"e": 1.0}}, lexical


# The re-ranker prefers b for q1 by 2 logits and d for q2 by 2 logits; it reads the first three.
HEAD = {"q1": [0.0, 2.0, -5.0], "q2": [0.0, 2.0, -5.0]}


def test_the_reranker_reorders_the_head_only_and_weight_zero_is_retrieval():
    retrieved, qrels, _ = _retrieved()
    assert fuse(retrieved, HEAD, 0.0, 20).rankings == retrieved.rankings
    assert fuse(retrieved, HEAD, 1.0, 20).rankings == {"q1": ["b", "a", "c", "z"], "q2": ["d", "e", "f", "z"]}
    # weight 0.5: q1 a = 0.5*10 + 0 = 5.0, b = 0.5*9 + 1 = 5.5 -> b first; q2 e = 6.0, d = 0.5*8 + 1 = 5.0 -> e.
    assert fuse(retrieved, HEAD, 0.5, 20).rankings == {"q1": ["b", "a", "c", "z"], "q2": ["e", "d", "f", "z"]}
    weight, lexical_weight, curve = choose_fusion_weight(retrieved, HEAD, qrels, retriever_scale=20)
    assert lexical_weight == 0.0  # no BM25 scores given: only the re-ranker's weight is searched
    # q1 turns right once w*2 > (1-w)*1, i.e. w > 1/3; q2 turns wrong once w*2 > (1-w)*4, i.e. w > 2/3.
    # The smallest grid weight above 1/3 is 0.35 (grid step 0.025: 0.325 < 1/3 < 0.35).
    assert weight == pytest.approx(0.35)
    recall = {point["weight"]: point["recall@1"] for point in curve}
    assert recall[0.0] == recall[1.0] == recall[0.7] == 0.5 and recall[0.35] == recall[0.65] == 1.0


def test_lexical_weight_reorders_the_head_on_the_similarity_scale():
    retrieved, _, lexical = _retrieved()
    logits = {"q1": [1.0, 3.0, 0.0], "q2": [0.0, 0.0, 0.0]}
    fused = fuse(retrieved, logits, 0.25, 20, lexical, 0.5)
    # q1: a = 20 * (0.25 * 0.5 + 0.5 * 0.2) + 0.25, b = 20 * (0.25 * 0.45 + 0.5 * 1.0) + 0.75 -> b first.
    assert fused.scores["q1"][:2] == pytest.approx([20 * (0.1125 + 0.5) + 0.75, 20 * (0.125 + 0.1) + 0.25])
    zeros = {"q1": [0.0] * 3, "q2": [0.0] * 3}
    # l = 0.5: q1 a = 10 * 0.5 + 10 * 0.2 = 7.0, b = 10 * 0.45 + 10 = 14.5 -> b first;
    # q2 e = 6 + 9 = 15, d = 4 + 10 = 14 -> e stays first.
    fused = fuse(retrieved, zeros, 0.0, 20, lexical, 0.5)
    assert fused.rankings == {"q1": ["b", "a", "c", "z"], "q2": ["e", "d", "f", "z"]}
    assert fuse(retrieved, zeros, 0.0, 20, lexical, 0.0).rankings == retrieved.rankings
    # Twenty passages the fused score cannot tell apart: an unstable sort would shuffle them.
    ids = [f"p{index}" for index in range(20)]
    flat = {"q": [1.0] * 20}
    assert fuse(Retrieved({"q": ids}, {"q": [0.5] * 20}), flat, 0.5, 20, flat, 0.25).rankings == {"q": ids}


def test_the_bm25_weight_is_chosen_where_it_helps_and_a_harmful_reranker_stays_at_zero():
    retrieved, qrels, lexical = _retrieved()
    harmful = {"q1": [9.0, -9.0, 0.0], "q2": [-9.0, 9.0, 0.0]}
    chosen = choose_fusion_weight(retrieved, harmful, qrels, 20, lexical_scores=lexical)
    weight, lexical_weight, curve = chosen
    # q1 turns right once 20(1-l)0.05 < 20 l 0.8, i.e. l > 1/17 (0.0588): the smallest grid weight is 0.1
    # (grid step 0.05); q2 turns wrong once 20(1-l)0.2 < 20 l 0.1, i.e. l > 2/3.
    assert (weight, lexical_weight) == (0.0, pytest.approx(0.1))
    recall = {(point["weight"], point["lexical_weight"]): point["recall@1"] for point in curve}
    assert recall[(0.0, 0.0)] == recall[(0.0, 0.05)] == recall[(0.0, 0.7)] == 0.5
    assert recall[(0.0, 0.65)] == 1.0
    assert all(point["weight"] + point["lexical_weight"] <= 1 + 1e-9 for point in curve)


@pytest.mark.parametrize(
    "scores, logits, lexical, expected",
    [
        # This re-ranker fixes q1 from weight 1/3 on, BM25 from 1/17 on: the smaller total wins.
        (None, {"q1": [0.0, 2.0, -5.0], "q2": [0.0, 2.0, -5.0]}, None, (0.0, 0.1)),
        # Both fix q1 from 0.05 on: (0, 0.05), (0.025, 0.025) and (0.05, 0) tie on every metric and on their
        # total, and the least cross-encoder wins, as it costs the most to run.
        ([0.50, 0.49], {"q1": [0.0, 4.0]}, {"q1": [0.0, 1.0]}, (0.0, 0.05)),
        # The cross-encoder fixes q1 from 0.05 on, BM25 only above 1/3: the smaller total needs the former.
        ([0.50, 0.49], {"q1": [0.0, 4.0]}, {"q1": [0.98, 1.0]}, (0.05, 0.0)),
        # Scores that change nothing tie, and the tie goes to retrieval.
        (None, {"q1": [1.0] * 3, "q2": [1.0] * 3}, {"q1": [1.0] * 3, "q2": [1.0] * 3}, (0.0, 0.0)),
    ],
)
def test_ties_go_to_the_smaller_total_then_the_smaller_reranker_weight(scores, logits, lexical, expected):
    retrieved, qrels, default_lexical = _retrieved()
    if scores is not None:
        retrieved, qrels = Retrieved(rankings={"q1": ["a", "b"]}, scores={"q1": scores}), {"q1": {"b": 1.0}}
    choice = choose_fusion_weight(retrieved, logits, qrels, 20, lexical_scores=lexical or default_lexical)
    assert choice[:2] == pytest.approx(expected)


def test_fusion_file_round_trip_older_files_and_bad_ones(tmp_path):
    fusion = Fusion(weight=0.1, retriever_scale=20.0, top_k=10, lexical_weight=0.55, num_queries=2)
    fusion.save(tmp_path)
    assert Fusion.load(tmp_path) == fusion and Fusion.load(tmp_path / "nowhere") is None
    (tmp_path / FUSION_FILE).write_text(json.dumps({"weight": 0.3, "retriever_scale": 20, "top_k": 10}))
    assert Fusion.load(tmp_path).lexical_weight == 0.0  # written before the BM25 term
    for bad, message in (
        ({"weight": 0.6, "lexical_weight": 0.5}, "sum to at most 1"),
        ({"w": 1}, "fusion file"),
    ):
        (tmp_path / FUSION_FILE).write_text(json.dumps({"retriever_scale": 20, "top_k": 10, **bad}))
        with pytest.raises(UserError, match=message):
            Fusion.load(tmp_path)
    (tmp_path / FUSION_FILE).write_text("{")
    with pytest.raises(UserError, match="fusion.json is not valid JSON"):
        Fusion.load(tmp_path)
    Fusion(weight=0.4, retriever_scale=20.0, top_k=10, lexical_weight=0.6)  # the two may use up all of 1
    with pytest.raises(ValueError, match="sum to at most 1"):
        Fusion(weight=0.2, retriever_scale=20.0, top_k=10, lexical_weight=-0.1)


def test_summary_names_every_weight_and_the_chosen_point():
    points = [(0.0, 0.0, 0.80, 0.70), (0.1, 0.55, 0.90, 0.85), (1.0, 0.0, 0.40, 0.30)]
    curve = [dict(zip(("weight", "lexical_weight", "mrr@10", "recall@1"), point)) for point in points]
    fusion = Fusion(0.1, 20.0, 10, num_queries=96, retrieval={"mrr@10": 0.8, "recall@1": 0.7}, curve=curve,
                    lexical_weight=0.55)  # fmt: skip
    assert fusion.summary() == (
        "Fusion weights re-ranker 0.1, BM25 0.55 (retriever 0.35) chosen on 96 validation queries: MRR@10 0.900 "
        "(retrieval 0.800, re-ranker alone 0.400), Recall@1 0.850 (retrieval 0.700, re-ranker alone 0.300)."
    )


class _FlatReranker(Reranker):
    def __init__(self, lexical_weight):
        super().__init__(None, None, top_k=3, lexical_weight=lexical_weight)

    def score(self, queries, retrieved, corpus, depth=None):
        return {qid: [0.0] * (depth or self.top_k) for qid in retrieved.rankings}


def test_the_reranker_fuses_bm25_over_the_collection_on_its_head():
    retrieved, _, _ = _retrieved()
    corpus = {"a": "the weather in spring", "b": "normans conquered england in 1066", "c": "rivers flow",
              "d": "the seine", "e": "paris lies on the seine river", "f": "bread", "z": "nothing"}  # fmt: skip
    queries = {"q1": "when did the normans conquer england?", "q2": "which city lies on the seine river?"}
    _, fused = _FlatReranker(0.5).rerank(queries, retrieved, corpus, 20)
    assert [ranking[0] for ranking in fused.rankings.values()] == ["b", "e"]
    assert _FlatReranker(0.0).rerank(queries, retrieved, corpus, 20)[1].rankings == retrieved.rankings
    _, fused = _FlatReranker(0.5).rerank(queries, retrieved, corpus, 20, depth=2)  # BM25 over the same head
    assert [len(scores) for scores in fused.scores.values()] == [2, 2]


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # the 0-label model
def test_unchosen_weights_are_zero_and_the_weights_a_sum_of_at_most_one(tmp_path, tokenizer, tiny_model):
    from briskbert.modeling import BriskBertForSequenceClassification

    for num_labels, folder in ((2, tmp_path / "two"), (1, tmp_path)):
        sizes = dict(num_labels=num_labels, hidden_size=32, intermediate_size=64)
        model = tiny_model(BriskBertForSequenceClassification, **sizes)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    def load(folder=tmp_path, **weights):
        return load_reranker(RerankerArguments(str(folder), **weights))

    with pytest.raises(DataError, match="has 2 labels; a re-ranker gives one relevance logit"):
        load(tmp_path / "two")
    assert load_reranker(RerankerArguments()) is None
    # No fusion.json: the weights were never chosen, so the cross-encoder weighs 0 (retrieval's order).
    reranker = load()
    assert reranker.fusion is None and (reranker.fusion_weight, reranker.lexical_weight) == (0.0, 0.0)
    alone = load(lexical_weight=0.5)  # BM25 with the retriever, no cross-encoder
    assert (alone.fusion_weight, alone.lexical_weight) == (0.0, 0.5)
    Fusion(weight=0.2, retriever_scale=20.0, top_k=10, lexical_weight=0.6).save(tmp_path)
    reranker = load()
    assert (reranker.fusion_weight, reranker.lexical_weight) == (0.2, 0.6)
    assert load(lexical_weight=0.0).lexical_weight == 0.0  # the flag overrides
    with pytest.raises(SettingError, match="sum to more than 1; lower lexical_weight or fusion_weight"):
        load(fusion_weight=0.6)
