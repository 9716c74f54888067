# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The :class:`~briskbert.training.engine.task.Task` of ``briskbert finetune-reranker``: a cross-encoder
that reads each query with its positive and drawn negatives (see ``training.retrieval.reranking``), and,
after training, the weight that fuses it with the retriever, chosen on the validation queries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from briskbert.training.engine.facts import JobFacts
from briskbert.training.engine.task import Task, TaskInputs
from briskbert.training.retrieval.settings import RerankerData, RerankerValidation
from briskbert.training.tasks.settings import ModelSource

if TYPE_CHECKING:
    from pathlib import Path

    from briskbert.training.engine.config import TrainingConfig
    from briskbert.training.retrieval.reranking import TrainingSets


def training_sets(
    data: RerankerData, validation: RerankerValidation | None, seed: int, batch_size: int, device
) -> TrainingSets:
    """Training groups with negative pools, and the validation collection searched by the fusion retriever."""
    from briskbert.training.retrieval.dense import load_retriever, read_passages
    from briskbert.training.retrieval.embeddings import load_pairs
    from briskbert.training.retrieval.reranking import (
        RerankGroups,
        TrainingSets,
        random_negative_pools,
        retrieved_negative_pools,
        validation_sets,
    )

    pairs = load_pairs(data.train_file, data.train_articles)[: data.max_train_samples]
    retrievers = {}

    def retriever(name):
        if name not in retrievers:
            retrievers[name] = load_retriever(name, batch_size=batch_size)
            retrievers[name].encoder.to(device)
        return retrievers[name]

    if data.negatives_from is None:
        pools = random_negative_pools(pairs, data.pool_size, seed)
    else:
        extra = read_passages(data.negatives_corpus_file, data.negatives_corpus_min_words)
        pools = retrieved_negative_pools(pairs, data.pool_size, retriever(data.negatives_from), extra)
    own_negative = any(pair.negative for pair in pairs)
    train = RerankGroups(pools, data.num_negatives, seed, own_negative=own_negative)
    if validation is None:
        return TrainingSets(train)
    validation_pairs = load_pairs(validation.validation_file, validation.validation_articles)
    distractors = read_passages(
        validation.validation_extra_corpus_file, validation.validation_extra_corpus_min_words
    )
    fusion_retriever = retriever(validation.fusion_retriever) if validation.fusion_retriever else None
    return validation_sets(
        train,
        validation_pairs,
        distractors,
        fusion_retriever,
        validation.fusion_retriever,
        depth=max(validation.rerank_top_k, data.num_negatives + 1),
    )


class RerankerTask(Task):
    """``briskbert finetune-reranker``. The constructor checks the model folder before anything is loaded."""

    def __init__(self, model: ModelSource, data: RerankerData, validation: RerankerValidation | None):
        from briskbert.training.tasks.finetuning import check_model_inputs

        self.source, self.data, self.validation = model, data, validation
        self.location = check_model_inputs(model)

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        from briskbert.modeling import BriskBertForSequenceClassification
        from briskbert.training.retrieval.reranking import CrossEncoderForRanking, GroupCollator
        from briskbert.training.tasks.finetuning import load_starting_model

        source, data = self.source, self.data
        self.sets = training_sets(
            data, self.validation, config.seed, config.per_device_eval_batch_size, accelerator.device
        )
        # One relevance logit; problem_type regression keeps the head's own (unused) loss well defined.
        model, tokenizer = load_starting_model(
            BriskBertForSequenceClassification,
            source,
            self.location,
            config.output_dir,
            num_labels=1,
            problem_type="regression",
        )
        accelerator.print(
            f"Groups: {len(self.sets.train)} queries x (1 positive + {data.num_negatives} negatives drawn from "
            f"{data.pool_size})"
            + (f"; {len(self.sets.validation_groups)} validation queries" if self.validation else "")
        )
        self.eval_batch_size = config.per_device_eval_batch_size
        return TaskInputs(
            model=CrossEncoderForRanking(model, data.loss),
            train_dataset=self.sets.train,
            data_collator=GroupCollator(tokenizer, source.max_seq_length),
            tokenizer=tokenizer,
            eval_dataset=self.sets.validation_groups,
        )

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        from briskbert.training.retrieval.reranking import group_ranking_metrics

        return group_ranking_metrics(model, dataloader, accelerator) if self.validation else None

    def choose_fusion(self, final_dir: Path) -> None:
        """After training: choose the fusion weight on the validation queries and save it as
        ``final/fusion.json``. Called on every process once the run has ended normally."""
        from accelerate import PartialState

        from briskbert.training.retrieval.reranking import choose_and_save_fusion

        accelerator = PartialState()  # the run's processes
        if self.validation is not None and accelerator.is_main_process:
            if self.sets.fusion_retrieved is None:
                accelerator.print(
                    "No fusion weight chosen: give --negatives_from or --fusion_retriever (the dual encoder "
                    "the re-ranker sits behind)."
                )
            else:
                fusion = choose_and_save_fusion(
                    final_dir,
                    self.sets,
                    self.validation.rerank_top_k,
                    self.source.max_seq_length,
                    self.eval_batch_size,
                    accelerator.device,
                )
                accelerator.print(fusion.summary())
        accelerator.wait_for_everyone()

    def facts(self) -> JobFacts:
        from briskbert.training.tasks.finetuning import card_source_facts

        data = self.data
        negatives = (
            f"top {data.pool_size} ranked by {data.negatives_from}" if data.negatives_from else "random"
        )
        return JobFacts(
            task="text-ranking",
            pipeline_tag="text-ranking",
            **card_source_facts(self.source),
            datasets=(data.train_file,),
            details={"negatives": negatives, "num_negatives": data.num_negatives, "loss": data.loss},
        )
