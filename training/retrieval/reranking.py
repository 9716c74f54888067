# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Cross-encoder re-ranking: a (query, passage) pair through ``BriskBertForSequenceClassification`` with
one relevance logit, and its fusion with the retriever's score.

Training groups (:class:`RerankGroup`) hold a query, its positive and a pool of negatives: the pair's own
negative when the data has one, then the passages a dual encoder ranks highest among the training passages
and optional distractors (:func:`retrieved_negative_pools`), or random passages of the training data
(:func:`random_negative_pools`). :class:`RerankGroups` draws ``num_negatives`` of each pool afresh every
epoch (seeded), so several epochs see more of the retriever's mistakes than one fixed set.
:class:`GroupCollator` flattens a batch of groups into B x G pairs (positive first in each group);
:class:`CrossEncoderForRanking` computes either the listwise loss (cross-entropy over each group's logits,
the positive being the target) or the pointwise loss (binary cross-entropy, positive 1 and negatives 0).
The saved folder is the plain sequence-classification model (``num_labels=1``), so
``AutoModelForSequenceClassification`` and sentence-transformers' ``CrossEncoder`` load it with
``trust_remote_code=True``.

Fusion. A listwise-trained re-ranker's logits are log-probabilities over a query's candidates up to a
constant, and so are the retriever's similarities times the scale it was trained with. The fused score of
a retrieved passage is the weighted product of the two distributions, with optionally a third signal, the
passage's BM25 score (``training.retrieval.lexical``) divided by the best of the query's head, on the
similarity's scale::

    fused = retriever_scale * ((1 - weight - lexical_weight) * similarity + lexical_weight * bm25 / max_bm25)
            + weight * reranker_logit

Both weights 0 are retrieval's order (exactly: the retrieved list is returned untouched); ``weight`` 1 the
re-ranker's. :func:`choose_fusion_weight` picks both on validation queries (MRR@10, then Recall@1; ties go
to the smaller weights), so on that data the fused ranking is never below retrieval alone;
``finetune-reranker`` saves the choice as ``fusion.json`` in the re-ranker's folder (:class:`Fusion`), and
``evaluate-retrieval`` and ``open-domain-qa`` apply it by default.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from briskbert.training.data.task_data import DataError
from briskbert.training.retrieval.dense import (
    RANK_DEPTH,
    RECALL_DEPTHS,
    RetrievalTask,
    Retriever,
    ranking_shortfall,
    retrieval_metrics,
)
from briskbert.training.retrieval.embeddings import Pair
from briskbert.training.retrieval.lexical import BM25
from briskbert.training.retrieval.retrieval_arguments import RANKING_LOSSES
from briskbert.training.retrieval.search import Retrieved, retrieve

FUSION_FILE = "fusion.json"
FUSION_GRID = tuple(step / 40 for step in range(41))  # re-ranker weights 0, 0.025, ..., 1
LEXICAL_GRID = tuple(step / 20 for step in range(21))  # BM25 weights 0, 0.05, ..., 1
SELECTION_METRICS = (f"mrr@{RANK_DEPTH}", f"recall@{RECALL_DEPTHS[0]}")  # compared in this order


@dataclass
class RerankGroup:
    query: str
    positive: str
    negatives: list[str]  # the pool; a training batch reads num_negatives of them


# ------------------------------------------------------------------------------------------------ data
def _distinct_passages(pairs: list[Pair], extra_passages: list[str] = ()) -> list[str]:
    texts = (
        [pair.positive for pair in pairs] + [p.negative for p in pairs if p.negative] + list(extra_passages)
    )
    return list(dict.fromkeys(texts))


def random_negative_pools(pairs: list[Pair], pool_size: int, seed: int) -> list[RerankGroup]:
    """Each pair's own negative (if any), topped up with random other passages of the training data."""
    passages = _distinct_passages(pairs)
    if len(passages) <= pool_size:
        raise DataError(
            f"{pool_size} negatives per query need more than {pool_size} distinct passages; the "
            f"training data has {len(passages)}. Lower --num_negatives / --negative_pool_size."
        )
    rng = random.Random(seed)
    groups = []
    for pair in pairs:
        negatives = [pair.negative] if pair.negative else []
        while len(negatives) < pool_size:
            candidate = rng.choice(passages)
            if candidate != pair.positive and candidate not in negatives:
                negatives.append(candidate)
        groups.append(RerankGroup(pair.query, pair.positive, negatives))
    return groups


