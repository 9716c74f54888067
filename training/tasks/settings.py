# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""What each training job is told: small frozen dataclasses, one group of flags each.

The command line (:mod:`briskbert.commands`) parses its flags and builds these once; the jobs
(:mod:`briskbert.training.tasks`) only ever see the dataclasses. Each checks its values in
``__post_init__`` and raises :class:`~briskbert.errors.UserError` naming the flag, so a contradictory
command line stops before anything is loaded. This module imports neither torch nor transformers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from briskbert.errors import UserError
from briskbert.training.data.corpus import PACKING_MODES, CorpusSource, PreparationSettings, check_corpus_file

PROBLEM_TYPES = ("single_label_classification", "regression", "multi_label_classification")


# ------------------------------------------------------------------------------------------------ model
@dataclass(frozen=True)
class ModelSource:
    """The model to start from: a briskbert folder or Hub repo id, a BERT-family checkpoint (converted
    first), or a fresh preset."""

    model_name_or_path: str | None = None
    config_preset: str | None = None
    tokenizer_name: str | None = None
    trust_remote_code: bool = False
    max_seq_length: int = 128

    def __post_init__(self):
        if (self.model_name_or_path is None) == (self.config_preset is None):
            raise UserError(
                "give exactly one of --model_name_or_path (fine-tune a model) or --config_preset (train from scratch)."
            )
        if self.config_preset is not None and self.tokenizer_name is None:
            raise UserError("--config_preset builds a new model; give --tokenizer_name for its vocabulary.")
        if self.max_seq_length < 8:
            raise UserError(f"--max_seq_length must be at least 8, got {self.max_seq_length}.")


# ------------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class DataSource:
    """Training and evaluation data: files, or a ``datasets`` dataset and its splits."""

    train_file: str | None = None
    validation_file: str | None = None
    dataset_name: str | None = None
    dataset_config_name: str | None = None
    train_split: str = "train"
    validation_split: str = "validation"
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    dataset_card_name: str | None = None  # the public name the model card gives the data
    validation_card_name: str | None = None  # what the card says a local --validation_file is

    def __post_init__(self):
        if self.dataset_name is None and self.train_file is None:
            raise UserError("give --train_file (and usually --validation_file) or --dataset_name.")
        if self.dataset_name is not None and (self.train_file or self.validation_file):
            raise UserError("give either --dataset_name or --train_file/--validation_file, not both.")
        for flag, value in (
            ("--max_train_samples", self.max_train_samples),
            ("--max_eval_samples", self.max_eval_samples),
        ):
            if value is not None and value < 1:
                raise UserError(f"{flag} must be at least 1, got {value}.")

    def describe(self, split: str) -> str:
        """How error messages name the ``"train"`` or ``"validation"`` data: by the flag that gave it."""
        if self.dataset_name is not None:
            name = self.train_split if split == "train" else self.validation_split
            return f"--dataset_name {self.dataset_name} (split {name!r})"
        return (
            f"--train_file {self.train_file}"
            if split == "train"
            else f"--validation_file {self.validation_file}"
        )

    def card_facts(self, extra_train_files: tuple[str, ...] = ()) -> dict:
        """``datasets`` / ``eval_dataset`` / ``eval_split`` / ``eval_dataset_description`` for the card.

        Training data goes by its public name when known (a ``--dataset_name``, or ``--dataset_card_name``
        for local files), else by file name. A split is named only for a ``--dataset_name`` dataset: a local
        ``--validation_file`` is named as the local file it is (and described by ``--validation_card_name``),
        never as the public dataset's validation split, which it need not be.
        """
        public = self.dataset_card_name or self.dataset_name
        datasets = [public or os.path.basename(self.train_file)]
        facts = {"datasets": datasets + [os.path.basename(f) for f in extra_train_files]}
        if self.dataset_name is not None:
            return {**facts, "eval_dataset": public, "eval_split": self.validation_split}
        return {
            **facts,
            "eval_dataset": os.path.basename(self.validation_file) if self.validation_file else None,
            "eval_split": None,
            "eval_dataset_description": self.validation_card_name if self.validation_file else None,
        }


# --------------------------------------------------------------------------------------- classification
@dataclass(frozen=True)
class ClassificationSettings:
    """Columns and label handling of sequence classification (and distillation)."""

    text_column: str | None = None  # None: 'sentence' or 'text', whichever the data has
    text_pair_column: str | None = None
    label_column: str = "label"
    problem_type: str | None = None  # None: inferred from the labels
    label_separator: str = ","
    label_names: tuple[str, ...] | None = None  # display names of label ids 0..K-1, or the names' order

    def __post_init__(self):
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise UserError(f"--problem_type {self.problem_type!r} is not one of {', '.join(PROBLEM_TYPES)}.")
        if self.label_names is not None:
            if not self.label_names or any(not name for name in self.label_names):
                raise UserError(
                    "--label_names needs comma-separated, non-empty names, e.g. negative,positive."
                )
            if len(set(self.label_names)) != len(self.label_names):
                raise UserError(f"--label_names repeats a name: {','.join(self.label_names)}.")
            if self.problem_type == "regression":
                raise UserError("--label_names names classes; a regression model has none.")


