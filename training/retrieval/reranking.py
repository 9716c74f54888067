# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Cross-encoder re-ranking: one relevance logit, trained on groups of a query, its positive and negatives drawn
each epoch from a pool, with a listwise or pointwise loss."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import SequenceClassifierOutput

from briskbert.retrieval.dense import RetrievalTask, Retriever, retrieve
from briskbert.retrieval.reranker import encode_pairs
from briskbert.training.data.task_data import DataError
from briskbert.training.retrieval.embeddings import Pair, Wrapper


@dataclass
class RerankGroup:
    query: str
    positive: str
    negatives: list[str]  # the pool; a training batch reads num_negatives of them


def _distinct_passages(pairs: list[Pair], extra_passages: list[str] = (), pool_size: int = 0) -> list[str]:
    """The distinct positives, negatives and ``extra_passages``: more than ``pool_size`` of them, or an error."""
    texts = [pair.positive for pair in pairs] + [pair.negative for pair in pairs if pair.negative]
    passages = list(dict.fromkeys(texts + list(extra_passages)))
    if len(passages) <= pool_size:
        raise DataError(
            f"{pool_size} negatives per query need more than {pool_size} distinct passages; the "
            f"data has {len(passages)}. Lower num_negatives / negative_pool_size."
        )
    return passages


def negative_pools(
    pairs: list[Pair], pool_size: int, seed: int, retriever: Retriever | None = None, extra_passages=()
) -> list[RerankGroup]:
    """Each pair's own negative (if any), then the passages but its positive that ``retriever`` ranks highest
    among the training passages and ``extra_passages`` (the mistakes to correct), else random ones."""
    passages = _distinct_passages(pairs, extra_passages if retriever else (), pool_size)
    if retriever is None:
        rng = random.Random(seed)
        candidates = [rng.sample(passages, min(len(passages), pool_size + 2)) for _ in pairs]
    else:
        corpus = {str(index): text for index, text in enumerate(passages)}
        queries = {str(index): pair.query for index, pair in enumerate(pairs)}
        found = retrieve(corpus, queries, retriever, top_k=pool_size + 2).rankings
        candidates = [[corpus[passage_id] for passage_id in found[query_id]] for query_id in queries]
    groups = []
    for pair, found_texts in zip(pairs, candidates):
        negatives = [pair.negative] if pair.negative else []
        others = [text for text in found_texts if text != pair.positive and text not in negatives]
        groups.append(
            RerankGroup(pair.query, pair.positive, negatives + others[: pool_size - len(negatives)])
        )
    return groups


class RerankGroups(torch.utils.data.Dataset):
    """Groups with ``num_negatives`` negatives: the pair's own (first in its pool) if any, the rest drawn every
    epoch, seeded by ``seed``, the epoch and the index (a resumed run draws the same)."""

    def __init__(
        self, groups: list[RerankGroup], num_negatives: int, seed: int = 0, own_negative: bool = False
    ):
        if any(len(group.negatives) < num_negatives for group in groups):
            raise DataError(f"every query needs {num_negatives} negatives; some pools are smaller.")
        self.groups, self.num_negatives, self.seed = groups, num_negatives, seed
        self.own_negative, self.epoch = own_negative, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, index: int) -> RerankGroup:
        group = self.groups[index]
        kept = group.negatives[:1] if self.own_negative else []
        rng = random.Random(f"{self.seed}/{self.epoch}/{index}")
        drawn = rng.sample(group.negatives[len(kept) :], self.num_negatives - len(kept))
        return RerankGroup(group.query, group.positive, kept + drawn)


@dataclass
class GroupCollator:
    """B groups -> B*G (query, passage) rows; ``labels`` (B, G) hold 1 for the positive in column 0."""

    tokenizer: object
    max_seq_length: int

    def __call__(self, groups: list[RerankGroup]) -> dict:
        size = 1 + len(groups[0].negatives)
        queries = [group.query for group in groups for _ in range(size)]
        passages = [passage for group in groups for passage in (group.positive, *group.negatives)]
        labels = torch.zeros(len(groups), size)
        labels[:, 0] = 1.0
        return {"labels": labels, **encode_pairs(self.tokenizer, queries, passages, self.max_seq_length)}


def pairs_collection(pairs: list[Pair], distractors: list[str] = ()) -> RetrievalTask:
    """The pairs' distinct passages and ``distractors``, each query's positive its relevant one."""
    passage_ids = {text: f"p{index}" for index, text in enumerate(_distinct_passages(pairs, distractors))}
    query_ids = [f"q{index}" for index in range(len(pairs))]
    return RetrievalTask(
        list(passage_ids.values()),
        list(passage_ids),
        query_ids,
        [pair.query for pair in pairs],
        {qid: {passage_ids[pair.positive]: 1.0} for qid, pair in zip(query_ids, pairs)},
    )


class CrossEncoderForRanking(Wrapper):
    """A one-logit sequence classifier with a ``listwise`` or ``pointwise`` ranking loss over groups."""

    def __init__(self, model, loss: str = "listwise"):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(
        self, labels, input_ids, attention_mask, token_type_ids=None, **unused
    ) -> SequenceClassifierOutput:
        output = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits = output.logits.float().view(labels.shape)
        if self.loss == "listwise":
            loss = F.cross_entropy(logits, labels.argmax(dim=1))
        else:
            loss = F.binary_cross_entropy_with_logits(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def group_ranking_metrics(model, dataloader, accelerator) -> dict:
    """The share of groups whose positive scores highest (``accuracy``) and its mean reciprocal rank (``mrr``),
    beside what a random order scores (``chance_accuracy``, ``chance_mrr``)."""
    from briskbert.training.engine.evaluation import evaluation_loop

    def per_group(batch, outputs):
        rank = 1 + (outputs.logits[:, 1:] > outputs.logits[:, :1]).sum(dim=1)
        return {"rank": rank, "size": torch.full_like(rank, outputs.logits.shape[1])}

    gathered = evaluation_loop(model, dataloader, accelerator, per_group)
    ranks, sizes = gathered["rank"], gathered["size"].long().tolist()
    return {
        "accuracy": float((ranks == 1).float().mean()),
        "mrr": float((1 / ranks).mean()),
        "chance_accuracy": sum(1 / size for size in sizes) / len(sizes),
        "chance_mrr": sum(sum(1 / rank for rank in range(1, size + 1)) / size for size in sizes) / len(sizes),
    }