def retrieved_negative_pools(
    pairs: list[Pair], pool_size: int, retriever: Retriever, extra_passages: list[str] = ()
) -> list[RerankGroup]:
    """Each pair's own negative (if any), then the passages ``retriever`` ranks highest that are not its
    positive, searched among the training passages and ``extra_passages`` (distractors): the mistakes a
    re-ranker behind that retriever has to correct."""
    passages = _distinct_passages(pairs, extra_passages)
    if len(passages) <= pool_size:
        raise DataError(f"{pool_size} negatives per query need more distinct passages than {len(passages)}.")
    corpus = {str(index): text for index, text in enumerate(passages)}
    queries = {str(index): pair.query for index, pair in enumerate(pairs)}
    found = retrieve(corpus, queries, retriever, top_k=pool_size + 2)
    groups = []
    for index, pair in enumerate(pairs):
        negatives = [pair.negative] if pair.negative else []
        for passage_id in found.rankings[str(index)]:
            text = corpus[passage_id]
            if len(negatives) < pool_size and text not in (pair.positive, *negatives):
                negatives.append(text)
        groups.append(RerankGroup(pair.query, pair.positive, negatives))
    return groups


class RerankGroups(torch.utils.data.Dataset):
    """Groups read with ``num_negatives`` negatives each: the pair's own negative when it has one (first in
    its pool), the rest drawn from the pool afresh every epoch, seeded by ``seed``, the epoch and the index
    (a resumed run draws the same)."""

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
    """``list[RerankGroup]`` -> ``{"labels": (B, G) with 1 for the positive in column 0, "input_ids",
    "token_type_ids", "attention_mask": (B*G, L)}``."""

    def __init__(self, tokenizer, max_seq_length: int):
        self.tokenizer, self.max_seq_length = tokenizer, max_seq_length

    def __call__(self, groups: list[RerankGroup]) -> dict:
        size = 1 + len(groups[0].negatives)
        queries = [group.query for group in groups for _ in range(size)]
        passages = [passage for group in groups for passage in (group.positive, *group.negatives)]
        encoded = self.tokenizer(
            queries,
            passages,
            truncation="longest_first",
            max_length=self.max_seq_length,
            padding=True,
            return_tensors="pt",
        )
        labels = torch.zeros(len(groups), size)
        labels[:, 0] = 1.0
        return {"labels": labels, **encoded}


def pairs_collection(pairs: list[Pair], distractors: list[str] = ()) -> RetrievalTask:
    """A retrieval collection from pairs: the distinct positives, negatives and ``distractors`` are the
    passages, each query's positive its relevant one (for a SQuAD file, its own paragraph)."""
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
    """The training groups and, with validation queries, their groups (fixed negatives: the retriever's
    top-ranked wrong passages, else random ones) and what the fusion weight is chosen on."""

    train: RerankGroups
    validation_groups: RerankGroups | None = None
    validation_task: RetrievalTask | None = None
    fusion_retrieved: Retrieved | None = None
    fusion_retriever: str | None = None
    retriever_scale: float = 1.0


def validation_sets(
    train: RerankGroups,
    pairs: list[Pair],
    distractors: list[str],
    retriever: Retriever | None,
    retriever_name: str | None,
    depth: int,
) -> TrainingSets:
    """:class:`TrainingSets` for validation ``pairs`` among their passages and ``distractors``, searched
    ``depth`` deep by ``retriever`` (random negatives and no fusion without one)."""
    task = pairs_collection(pairs, distractors)
    if retriever is None:
        pools = random_negative_pools(pairs, train.num_negatives, train.seed)
        return TrainingSets(train, RerankGroups(pools, train.num_negatives), task)
    corpus, queries = (
        dict(zip(task.corpus_ids, task.corpus_texts)),
        dict(zip(task.query_ids, task.query_texts)),
    )
    retrieved = retrieve(corpus, queries, retriever, top_k=depth)
    groups = []
    for query_id, pair in zip(task.query_ids, pairs):
        wrong = [corpus[pid] for pid in retrieved.rankings[query_id] if pid not in task.qrels[query_id]]
        groups.append(RerankGroup(pair.query, pair.positive, wrong[: train.num_negatives]))
    return TrainingSets(
        train,
        RerankGroups(groups, train.num_negatives),
        task,
        retrieved,
        retriever_name,
        retriever.scale,
    )