# -------------------------------------------------------------------------------------------------- NER
@dataclass(frozen=True)
class NerSettings:
    """Columns and sub-word labelling of token classification."""

    token_column: str = "tokens"
    tag_column: str | None = None  # None: 'tags', else 'ner_tags'
    label_all_tokens: bool = False
    crf: bool = False

    def __post_init__(self):
        if self.crf and self.label_all_tokens:
            raise UserError(
                "--crf tags one position per word (its first sub-word), so it cannot train on every sub-word; "
                "drop --label_all_tokens."
            )


# --------------------------------------------------------------------------------------------------- QA
def parse_article_range(spec: str | None, flag: str) -> tuple[int, int] | None:
    """``"START:STOP"`` -> ``(start, stop)``."""
    if spec is None:
        return None
    try:
        start, stop = (int(part) for part in spec.split(":"))
    except ValueError:
        raise UserError(f"{flag} {spec!r} must look like START:STOP, e.g. 0:18.") from None
    if not 0 <= start < stop:
        raise UserError(f"{flag} {spec!r}: START must be at least 0 and below STOP.")
    return start, stop


@dataclass(frozen=True)
class QaSettings:
    """Windows, decoding and data selection of extractive question answering."""

    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0
    keep_answerless_windows: float = 1.0
    train_articles: tuple[int, int] | None = None
    validation_articles: tuple[int, int] | None = None
    extra_train_file: str | None = None
    extra_train_articles: tuple[int, int] | None = None

    def __post_init__(self):
        room = self.max_seq_length - self.max_query_length - 3  # [CLS] question [SEP] context [SEP]
        if room <= 0:
            raise UserError(
                f"--max_seq_length {self.max_seq_length} leaves no room for context after a question of up "
                f"to --max_query_length {self.max_query_length} tokens; raise max_seq_length or lower "
                "max_query_length."
            )
        if not 0 <= self.doc_stride < room:
            raise UserError(
                f"--doc_stride {self.doc_stride} must be at least 0 and smaller than the context room of a "
                f"window ({room} = max_seq_length {self.max_seq_length} - max_query_length "
                f"{self.max_query_length} - 3)."
            )
        if not 0.0 <= self.keep_answerless_windows <= 1.0:
            raise UserError(
                f"--keep_answerless_windows must be in [0, 1], got {self.keep_answerless_windows}."
            )
        for flag, value in (
            ("--n_best_size", self.n_best_size),
            ("--max_answer_length", self.max_answer_length),
        ):
            if value < 1:
                raise UserError(f"{flag} must be at least 1, got {value}.")

    def window_kwargs(self) -> dict:
        return {
            "max_seq_length": self.max_seq_length,
            "doc_stride": self.doc_stride,
            "max_query_length": self.max_query_length,
        }


# ----------------------------------------------------------------------------------------- distillation
@dataclass(frozen=True)
class DistillSettings:
    """Teacher, student initialisation and loss weights of knowledge distillation."""

    teacher_model: str
    student_model: str | None = None
    student_preset: str | None = None
    student_layers: tuple[int, ...] | None = None
    temperature: float = 2.0
    alpha_kd: float = 0.5
    hidden_loss_weight: float = 0.0
    tokenizer_name: str | None = None
    max_seq_length: int = 128

    def __post_init__(self):
        chosen = [self.student_model, self.student_preset, self.student_layers]
        if sum(choice is not None for choice in chosen) > 1:
            raise UserError("give at most one of --student_model, --student_preset, --student_layers.")
        if self.temperature <= 0:
            raise UserError(f"--temperature must be > 0, got {self.temperature}.")
        if not 0.0 <= self.alpha_kd <= 1.0:
            raise UserError(f"--alpha_kd must be in [0, 1], got {self.alpha_kd}.")
        if self.hidden_loss_weight < 0:
            raise UserError(f"--hidden_loss_weight must be >= 0, got {self.hidden_loss_weight}.")
        if self.max_seq_length < 8:
            raise UserError(f"--max_seq_length must be at least 8, got {self.max_seq_length}.")


