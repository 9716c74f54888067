# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""A cross-encoder re-ranker at query time, with the fusion weights ``finetune-reranker`` chose (:mod:`.fusion`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from briskbert.errors import SettingError
from briskbert.retrieval.dense import Retrieved, batches_by_length
from briskbert.retrieval.fusion import Fusion, fuse
from briskbert.retrieval.lexical import bm25_head_scores
from briskbert.retrieval.settings import RerankerArguments
from briskbert.training.data.task_data import DataError


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
    from tqdm.auto import tqdm

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
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

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
