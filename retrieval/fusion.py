# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The re-ranking stage and the retrieval evaluation: a cross-encoder re-orders the head of each ranking, its logit
fused with the retriever's score and BM25 at weights chosen on validation queries (``fusion.json``)::

    fused = retriever_scale * ((1 - weight - lexical_weight) * similarity + lexical_weight * bm25 / max_bm25)
            + weight * reranker_logit

Listwise logits and scaled similarities are both log-probabilities up to a constant; weights 0 keep retrieval's
order exactly.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from briskbert.errors import SettingError
from briskbert.files import write_atomic
from briskbert.inputs import read_json_object
from briskbert.retrieval.dense import (
    RANK_DEPTH,
    RECALL_DEPTHS,
    Retrieved,
    batches_by_length,
    ranking_shortfall,
    retrieval_metrics,
    retrieve,
)
from briskbert.retrieval.settings import RerankerArguments
from briskbert.training.data.task_data import DataError

FUSION_FILE = "fusion.json"
FUSION_GRID = tuple(step / 40 for step in range(41))  # re-ranker weights 0, 0.025, ..., 1
LEXICAL_GRID = tuple(step / 20 for step in range(21))  # BM25 weights 0, 0.05, ..., 1
SELECTION_METRICS = (f"mrr@{RANK_DEPTH}", f"recall@{RECALL_DEPTHS[0]}")  # compared in this order


_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """BM25's words: lower-cased runs of letters, digits and _, none stemmed."""
    return _WORD.findall(text.lower())


def bm25_head_scores(
    queries: dict[str, str],
    rankings: dict[str, list[str]],
    corpus: dict[str, str],
    depth: int,
    k1: float = 1.2,
    b: float = 0.75,
) -> dict[str, list[float]]:
    """Per query, the BM25 scores (``bm25s``' Lucene variant, over ``corpus``) of its first ``depth`` ranked
    passages divided by the largest, so they lie in [0, 1] (all 0 when none shares a word with the query). BM25
    keeps the exact rare words (names, numbers, dates) that one vector per passage loses."""
    import bm25s

    row = {passage_id: index for index, passage_id in enumerate(corpus)}
    tokens = [words(text) for text in corpus.values()]
    index = None
    if any(tokens):  # bm25s cannot index a collection without a word; no query could match one anyway
        index = bm25s.BM25(method="lucene", k1=k1, b=b, dtype="float64")
        index.index(tokens, show_progress=False)
    scores = {}
    for query_id, ranking in rankings.items():
        query = words(queries[query_id])
        if index is None or not query:
            scores[query_id] = [0.0] * len(ranking[:depth])
            continue
        collection = index.get_scores(query)
        raw = [float(collection[row[passage_id]]) for passage_id in ranking[:depth]]
        best = max(raw, default=0.0)
        scores[query_id] = [value / best if best > 0 else 0.0 for value in raw]
    return scores


def fuse(retrieved: Retrieved, head_scores, weight, retriever_scale, lexical_scores=None, lexical_weight=0.0):
    """Each query's head (what ``head_scores`` covers) ordered by the fused score (ties keep retrieval's order), the
    rest behind it; the scores are the head's fused scores."""
    rankings, scores = {}, {}
    for query_id, ranking in retrieved.rankings.items():
        logits = head_scores[query_id]
        lexical = lexical_scores[query_id] if lexical_scores else [0.0] * len(logits)
        retriever_weight = 1 - weight - lexical_weight
        fused = [
            retriever_scale * (retriever_weight * similarity + lexical_weight * bm25) + weight * logit
            for similarity, logit, bm25 in zip(retrieved.scores[query_id], logits, lexical)
        ]
        order = sorted(range(len(fused)), key=lambda index: -fused[index])
        rankings[query_id] = [ranking[index] for index in order] + ranking[len(fused) :]
        scores[query_id] = [fused[index] for index in order]
    return Retrieved(rankings, scores)


