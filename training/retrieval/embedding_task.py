# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""``briskbert finetune-embeddings``: a dual encoder on pairs (:mod:`.embeddings`) or scored pairs
(:mod:`.similarity`)."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from briskbert.errors import SettingError
from briskbert.training.engine.facts import JobFacts
from briskbert.training.engine.task import Task, TaskInputs
from briskbert.training.retrieval.settings import SCORED_PAIR_LOSSES, EmbeddingData, EmbeddingSettings
from briskbert.training.tasks.settings import ModelSource

if TYPE_CHECKING:
    from briskbert.training.engine.config import TrainingConfig


def load_examples(data: EmbeddingData, settings: EmbeddingSettings):
    """``(train, validation or None, settings)``, the settings' loss and score range decided by the files."""
    from briskbert.training.retrieval.embeddings import load_training_examples
    from briskbert.training.retrieval.similarity import ScoredPair
    from briskbert.training.retrieval.similarity import score_range as observed_range

    train = load_training_examples(data.train_file, data.train_articles)[: data.max_train_samples]
    validation = None
    if data.validation_file:
        validation = load_training_examples(data.validation_file, data.validation_articles, "validation_file")
    scored = isinstance(train[0], ScoredPair)
    if validation is not None and isinstance(validation[0], ScoredPair) != scored:
        raise SettingError(
            "validation_file",
            f"{data.validation_file} and train_file {data.train_file} hold different kinds of examples; give "
            "scored pairs for both (sentence1/sentence2/score) or pairs for both.",
        )
    loss_name = settings.loss or ("cosent" if scored else "multiple_negatives_ranking")
    if (loss_name in SCORED_PAIR_LOSSES) != scored:
        kind = "scored pairs (sentence1, sentence2, score)" if scored else "(query, positive) pairs"
        raise SettingError(
            "loss",
            f"{loss_name} does not fit train_file {data.train_file}, which holds {kind}; use "
            f"{'cosent or cosine_mse' if scored else 'multiple_negatives_ranking'}.",
        )
    if scored and data.mine_hard_negatives:
        raise SettingError(
            "mine_hard_negatives", "needs (query, positive) pairs; the training file holds scored pairs."
        )
    score_range = settings.score_range or (observed_range(train) if scored else (0.0, 1.0))
    return train, validation, replace(settings, loss=loss_name, score_range=score_range)


class EmbeddingTask(Task):
    def __init__(self, model: ModelSource, data: EmbeddingData, settings: EmbeddingSettings):
        from briskbert.training.tasks.finetuning import check_model_inputs

        self.source, self.data, self.settings = model, data, settings
        self.location = check_model_inputs(model)
        self.train, self.validation, self.loss = load_examples(data, settings)

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        from briskbert.modeling import BriskBertModel
        from briskbert.modeling.sentence_transformers_files import EmbeddingSpec, read_embedding_spec
        from briskbert.training.retrieval.embeddings import DualEncoder, PairCollator, mine_hard_negatives
        from briskbert.training.retrieval.similarity import ScoredPairCollator
        from briskbert.training.tasks.finetuning import load_starting_model

        source, location = self.source, self.location
        declared = (read_embedding_spec(source.model_name_or_path) if location else None) or EmbeddingSpec()
        self.spec = EmbeddingSpec(
            pooling=self.settings.pooling or declared.pooling,
            normalize=declared.normalize and not self.settings.no_normalize,
            max_seq_length=source.max_seq_length,
        )
        encoder, tokenizer = load_starting_model(BriskBertModel, source, location, config.output_dir)
        train = self.train
        if self.data.mine_hard_negatives:
            encoder.to(accelerator.device)
            train = mine_hard_negatives(
                encoder, tokenizer, train, self.spec, config.per_device_eval_batch_size
            )
        accelerator.print(
            f"Examples: {len(train)} train, {len(self.validation or [])} validation; pooling {self.spec}"
        )
        if self.loss.on_scored_pairs:
            collator = ScoredPairCollator(tokenizer, self.spec.max_seq_length)
        else:
            collator = PairCollator(tokenizer, self.data.max_query_length, self.spec.max_seq_length)
        return TaskInputs(
            model=DualEncoder(encoder, self.spec, self.loss),
            train_dataset=train,
            data_collator=collator,
            tokenizer=tokenizer,
            eval_dataset=self.validation,
        )

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        from briskbert.training.retrieval.embeddings import evaluate_pairs
        from briskbert.training.retrieval.similarity import evaluate_scored_pairs

        if not self.validation:
            return None
        evaluate = evaluate_scored_pairs if self.loss.on_scored_pairs else evaluate_pairs
        return evaluate(model, dataloader, accelerator)

    def facts(self) -> JobFacts:
        from briskbert.training.tasks.finetuning import card_source_facts

        loss = self.loss
        loss_facts = {"name": loss.loss, "scale": loss.scale}
        if loss.loss == "multiple_negatives_ranking":
            loss_facts["symmetric"] = loss.symmetric
        if loss.loss == "cosine_mse":
            loss_facts["score_range"] = list(loss.score_range)
        details = {"embedding": asdict(self.spec), "loss": loss_facts}
        if self.data.mine_hard_negatives:
            details["hard_negatives"] = "mined with the starting model"
        return JobFacts(
            task="sentence-similarity",
            pipeline_tag="sentence-similarity",
            library_name="sentence-transformers",
            **card_source_facts(self.source),
            datasets=(self.data.train_file,),
            eval_dataset=self.data.validation_file,
            details=details,
        )