# ----------------------------------------------------------------------------------------------- model
class CrossEncoderForRanking(nn.Module):
    """``BriskBertForSequenceClassification`` (one logit) with a ranking loss over groups, for the shared loop."""

    def __init__(self, model, loss: str = "listwise"):
        super().__init__()
        if loss not in RANKING_LOSSES:
            raise ValueError(f"ranking loss {loss!r} is not one of {', '.join(RANKING_LOSSES)}.")
        self.model, self.loss = model, loss

    def gradient_checkpointing_enable(self, **kwargs):
        self.model.gradient_checkpointing_enable(**kwargs)

    def save_pretrained(self, folder, state_dict=None, **kwargs):
        if state_dict is not None:  # gathered from a sharded engine: keys carry this wrapper's prefix
            state_dict = {key.removeprefix("model."): value for key, value in state_dict.items()}
        self.model.save_pretrained(folder, state_dict=state_dict, **kwargs)

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
    """``evaluate_fn`` for the loop: over validation groups (positive in column 0), the share whose positive
    scores highest (``accuracy``) and the mean reciprocal rank of the positive (``mrr``)."""
    from briskbert.training.engine.loop import evaluation_loop

    def per_group(batch, outputs):
        rank = 1 + (outputs.logits[:, 1:] > outputs.logits[:, :1]).sum(dim=1)
        return {"rank": rank}

    ranks = evaluation_loop(model, dataloader, accelerator, per_group)["rank"]
    return {"accuracy": float((ranks == 1).float().mean()), "mrr": float((1 / ranks).mean())}


# ------------------------------------------------------------------------------------------- inference
@torch.no_grad()
def score_pairs(
    model, tokenizer, queries: list[str], passages: list[str], max_seq_length: int, batch_size: int = 32
) -> torch.Tensor:
    """The relevance logit of each (query, passage) pair, as a CPU float tensor in input order. Pairs go
    through in batches of similar length, so little of each batch is padding."""
    from tqdm.auto import tqdm

    model.eval()
    device = next(model.parameters()).device
    lengths = [len(query) + len(passage) for query, passage in zip(queries, passages)]
    order = sorted(range(len(queries)), key=lambda index: -lengths[index])
    scores = torch.zeros(len(queries))
    for start in tqdm(range(0, len(order), batch_size), desc="re-ranking", leave=False):
        chunk = order[start : start + batch_size]
        encoded = tokenizer(
            [queries[index] for index in chunk],
            [passages[index] for index in chunk],
            truncation="longest_first",
            max_length=max_seq_length,
            padding=True,
            return_tensors="pt",
        ).to(device)
        scores[chunk] = model(**encoded).logits[:, 0].float().cpu()
    return scores


@dataclass
class Reranker:
    """A cross-encoder, how deep it re-orders each retrieved list, and the fusion weight it applies
    (``None``: its own order, as without fusion)."""

    model: object
    tokenizer: object
    top_k: int = 20
    max_seq_length: int = 256
    batch_size: int = 32
    fusion_weight: float | None = None
    fusion: Fusion | None = None  # what finetune-reranker measured on validation queries, if it did
    lexical_weight: float = 0.0  # of the BM25 score in the fusion (0: not computed)

    def score(
        self, queries: dict[str, str], retrieved: Retrieved, corpus: dict[str, str], depth: int | None = None
    ) -> dict[str, list[float]]:
        """The re-ranker's logit for each of the first ``depth`` (default ``top_k``) passages of each
        retrieved list, in retrieval order."""
        depth = depth or self.top_k
        query_ids = [qid for qid, ranking in retrieved.rankings.items() for _ in ranking[:depth]]
        passage_ids = [pid for ranking in retrieved.rankings.values() for pid in ranking[:depth]]
        logits = score_pairs(
            self.model,
            self.tokenizer,
            [queries[qid] for qid in query_ids],
            [corpus[pid] for pid in passage_ids],
            self.max_seq_length,
            self.batch_size,
        ).tolist()
        scores: dict[str, list[float]] = {qid: [] for qid in retrieved.rankings}
        for query_id, logit in zip(query_ids, logits):
            scores[query_id].append(logit)
        return scores

    def lexical_scores(
        self, queries: dict[str, str], retrieved: Retrieved, corpus: dict[str, str], depth: int | None = None
    ) -> dict[str, list[float]] | None:
        """BM25 of the same head, over ``corpus``'s statistics (see :meth:`BM25.head_scores`), when the fusion
        weighs it; else ``None``."""
        if not self.lexical_weight:
            return None
        return BM25(corpus.values()).head_scores(queries, retrieved.rankings, corpus, depth or self.top_k)