@dataclass(frozen=True)
class Fusion:
    """The fusion weights chosen for a re-ranker behind a retriever, with the selection metrics at every pair of
    weights tried (``curve``) and of retrieval alone."""

    weight: float
    retriever_scale: float
    top_k: int
    retriever: str | None = None
    validation: str | None = None
    num_queries: int = 0
    retrieval: dict = field(default_factory=dict)
    curve: list = field(default_factory=list)
    lexical_weight: float = 0.0
    held_out: dict = field(default_factory=dict)  # the training questions held out to choose on, if it was so

    def __post_init__(self):
        if min(self.weight, self.lexical_weight) < 0 or self.weight + self.lexical_weight > 1 + 1e-9:
            raise ValueError(
                f"fusion weights lie in [0, 1] and sum to at most 1 (the retriever gets the rest); got re-ranker "
                f"{self.weight:g} and BM25 {self.lexical_weight:g}."
            )

    def point(self, weight: float, lexical: float = 0.0) -> dict:
        return min(self.curve, key=lambda p: abs(p["weight"] - weight) + abs(p["lexical_weight"] - lexical))

    def summary(self) -> str:
        chosen, alone = self.point(self.weight, self.lexical_weight), self.point(1.0)
        figures = ", ".join(
            f"{name} {chosen[key]:.3f} (retrieval {self.retrieval[key]:.3f}, re-ranker alone {alone[key]:.3f})"
            for key, name in zip(SELECTION_METRICS, ("MRR@10", "Recall@1"))
        )
        return (
            f"Fusion weights re-ranker {self.weight:g}, BM25 {self.lexical_weight:g} (retriever "
            f"{1 - self.weight - self.lexical_weight:g}) chosen on "
            f"{self.validation or f'{self.num_queries} validation queries'}: {figures}."
        )

    def card_line(self) -> str:
        """The summary, and, when the cross-encoder alone ranked below retrieval there, that it says so."""
        if not ranking_shortfall(self.retrieval, self.point(1.0)):
            return self.summary()
        return (
            f"{self.summary()} Alone, the cross-encoder ranks below retrieval: use it fused at these weights "
            "(fusion.json, which evaluate-retrieval and open-domain-qa apply by default)."
        )

    def save(self, folder) -> None:
        write_atomic(Path(folder) / FUSION_FILE, json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, folder) -> Fusion | None:
        path = Path(folder) / FUSION_FILE
        if not path.is_file():
            return None
        fix = "delete it or train the re-ranker again"
        try:
            return cls(**read_json_object(path, "reranker_model_name_or_path", fix))
        except (TypeError, ValueError) as error:
            raise SettingError(
                "reranker_model_name_or_path", f"{path} is not a fusion file ({error}); {fix}."
            ) from None


def choose_fusion_weight(
    retrieved: Retrieved,
    head_scores: dict[str, list[float]],
    qrels: dict[str, dict[str, float]],
    retriever_scale: float,
    lexical_scores: dict[str, list[float]] | None = None,
) -> tuple[float, float, list[dict]]:
    """The weights (summing to at most 1) whose fusion scores best on ``qrels`` (MRR@10, then Recall@1; ties go to
    the smaller total, then the smaller re-ranker weight), and the metrics at every pair. Both grids hold 0:
    the choice never scores below retrieval alone."""
    lexical_grid = LEXICAL_GRID if lexical_scores is not None else (0.0,)
    pairs = sorted(
        (
            (weight, lexical)
            for weight in FUSION_GRID
            for lexical in lexical_grid
            if weight + lexical <= 1 + 1e-9
        ),
        key=lambda pair: (round(pair[0] + pair[1], 9), pair[0]),
    )
    curve = []
    for weight, lexical in pairs:
        fused = fuse(retrieved, head_scores, weight, retriever_scale, lexical_scores, lexical)
        metrics = retrieval_metrics(fused.rankings, qrels)
        curve.append(
            {"weight": weight, "lexical_weight": lexical, **{m: metrics[m] for m in SELECTION_METRICS}}
        )
    best = max(curve, key=lambda point: tuple(point[name] for name in SELECTION_METRICS))
    return best["weight"], best["lexical_weight"], curve


def shortfall_warning(retrieval: dict, ranked: dict, fusion_weight: float) -> dict:
    """``{"warning": one line}`` when the ``ranked`` metrics are below ``retrieval`` alone, else ``{}``."""
    shortfall = ranking_shortfall(retrieval, ranked)
    if not shortfall:
        return {}
    return {
        "warning": f"re-ranking fused at weight {fusion_weight:g} scores below retrieval alone "
        f"({', '.join(shortfall)}); lower fusion_weight (0 = retrieval alone)."
    }


def encode_pairs(tokenizer, queries: list[str], passages: list[str], max_seq_length: int):
    """(query, passage) pairs as the cross-encoder reads them, in training and at query time."""
    return tokenizer(
        queries, passages, truncation=True, max_length=max_seq_length, padding=True, return_tensors="pt"
    )


@torch.no_grad()
def score_pairs(
    model, tokenizer, queries: list[str], passages: list[str], max_seq_length: int, batch_size=32
):
    """The relevance logit of each (query, passage) pair, as a CPU float tensor in input order."""
    model.eval()
    device = next(model.parameters()).device
    lengths = [len(query) + len(passage) for query, passage in zip(queries, passages)]
    scores = torch.zeros(len(queries))
    for chunk in tqdm(batches_by_length(lengths, batch_size), desc="re-ranking", leave=False):
        encoded = encode_pairs(
            tokenizer, [queries[i] for i in chunk], [passages[i] for i in chunk], max_seq_length
        )
        scores[chunk] = model(**encoded.to(device)).logits[:, 0].float().cpu()
    return scores


