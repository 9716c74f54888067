# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""``briskbert finetune-reranker``: a cross-encoder with one relevance logit, trained on groups of a query, its
positive and negatives drawn each epoch from a pool (listwise or pointwise loss), then the weights that fuse it with
the retriever, chosen on validation queries."""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import SequenceClassifierOutput

from briskbert.retrieval.dense import (
    RetrievalTask,
    Retriever,
    load_retriever,
    read_passages,
    retrieval_metrics,
    retrieve,
)
from briskbert.retrieval.fusion import (
    SELECTION_METRICS,
    Fusion,
    bm25_head_scores,
    choose_fusion_weight,
    encode_pairs,
    load_reranker,
)
from briskbert.retrieval.settings import RerankerArguments, RerankerData, RerankerValidation
from briskbert.training.data.pretraining_data import split_document_indices
from briskbert.training.data.task_data import DataError, load_squad
from briskbert.training.engine.evaluation import evaluation_loop, not_above_baseline
from briskbert.training.engine.facts import JobFacts, read_training_facts, write_training_facts
from briskbert.training.engine.task import Task, TaskInputs
from briskbert.training.retrieval.embeddings import Pair, Wrapper, is_squad_file, load_pairs
from briskbert.training.tasks.finetuning import card_source_facts, check_model_inputs, load_starting_model
from briskbert.training.tasks.settings import ModelSource

if TYPE_CHECKING:
    from briskbert.training.engine.config import TrainingConfig


@dataclass
class RerankGroup:
    query: str
    positive: str
    negatives: list[str]  # the pool; a training batch reads num_negatives of them


def _distinct_passages(pairs: list[Pair], extra_passages: list[str] = (), pool_size: int = 0) -> list[str]:
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


def hold_out(
    path: str, articles, pairs: list[Pair], percentage: float, seed: int
) -> tuple[list[Pair], list[Pair], dict]:
    """(training pairs, held-out pairs, what was held out): ``percentage`` % of the documents, whole (SQuAD
    articles; for pairs, the groups linked by a shared passage), so no held-out passage is trained on."""
    titles = list(load_squad(path, articles)[0]["title"]) if is_squad_file(path) else [None] * len(pairs)
    parent: dict = {}

    def root(key):
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for pair, title in zip(pairs, titles):
        for linked in (pair.negative, title and ("article", title)):
            if linked:
                parent[root(linked)] = root(pair.positive)
    documents = list(dict.fromkeys(root(pair.positive) for pair in pairs))
    if len(documents) < 2:
        raise DataError(
            f"{path} is one document (its pairs share passages), too little to hold validation questions out "
            "of: give validation_file."
        )
    held = {documents[index] for index in split_document_indices(len(documents), percentage, seed)[1]}
    is_held = [root(pair.positive) in held for pair in pairs]
    split = {
        "validation_split_percentage": percentage,
        "num_documents": len(held),
        "articles": sorted({title for title, kept in zip(titles, is_held) if kept and title}),
        "questions": [index for index, kept in enumerate(is_held) if kept],  # positions in the training file
    }
    return [p for p, h in zip(pairs, is_held) if not h], [p for p, h in zip(pairs, is_held) if h], split


class RerankerTask(Task):
    def __init__(self, model: ModelSource, data: RerankerData, validation: RerankerValidation):
        # The re-ranker sits behind fusion_retriever, by default the encoder that mined its negatives.
        retriever = validation.fusion_retriever or data.negatives_from or model.model_name_or_path
        self.source, self.data, self.validation = model, data, replace(validation, fusion_retriever=retriever)
        self.location = check_model_inputs(model)

    def _load_groups(self, seed: int, batch_size: int, device) -> None:
        """The training groups, and the validation collection (``validation_file``'s queries, else those held
        out, among all the passages) with its groups, searched by the fusion retriever."""
        data, validation = self.data, self.validation
        pairs = load_pairs(data.train_file, data.train_articles)
        distractors = read_passages(
            validation.validation_extra_corpus_file, validation.validation_extra_corpus_min_words
        )
        self.held_out = None
        if validation.validation_file is None:
            pairs, validation_pairs, self.held_out = hold_out(
                data.train_file, data.train_articles, pairs, validation.validation_split_percentage, seed
            )
            distractors = [
                text for pair in pairs for text in (pair.positive, pair.negative) if text
            ] + distractors
        else:
            validation_pairs = load_pairs(validation.validation_file, validation.validation_articles)
        pairs = pairs[: data.max_train_samples]

        @functools.cache  # negatives_from and fusion_retriever are often the same encoder
        def retriever(name):
            loaded = load_retriever(name, batch_size=batch_size)
            loaded.encoder.to(device)
            return loaded

        negatives_from = retriever(data.negatives_from) if data.negatives_from else None
        extra = read_passages(data.negatives_corpus_file, data.negatives_corpus_min_words)
        pools = negative_pools(pairs, data.pool_size, seed, negatives_from, extra)
        self.train = RerankGroups(
            pools, data.num_negatives, seed, own_negative=any(pair.negative for pair in pairs)
        )

        # Validation: the negatives are the fusion retriever's top wrong passages.
        passages = _distinct_passages(validation_pairs, distractors)
        passage_ids = {text: f"p{n}" for n, text in enumerate(passages)}
        qrels = {f"q{n}": {passage_ids[pair.positive]: 1.0} for n, pair in enumerate(validation_pairs)}
        queries = [pair.query for pair in validation_pairs]
        task = self.validation_task = RetrievalTask(
            list(passage_ids.values()), passages, list(qrels), queries, qrels
        )
        self.fusion_retriever = retriever(validation.fusion_retriever)
        depth = max(validation.rerank_top_k, data.num_negatives + 1)
        self.fusion_retrieved = retrieve(task.corpus, task.queries, self.fusion_retriever, top_k=depth)
        groups = []
        for query_id, pair in zip(task.query_ids, validation_pairs):
            ranking = self.fusion_retrieved.rankings[query_id]
            wrong = [task.corpus[pid] for pid in ranking if pid not in task.qrels[query_id]]
            groups.append(RerankGroup(pair.query, pair.positive, wrong[: data.num_negatives]))
        self.validation_groups = RerankGroups(groups, data.num_negatives)

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        from briskbert.modeling import BriskBertForSequenceClassification

        source, data = self.source, self.data
        self.eval_batch_size = config.per_device_eval_batch_size
        self._load_groups(config.seed, self.eval_batch_size, accelerator.device)
        # One relevance logit; problem_type regression keeps the head's own (unused) loss well defined.
        head = {"num_labels": 1, "problem_type": "regression"}
        model, tokenizer = load_starting_model(
            BriskBertForSequenceClassification, source, self.location, config.output_dir, **head
        )
        if self.held_out:
            accelerator.print(
                f"No validation file: {self.held_out_description()}; the fusion weights are chosen on them."
            )
        accelerator.print(
            f"Groups: {len(self.train)} queries x (1 positive + {data.num_negatives} negatives drawn from "
            f"{data.pool_size}); {len(self.validation_groups)} validation queries"
        )
        return TaskInputs(
            model=CrossEncoderForRanking(model, data.loss),
            train_dataset=self.train,
            data_collator=GroupCollator(tokenizer, source.max_seq_length),
            tokenizer=tokenizer,
            eval_dataset=self.validation_groups,
        )

    def held_out_description(self) -> str | None:
        """What was held out to validate on, in words (None: a validation file)."""
        held = self.held_out
        if not held:
            return None
        where = f"{held['num_documents']} groups"
        if held["articles"]:
            where = f"articles {', '.join(held['articles'])}"
        return (
            f"{len(held['questions'])} questions held out of {Path(self.data.train_file).name} ({where}: "
            f"{held['validation_split_percentage']:g}% of its documents)"
        )

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        metrics = group_ranking_metrics(model, dataloader, accelerator)
        self.verdict = not_above_baseline(
            "eval_accuracy",
            metrics["accuracy"],
            metrics["chance_accuracy"],
            f"ranking the 1 positive among {1 + self.data.num_negatives} passages at random",
        )
        return metrics

    def finish(self, final_dir: Path) -> None:
        """Choose the fusion weights (on the main process), save ``final/fusion.json``, and state them on the card."""
        from accelerate import PartialState

        state = PartialState()  # the run's processes
        if state.is_main_process:
            fusion = self._choose_fusion(final_dir, state.device)
            state.print(fusion.summary())
            facts = read_training_facts(final_dir)
            limitations = (*facts.job.limitations, fusion.card_line())
            write_training_facts(final_dir, replace(facts, job=replace(facts.job, limitations=limitations)))
        state.wait_for_everyone()

    def _choose_fusion(self, folder: Path, device) -> Fusion:
        top_k, task, retrieved = self.validation.rerank_top_k, self.validation_task, self.fusion_retrieved
        settings = RerankerArguments(
            str(folder), rerank_top_k=top_k, reranker_max_seq_length=self.source.max_seq_length
        )
        reranker = load_reranker(settings, self.eval_batch_size)
        reranker.model.to(device)
        head_scores = reranker.score(task.queries, retrieved, task.corpus)
        lexical = bm25_head_scores(task.queries, retrieved.rankings, task.corpus, top_k)
        scale = self.fusion_retriever.scale
        weight, lexical_weight, curve = choose_fusion_weight(
            retrieved, head_scores, task.qrels, scale, lexical_scores=lexical
        )
        retrieval = retrieval_metrics(retrieved.rankings, task.qrels)
        queries = self.held_out_description() or f"{len(task.query_ids)} queries"
        fusion = Fusion(
            weight=weight,
            retriever_scale=scale,
            top_k=top_k,
            retriever=self.validation.fusion_retriever,
            validation=f"{queries} among {len(task.corpus_ids)} passages",
            num_queries=len(task.query_ids),
            retrieval={name: retrieval[name] for name in SELECTION_METRICS},
            curve=curve,
            lexical_weight=lexical_weight,
            held_out=self.held_out or {},
        )
        fusion.save(folder)
        return fusion

    def facts(self) -> JobFacts:
        data = self.data
        negatives = (
            f"top {data.pool_size} ranked by {data.negatives_from}" if data.negatives_from else "random"
        )
        return JobFacts(
            task="text-ranking",
            pipeline_tag="text-ranking",
            **card_source_facts(self.source),
            datasets=(data.train_file,),
            eval_dataset=self.validation.validation_file or data.train_file,
            eval_dataset_description=self.held_out_description(),
            details={
                "negatives": negatives,
                "num_negatives": data.num_negatives,
                "loss": data.loss,
                "held_out": self.held_out,
            },
        )