# ---------------------------------------------------------------------------------------------- fusion
def fused_scores(
    retriever_scores: list[float],
    reranker_scores: list[float],
    weight: float,
    retriever_scale: float,
    lexical_scores: list[float] | None = None,
    lexical_weight: float = 0.0,
) -> list[float]:
    """``retriever_scale * ((1 - weight - lexical_weight) * similarity + lexical_weight * lexical) + weight *
    logit`` for one query's re-ranked head (``lexical``: BM25 over the head's best, in [0, 1])."""
    lexical_scores = lexical_scores or [0.0] * len(reranker_scores)
    retriever_weight = 1 - weight - lexical_weight
    return [
        retriever_scale * (retriever_weight * similarity + lexical_weight * lexical) + weight * logit
        for similarity, logit, lexical in zip(retriever_scores, reranker_scores, lexical_scores)
    ]


def fused_rankings(
    retrieved: Retrieved,
    head_scores: dict[str, list[float]],
    weight: float,
    retriever_scale: float,
    lexical_scores: dict[str, list[float]] | None = None,
    lexical_weight: float = 0.0,
) -> dict[str, list[str]]:
    """Each query's re-ranked head (the passages ``head_scores`` covers) ordered by the fused score, the rest
    behind it in retrieval order. Both weights 0 return the retrieval rankings themselves."""
    if weight == 0 and lexical_weight == 0:
        return {query_id: list(ranking) for query_id, ranking in retrieved.rankings.items()}
    rankings = {}
    for query_id, ranking in retrieved.rankings.items():
        head_length = len(head_scores[query_id])
        scores = torch.tensor(
            fused_scores(
                retrieved.scores[query_id][:head_length],
                head_scores[query_id],
                weight,
                retriever_scale,
                lexical_scores[query_id] if lexical_scores else None,
                lexical_weight,
            )
        )
        order = torch.argsort(scores, descending=True, stable=True).tolist()
        rankings[query_id] = [ranking[index] for index in order] + ranking[head_length:]
    return rankings


@dataclass(frozen=True)
class Fusion:
    """The fusion weights chosen for a re-ranker behind a retriever, with the validation they were chosen on:
    ``curve`` holds the selection metrics at every pair of weights tried, ``retrieval`` those of retrieval
    alone. Files written before the BM25 term read as ``lexical_weight`` 0."""

    weight: float
    retriever_scale: float
    top_k: int
    retriever: str | None = None
    validation: str | None = None
    num_queries: int = 0
    retrieval: dict = field(default_factory=dict)
    curve: list = field(default_factory=list)
    lexical_weight: float = 0.0

    def __post_init__(self):
        check_fusion_weights(self.weight, self.lexical_weight)

    def point(self, weight: float, lexical_weight: float = 0.0) -> dict:
        """The curve's point nearest to these weights."""
        return min(
            self.curve,
            key=lambda p: abs(p["weight"] - weight) + abs(p.get("lexical_weight", 0.0) - lexical_weight),
        )

    def summary(self) -> str:
        chosen, alone = self.point(self.weight, self.lexical_weight), self.point(1.0)
        figures = ", ".join(
            f"{name} {100 * chosen[key]:.1f} (retrieval {100 * self.retrieval[key]:.1f}, re-ranker alone "
            f"{100 * alone[key]:.1f})"
            for key, name in zip(SELECTION_METRICS, ("MRR@10", "Recall@1"))
        )
        return (
            f"Fusion weights re-ranker {self.weight:g}, BM25 {self.lexical_weight:g} (retriever "
            f"{1 - self.weight - self.lexical_weight:g}) chosen on {self.num_queries} validation queries: {figures}."
        )

    def save(self, folder) -> Path:
        path = Path(folder) / FUSION_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder) -> Fusion | None:
        path = Path(folder) / FUSION_FILE
        if not path.is_file():
            return None
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, TypeError, ValueError) as error:
            raise DataError(
                f"{path} is not a fusion file ({error}); delete it or train the re-ranker again."
            ) from None