# ------------------------------------------------------------------------------------------ pretraining
@dataclass(frozen=True)
class PretrainingData:
    """Where the corpus comes from and how it becomes sequences."""

    train: CorpusSource
    validation: CorpusSource | None = None  # None: hold out validation_split_percentage of the documents
    validation_split_percentage: float = 5
    max_seq_length: int = 128
    packing: str = "none"  # one of PACKING_MODES
    nsp: bool = False
    streaming: bool = False
    preparation: PreparationSettings = field(default_factory=PreparationSettings)

    def __post_init__(self):
        for source, flag in ((self.train, "--train_file"), (self.validation, "--validation_file")):
            if source is not None and source.path is not None:
                check_corpus_file(source.path, flag)
        if self.packing not in PACKING_MODES:
            raise UserError(
                f"--packing_mode must be one of {', '.join(PACKING_MODES)}, got {self.packing!r}."
            )
        if self.nsp and self.packing != "none":
            raise UserError(
                "--nsp builds its own [CLS] A [SEP] B [SEP] pairs; it cannot be combined with --packing / "
                f"--packing_mode {self.packing}."
            )
        if self.streaming and self.nsp:
            raise UserError("--streaming supports MLM only; drop --nsp.")
        if self.streaming and (self.validation is None or self.train.path is None):
            raise UserError("--streaming reads a --train_file and needs a --validation_file.")
        if self.max_seq_length < 8:
            raise UserError(f"--max_seq_length must be at least 8, got {self.max_seq_length}.")
        if self.validation is None and not 0 < self.validation_split_percentage < 100:
            raise UserError(
                f"--validation_split_percentage must be in (0, 100), got {self.validation_split_percentage}."
            )
        if self.preparation.num_workers < 1:
            raise UserError(f"--preprocessing_num_workers must be >= 1, got {self.preparation.num_workers}.")


#: the largest vocabularies in use are about 256k entries; beyond 2**20 a tokenizer's tables only waste memory
MAX_VOCAB_SIZE = 1 << 20


@dataclass(frozen=True)
class PretrainingModel:
    """The model to build (a preset or config JSON) or to continue, and its tokenizer."""

    config_name: str | None = None
    config_overrides: str | None = None
    model_name_or_path: str | None = None
    tokenizer_name: str | None = None
    vocab_size: int | None = None  # train a WordPiece tokenizer of this size (default 30522)
    tokenizer_train_max_lines: int | None = None

    def __post_init__(self):
        if self.model_name_or_path and (self.config_name or self.config_overrides):
            raise UserError(
                "--model_name_or_path continues an existing model: drop --config_name/--config_overrides."
            )
        if not self.model_name_or_path and not self.config_name:
            raise UserError(
                "Give --config_name (a preset such as bert-small, or a config JSON) or --model_name_or_path."
            )
        if self.vocab_size is not None and (self.tokenizer_name or self.model_name_or_path):
            raise UserError(
                "--vocab_size trains a new tokenizer; it cannot be combined with --tokenizer_name or "
                "--model_name_or_path (whose tokenizer is used)."
            )
        if self.vocab_size is not None and not 5 < self.vocab_size <= MAX_VOCAB_SIZE:
            raise UserError(
                f"--vocab_size must be above the 5 special tokens and at most {MAX_VOCAB_SIZE:,} "
                f"(BERT uses 30,522), got {self.vocab_size:,}."
            )
        if self.tokenizer_train_max_lines is not None and self.tokenizer_train_max_lines < 1:
            raise UserError(
                f"--tokenizer_train_max_lines must be >= 1, got {self.tokenizer_train_max_lines}."
            )

    @property
    def trains_tokenizer(self) -> bool:
        return not (self.tokenizer_name or self.model_name_or_path)


@dataclass(frozen=True)
class MaskingSettings:
    """Which tokens masked-language modelling hides, and how."""

    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_mask: bool = False
    eval_mask_seed: int = 1234  # a fixed masking of the validation set

    def __post_init__(self):
        if not 0 < self.mlm_probability < 1:
            raise UserError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}.")
        if min(self.mask_replace_prob, self.random_replace_prob) < 0 or (
            self.mask_replace_prob + self.random_replace_prob > 1
        ):
            raise UserError(
                f"--mask_replace_prob {self.mask_replace_prob} + --random_replace_prob "
                f"{self.random_replace_prob} must be within [0, 1] (the rest stays unchanged)."
            )

    def collator_arguments(self) -> dict:
        return dict(
            mlm_probability=self.mlm_probability,
            mask_replace_prob=self.mask_replace_prob,
            random_replace_prob=self.random_replace_prob,
            whole_word_mask=self.whole_word_mask,
        )


@dataclass(frozen=True)
class PretrainingSettings:
    """A pretraining job: data, model and masking, and the card's language and license."""

    data: PretrainingData
    model: PretrainingModel
    masking: MaskingSettings = field(default_factory=MaskingSettings)
    language: str = "en"
    license: str = "apache-2.0"

    def __post_init__(self):
        if self.data.streaming and self.model.trains_tokenizer:
            raise UserError(
                "--streaming needs an existing tokenizer (--tokenizer_name or --model_name_or_path)."
            )
