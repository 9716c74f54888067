# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The fusion of a re-ranker with the retriever's score and BM25, its weights chosen on validation queries
(``fusion.json``), and the retrieval evaluation::

    fused = retriever_scale * ((1 - weight - lexical_weight) * similarity + lexical_weight * bm25 / max_bm25)
            + weight * reranker_logit

Listwise logits and scaled similarities are both log-probabilities up to a constant; weights 0 keep retrieval's
order exactly.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from briskbert.errors import SettingError
from briskbert.files import write_atomic
from briskbert.inputs import read_json_object
from briskbert.retrieval.dense import (
    RANK_DEPTH,
    RECALL_DEPTHS,
    Retrieved,
    ranking_shortfall,
    retrieval_metrics,
    retrieve,
)

FUSION_FILE = "fusion.json"
FUSION_GRID = tuple(step / 40 for step in range(41))  # re-ranker weights 0, 0.025, ..., 1
LEXICAL_GRID = tuple(step / 20 for step in range(21))  # BM25 weights 0, 0.05, ..., 1
SELECTION_METRICS = (f"mrr@{RANK_DEPTH}", f"recall@{RECALL_DEPTHS[0]}")  # compared in this order


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

    def point(self, weight: float, lexical_weight: float = 0.0) -> dict:
        """The curve's point nearest to these weights."""
        return min(
            self.curve,
            key=lambda p: abs(p["weight"] - weight) + abs(p["lexical_weight"] - lexical_weight),
        )

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
    grid: tuple[float, ...] = FUSION_GRID,
    lexical_scores: dict[str, list[float]] | None = None,
    lexical_grid: tuple[float, ...] = LEXICAL_GRID,
) -> tuple[float, float, list[dict]]:
    """The weights (summing to at most 1) whose fusion scores best on ``qrels`` (MRR@10, then Recall@1; ties go to
    the smaller total, then the smaller re-ranker weight), and the metrics at every pair."""
    lexical_grid = lexical_grid if lexical_scores is not None else (0.0,)
    if 0.0 not in grid or 0.0 not in lexical_grid:
        raise ValueError("the fusion grid must contain 0 (retrieval alone), so the choice is never below it.")
    pairs = sorted(
        ((weight, lexical) for weight in grid for lexical in lexical_grid if weight + lexical <= 1.0 + 1e-9),
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


def evaluate_retrieval(task, retriever, reranker=None) -> dict:
    """Metrics of retrieval alone and, with a re-ranker, of its own order (``"reranked"``) and of the fused one
    (``"fused"``, with a ``"warning"`` when below retrieval)."""
    start = time.perf_counter()
    retrieved = retrieve(
        task.corpus, task.queries, retriever, max(RECALL_DEPTHS[-1], reranker.top_k if reranker else 0)
    )
    report = {
        "num_queries": len(task.query_ids),
        "num_passages": len(task.corpus_ids),
        "retrieval": retrieval_metrics(retrieved.rankings, task.qrels),
        "retrieval_s": round(time.perf_counter() - start, 2),
    }
    if reranker is None:
        return report
    start = time.perf_counter()
    logits, fused = reranker.rerank(task.queries, retrieved, task.corpus, retriever.scale)
    report |= {
        "reranked": retrieval_metrics(fuse(retrieved, logits, 1.0, retriever.scale).rankings, task.qrels),
        "fused": retrieval_metrics(fused.rankings, task.qrels),
        "fusion_weight": reranker.fusion_weight,
        "lexical_weight": reranker.lexical_weight,
        "rerank_top_k": reranker.top_k,
        "rerank_s": round(time.perf_counter() - start, 2),
    }
    return report | shortfall_warning(report["retrieval"], report["fused"], reranker.fusion_weight)