def check_fusion_weights(weight: float, lexical_weight: float) -> None:
    if not (weight >= 0.0 and lexical_weight >= 0.0 and weight + lexical_weight <= 1.0 + 1e-9):
        raise ValueError(
            f"fusion weights lie in [0, 1] and sum to at most 1 (the retriever gets the rest); got re-ranker "
            f"{weight:g} and BM25 {lexical_weight:g}."
        )


def choose_fusion_weight(
    retrieved: Retrieved,
    head_scores: dict[str, list[float]],
    qrels: dict[str, dict[str, float]],
    retriever_scale: float,
    grid: tuple[float, ...] = FUSION_GRID,
    lexical_scores: dict[str, list[float]] | None = None,
    lexical_grid: tuple[float, ...] = LEXICAL_GRID,
) -> tuple[float, float, list[dict]]:
    """The re-ranker weight of ``grid`` and, with ``lexical_scores``, the BM25 weight of ``lexical_grid``
    (pairs summing to at most 1) whose fused rankings score best on ``qrels`` (MRR@10, then Recall@1; ties go
    to the smaller total, then the smaller re-ranker weight, so signals that add nothing get 0), and the
    metrics at every pair."""
    lexical_grid = lexical_grid if lexical_scores is not None else (0.0,)
    if 0.0 not in grid or 0.0 not in lexical_grid:
        raise ValueError("the fusion grid must contain 0 (retrieval alone), so the choice is never below it.")
    pairs = sorted(
        ((weight, lexical) for weight in grid for lexical in lexical_grid if weight + lexical <= 1.0 + 1e-9),
        key=lambda pair: (round(pair[0] + pair[1], 9), pair[0]),
    )
    curve = []
    for weight, lexical in pairs:
        rankings = fused_rankings(retrieved, head_scores, weight, retriever_scale, lexical_scores, lexical)
        metrics = retrieval_metrics(rankings, qrels)
        point = {"weight": weight, "lexical_weight": lexical}
        curve.append({**point, **{name: metrics[name] for name in SELECTION_METRICS}})
    best = max(curve, key=lambda point: tuple(point[name] for name in SELECTION_METRICS))
    return best["weight"], best["lexical_weight"], curve


def choose_and_save_fusion(
    folder, sets: TrainingSets, top_k: int, max_seq_length: int, batch_size: int = 32, device="cpu"
) -> Fusion:
    """Score the validation queries' top ``top_k`` with the re-ranker saved in ``folder`` and with BM25 over
    their collection, choose the fusion weights on them and write them to ``folder/fusion.json``."""
    reranker = load_reranker(str(folder), top_k, max_seq_length, batch_size)
    reranker.model.to(device)
    task = sets.validation_task
    queries, corpus = (
        dict(zip(task.query_ids, task.query_texts)),
        dict(zip(task.corpus_ids, task.corpus_texts)),
    )
    head_scores = reranker.score(queries, sets.fusion_retrieved, corpus)
    lexical = BM25(corpus.values()).head_scores(queries, sets.fusion_retrieved.rankings, corpus, top_k)
    weight, lexical_weight, curve = choose_fusion_weight(
        sets.fusion_retrieved, head_scores, task.qrels, sets.retriever_scale, lexical_scores=lexical
    )
    retrieval = retrieval_metrics(sets.fusion_retrieved.rankings, task.qrels)
    fusion = Fusion(
        weight=weight,
        retriever_scale=sets.retriever_scale,
        top_k=top_k,
        retriever=sets.fusion_retriever,
        validation=f"{len(task.query_ids)} queries among {len(task.corpus_ids)} passages",
        num_queries=len(task.query_ids),
        retrieval={name: retrieval[name] for name in SELECTION_METRICS},
        curve=curve,
        lexical_weight=lexical_weight,
    )
    fusion.save(folder)
    return fusion


