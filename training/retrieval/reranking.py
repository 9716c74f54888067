# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Cross-encoder re-ranking: ``BriskBertForSequenceClassification`` with one relevance logit, trained on groups
of a query, its positive and negatives drawn each epoch from a pool, with a listwise or pointwise loss; then the
fusion weights chosen on validation queries. The saved folder loads with ``AutoModelForSequenceClassification``
and sentence-transformers' ``CrossEncoder``."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import SequenceClassifierOutput

from briskbert.retrieval.dense import RetrievalTask, Retriever, retrieval_metrics
from briskbert.retrieval.fusion import SELECTION_METRICS, Fusion, choose_fusion_weight
from briskbert.retrieval.lexical import bm25_head_scores
from briskbert.retrieval.reranker import encode_pairs, load_reranker
from briskbert.retrieval.search import Retrieved, retrieve
from briskbert.retrieval.settings import RerankerArguments
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
    """Each pair's own negative (if any), then the passages ``retriever`` ranks highest among the training
    passages and ``extra_passages`` but its positive (the mistakes a re-ranker behind it has to correct), or
    without one random other passages of the training data."""
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
    """Groups with ``num_negatives`` negatives each: the pair's own (first in its pool) if it has one, the rest
    drawn afresh every epoch, seeded by ``seed``, the epoch and the index (a resumed run draws the same)."""

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
        pool = group.negatives[len(kept) :]
        drawn = random.Random(f"{self.seed}/{self.epoch}/{index}").sample(
            pool, self.num_negatives - len(kept)
        )
        return RerankGroup(group.query, group.positive, kept + drawn)


class GroupCollator:
    """B groups -> B*G (query, passage) rows; ``labels`` (B, G) hold 1 for the positive in column 0."""

    def __init__(self, tokenizer, max_seq_length: int):
        self.tokenizer, self.max_seq_length = tokenizer, max_seq_length

    def __call__(self, groups: list[RerankGroup]) -> dict:
        size = 1 + len(groups[0].negatives)
        queries = [group.query for group in groups for _ in range(size)]
        passages = [passage for group in groups for passage in (group.positive, *group.negatives)]
        encoded = encode_pairs(self.tokenizer, queries, passages, self.max_seq_length)
        labels = torch.zeros(len(groups), size)
        labels[:, 0] = 1.0
        return {"labels": labels, **encoded}


def pairs_collection(pairs: list[Pair], distractors: list[str] = ()) -> RetrievalTask:
    """The pairs' distinct positives, negatives and ``distractors`` as passages, each query's positive its
    relevant one."""
    passages = _distinct_passages(pairs, distractors)
    passage_ids = {text: f"p{index}" for index, text in enumerate(passages)}
    query_ids = [f"q{index}" for index in range(len(pairs))]
    return RetrievalTask(
        list(passage_ids.values()),
        passages,
        query_ids,
        [pair.query for pair in pairs],
        {qid: {passage_ids[pair.positive]: 1.0} for qid, pair in zip(query_ids, pairs)},
    )


@dataclass
class TrainingSets:
    """The training groups, the validation groups (fixed negatives) and what the fusion weights are chosen on."""

    train: RerankGroups
    validation_groups: RerankGroups | None = None
    validation_task: RetrievalTask | None = None
    fusion_retrieved: Retrieved | None = None
    fusion_retriever: str | None = None
    retriever_scale: float = 1.0
    held_out: dict | None = None  # what was held out of the training data, when there was no validation file


def validation_sets(
    train: RerankGroups,
    pairs: list[Pair],
    distractors: list[str],
    retriever: Retriever | None,
    retriever_name: str | None,
    depth: int,
) -> TrainingSets:
    """Validation ``pairs`` among their passages and ``distractors``, their negatives the ``retriever``'s top
    ``depth`` wrong ones (random negatives and no fusion without one)."""
    task = pairs_collection(pairs, distractors)
    if retriever is None:
        pools = negative_pools(pairs, train.num_negatives, train.seed)
        return TrainingSets(train, RerankGroups(pools, train.num_negatives), task)
    corpus = task.corpus
    retrieved = retrieve(corpus, task.queries, retriever, top_k=depth)
    groups = []
    for query_id, pair in zip(task.query_ids, pairs):
        wrong = [corpus[pid] for pid in retrieved.rankings[query_id] if pid not in task.qrels[query_id]]
        groups.append(RerankGroup(pair.query, pair.positive, wrong[: train.num_negatives]))
    return TrainingSets(
        train, RerankGroups(groups, train.num_negatives), task, retrieved, retriever_name, retriever.scale
    )


class CrossEncoderForRanking(Wrapper):
    """A one-logit sequence classifier with a ``listwise`` or ``pointwise`` ranking loss over groups."""

    def __init__(self, model, loss: str = "listwise"):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(
        self, labels, input_ids, attention_mask, token_type_ids=None, **unused
    ) -> SequenceClassifierOutput:
        logits = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).logits
        logits = logits.float().view(labels.shape)
        if self.loss == "listwise":
            loss = F.cross_entropy(logits, labels.argmax(dim=1))
        else:
            loss = F.binary_cross_entropy_with_logits(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def group_ranking_metrics(model, dataloader, accelerator) -> dict:
    """Over validation groups: the share whose positive scores highest (``accuracy``) and its mean reciprocal
    rank (``mrr``), beside what ranking each group at random scores (``chance_accuracy``, ``chance_mrr``)."""
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


def choose_and_save_fusion(
    folder,
    sets: TrainingSets,
    top_k: int,
    max_seq_length: int,
    batch_size: int = 32,
    device="cpu",
    held_out: str | None = None,
) -> Fusion:
    """Score the validation queries' top ``top_k`` with the re-ranker saved in ``folder`` and with BM25, choose
    the fusion weights on them and save them in ``folder`` (``held_out``: the validation queries, in words)."""
    settings = RerankerArguments(str(folder), rerank_top_k=top_k, reranker_max_seq_length=max_seq_length)
    reranker = load_reranker(settings, batch_size)
    reranker.model.to(device)
    task = sets.validation_task
    queries, corpus = task.queries, task.corpus
    head_scores = reranker.score(queries, sets.fusion_retrieved, corpus)
    lexical = bm25_head_scores(queries, sets.fusion_retrieved.rankings, corpus, top_k)
    weight, lexical_weight, curve = choose_fusion_weight(
        sets.fusion_retrieved, head_scores, task.qrels, sets.retriever_scale, lexical_scores=lexical
    )
    retrieval = retrieval_metrics(sets.fusion_retrieved.rankings, task.qrels)
    fusion = Fusion(
        weight=weight,
        retriever_scale=sets.retriever_scale,
        top_k=top_k,
        retriever=sets.fusion_retriever,
        validation=f"{held_out or f'{len(task.query_ids)} queries'} among {len(task.corpus_ids)} passages",
        num_queries=len(task.query_ids),
        retrieval={name: retrieval[name] for name in SELECTION_METRICS},
        curve=curve,
        lexical_weight=lexical_weight,
        held_out=sets.held_out or {},
    )
    fusion.save(folder)
    return fusion