@dataclass
class Reranker:
    """A cross-encoder, how deep it re-orders, and the fusion weights it applies."""

    model: object
    tokenizer: object
    top_k: int = 20
    max_seq_length: int = 256
    batch_size: int = 32
    fusion_weight: float = 0.0  # of its logit in the fusion: 0 keeps retrieval's order
    fusion: Fusion | None = None  # what finetune-reranker measured on validation queries, if it did
    lexical_weight: float = 0.0  # of the BM25 score in the fusion (0: not computed)

    def score(
        self, queries, retrieved: Retrieved, corpus, depth: int | None = None
    ) -> dict[str, list[float]]:
        """The logits of each query's first ``depth`` (default ``top_k``) passages, in retrieval order."""
        heads = {query_id: ranking[: depth or self.top_k] for query_id, ranking in retrieved.rankings.items()}
        questions = [queries[query_id] for query_id, head in heads.items() for _ in head]
        passages = [corpus[pid] for head in heads.values() for pid in head]
        scores = score_pairs(
            self.model, self.tokenizer, questions, passages, self.max_seq_length, self.batch_size
        )
        logits = iter(scores.tolist())  # query by query, each head in retrieval order
        return {query_id: [next(logits) for _ in head] for query_id, head in heads.items()}

    def rerank(self, queries, retrieved: Retrieved, corpus, retriever_scale: float, depth: int | None = None):
        """``(logits, fused)``: :meth:`score`, and the order fused at this re-ranker's weights."""
        depth = depth or self.top_k
        logits = self.score(queries, retrieved, corpus, depth)
        lexical = (
            bm25_head_scores(queries, retrieved.rankings, corpus, depth) if self.lexical_weight else None
        )
        return logits, fuse(
            retrieved, logits, self.fusion_weight, retriever_scale, lexical, self.lexical_weight
        )


def load_reranker(settings: RerankerArguments, batch_size: int = 32) -> Reranker | None:
    """The re-ranker ``settings`` name (or ``None``) at the weights given, else its ``fusion.json``'s, else 0."""
    name_or_path = settings.reranker_model_name_or_path
    if not name_or_path:
        return None
    model = AutoModelForSequenceClassification.from_pretrained(name_or_path, trust_remote_code=True)
    if model.config.num_labels != 1:
        raise DataError(
            f"re-ranker {name_or_path!r} has {model.config.num_labels} labels; a re-ranker gives one relevance logit "
            "(train one with `briskbert finetune-reranker`)."
        )
    fusion = Fusion.load(name_or_path)  # None for a Hub id or a folder without fusion.json
    chosen = fusion or Fusion(weight=0.0, retriever_scale=1.0, top_k=settings.rerank_top_k)
    fusion_weight = chosen.weight if settings.fusion_weight is None else settings.fusion_weight
    lexical_weight = chosen.lexical_weight if settings.lexical_weight is None else settings.lexical_weight
    if fusion_weight + lexical_weight > 1.0 + 1e-9:
        raise SettingError(
            "lexical_weight",
            f"{lexical_weight:g} and the re-ranker weight {fusion_weight:g} sum to more than 1; lower "
            "lexical_weight or fusion_weight.",
        )
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=True)
    top_k, max_length = settings.rerank_top_k, settings.reranker_max_seq_length
    return Reranker(
        model.eval(), tokenizer, top_k, max_length, batch_size, fusion_weight, fusion, lexical_weight
    )


def evaluate_retrieval(task, retriever, reranker=None) -> dict:
    """Metrics of retrieval alone and, with a re-ranker, of its own order (``"reranked"``) and of the fused one
    (``"fused"``, with a ``"warning"`` when below retrieval)."""
    retrieved = retrieve(
        task.corpus, task.queries, retriever, max(RECALL_DEPTHS[-1], reranker.top_k if reranker else 0)
    )
    report = {
        "num_queries": len(task.query_ids),
        "num_passages": len(task.corpus_ids),
        "retrieval": retrieval_metrics(retrieved.rankings, task.qrels),
    }
    if reranker is None:
        return report
    logits, fused = reranker.rerank(task.queries, retrieved, task.corpus, retriever.scale)
    report |= {
        "reranked": retrieval_metrics(fuse(retrieved, logits, 1.0, retriever.scale).rankings, task.qrels),
        "fused": retrieval_metrics(fused.rankings, task.qrels),
        "fusion_weight": reranker.fusion_weight,
        "lexical_weight": reranker.lexical_weight,
        "rerank_top_k": reranker.top_k,
    }
    return report | shortfall_warning(report["retrieval"], report["fused"], reranker.fusion_weight)