# ------------------------------------------------------------------------------------------- reports
def rerank_report(
    reranker: Reranker, task: RetrievalTask, retrieved: Retrieved, retriever_scale: float
) -> dict:
    """``"reranked"`` (the re-ranker's own order), ``"fused"`` and ``"fusion_weight"`` (when it has a weight)
    metrics, the depth, the seconds it took, and a one-line ``"warning"`` when the order it hands on is
    below retrieval alone on Recall@1 or MRR@10."""
    start = time.perf_counter()
    queries, corpus = (
        dict(zip(task.query_ids, task.query_texts)),
        dict(zip(task.corpus_ids, task.corpus_texts)),
    )
    head_scores = reranker.score(queries, retrieved, corpus)
    report = {
        "reranked": retrieval_metrics(
            fused_rankings(retrieved, head_scores, 1.0, retriever_scale), task.qrels
        ),
        "rerank_top_k": reranker.top_k,
        "rerank_s": round(time.perf_counter() - start, 2),
    }
    handed_on = report["reranked"]
    if reranker.fusion_weight is not None:
        lexical = reranker.lexical_scores(queries, retrieved, corpus)
        fused = fused_rankings(
            retrieved, head_scores, reranker.fusion_weight, retriever_scale, lexical, reranker.lexical_weight
        )
        report["fused"] = handed_on = retrieval_metrics(fused, task.qrels)
        report["fusion_weight"], report["lexical_weight"] = reranker.fusion_weight, reranker.lexical_weight
    shortfall = ranking_shortfall(retrieval_metrics(retrieved.rankings, task.qrels), handed_on)
    if shortfall:
        report["warning"] = reranking_warning(shortfall, reranker.fusion_weight)
    return report


def reranking_warning(shortfall: list[str], fusion_weight: float | None) -> str:
    stage = "re-ranking" if fusion_weight is None else f"re-ranking fused at weight {fusion_weight:g}"
    remedy = (
        "the re-ranker has no fusion weight: train it with --validation_file so one is chosen, or pass "
        "--fusion_weight"
        if fusion_weight is None
        else "its fusion weight was chosen on other data; lower --fusion_weight (0 = retrieval alone)"
    )
    return f"{stage} scores below retrieval alone ({', '.join(shortfall)}); {remedy}."


def load_reranker(
    name_or_path: str,
    top_k: int = 20,
    max_seq_length: int = 256,
    batch_size: int = 32,
    fusion_weight: float | None = None,
    lexical_weight: float | None = None,
) -> Reranker:
    """A :class:`Reranker` from a folder or repo id, applying ``fusion_weight`` / ``lexical_weight`` if given,
    else the weights its ``fusion.json`` records, else none (its own order)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(name_or_path, trust_remote_code=True)
    if model.config.num_labels != 1:
        raise DataError(
            f"re-ranker {name_or_path!r} has {model.config.num_labels} labels; a re-ranker gives one relevance logit "
            "(train one with `briskbert finetune-reranker`)."
        )
    fusion = Fusion.load(name_or_path) if Path(name_or_path).is_dir() else None
    if fusion is not None:
        fusion_weight = fusion.weight if fusion_weight is None else fusion_weight
        lexical_weight = fusion.lexical_weight if lexical_weight is None else lexical_weight
    lexical_weight = lexical_weight or 0.0
    if lexical_weight and fusion_weight is None:
        raise DataError(
            f"re-ranker {name_or_path!r} has no fusion.json: give --fusion_weight with --lexical_weight (the "
            "retriever's score gets what is left of 1)."
        )
    if fusion_weight is not None and fusion_weight + lexical_weight > 1.0 + 1e-9:
        raise DataError(
            f"the re-ranker weight {fusion_weight:g} and the BM25 weight {lexical_weight:g} sum to more than 1; "
            "lower --fusion_weight or --lexical_weight."
        )
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=True)
    return Reranker(
        model.eval(), tokenizer, top_k, max_seq_length, batch_size, fusion_weight, fusion, lexical_weight
    )


def validation_warning(reranker: Reranker) -> str | None:
    """A one-line warning when the re-ranker's own validation (its ``fusion.json``) shows the weight it
    applies scoring below retrieval alone; ``None`` when it did not, or was never measured."""
    if reranker.fusion is None or not reranker.fusion.curve or not reranker.fusion.retrieval:
        return None
    weight = 1.0 if reranker.fusion_weight is None else reranker.fusion_weight
    point = reranker.fusion.point(weight, reranker.lexical_weight)
    shortfall = ranking_shortfall(reranker.fusion.retrieval, point)
    if not shortfall:
        return None
    weights = f"weight {point['weight']:g}" + (
        f" (BM25 {point['lexical_weight']:g})" if point.get("lexical_weight") else ""
    )
    return (
        f"on its {reranker.fusion.num_queries} validation queries, re-ranking at {weights} scored below "
        f"retrieval alone ({', '.join(shortfall)}); its chosen weight is {reranker.fusion.weight:g}."
    )
