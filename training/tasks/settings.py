# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The fine-tuning jobs' options: frozen dataclasses (the command line is generated from their fields), each
checked once in ``__post_init__``. Imports neither torch nor transformers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from briskbert.errors import SettingError

MIN_SEQ_LENGTH = 8  # [CLS], [SEP] and a few tokens of text


def check_at_least(settings, minimum: int, *names: str) -> None:
    """A :class:`SettingError` for the first of the ``names`` fields below ``minimum`` (``None``: not given)."""
    for name in names:
        value = getattr(settings, name)
        if value is not None and value < minimum:
            raise SettingError(name, f"must be at least {minimum}, got {value}.")


def helped(text: str, default=None, **metadata):
    """A field with its ``--help`` text (and ``choices``)."""
    return field(default=default, metadata={"help": text, **metadata})


@dataclass(frozen=True)
class ModelSource:
    """The model to start from: a briskbert or BERT-family model (converted first), or a fresh preset."""

    _argument_group_name = "model"

    model_name_or_path: str | None = helped(
        "A briskbert folder or Hub repo id; a BERT-family checkpoint is converted to briskbert first."
    )
    config_preset: str | None = helped(
        "Train from scratch with a preset (e.g. bert-tiny); needs tokenizer_name."
    )
    tokenizer_name: str | None = helped("Tokenizer folder or repo id (default: the model's).")
    trust_remote_code: bool = helped(
        "Allow code from a Hub repo id to run (briskbert folders load with the installed code).", False
    )
    max_seq_length: int = helped("Tokens per sequence after truncation.", 128)

    def __post_init__(self):
        if self.model_name_or_path is None and self.config_preset is None:
            raise SettingError(
                "model_name_or_path", "is missing: give a model to fine-tune (or config_preset)."
            )
        if self.model_name_or_path is not None and self.config_preset is not None:
            raise SettingError("config_preset", "trains from scratch: drop it, or drop model_name_or_path.")
        if self.config_preset is not None and self.tokenizer_name is None:
            raise SettingError(
                "tokenizer_name", "is needed with config_preset: a new model needs a vocabulary."
            )
        check_at_least(self, MIN_SEQ_LENGTH, "max_seq_length")


@dataclass(frozen=True)
class DataSource:
    """Training and evaluation data: files (in the job's format), or a ``datasets`` dataset and its splits."""

    _argument_group_name = "data"

    train_file: str | None = helped("The training data (its format: see the description above).")
    validation_file: str | None = helped("The evaluation data, in the training file's format.")
    dataset_name: str | None = helped("A `datasets` dataset or a save_to_disk folder (instead of files).")
    dataset_config_name: str | None = None
    train_split: str = "train"
    validation_split: str = "validation"
    dataset_card_name: str | None = helped(
        "The local files' public name for the model card, e.g. stanfordnlp/sst2 (default: the file names)."
    )
    validation_card_name: str | None = helped(
        "What the card calls a local validation_file, e.g. 'a held-out part of the sst2 training split'."
    )
    max_train_samples: int | None = helped("Keep only the first N training examples.")
    max_eval_samples: int | None = helped("Keep only the first N evaluation examples.")

    def __post_init__(self):
        if self.dataset_name is None and self.train_file is None:
            raise SettingError(
                "train_file", "is missing: give it (and usually validation_file), or dataset_name."
            )
        if self.dataset_name is not None and (self.train_file or self.validation_file):
            raise SettingError(
                "dataset_name", "cannot be combined with train_file/validation_file: give one."
            )
        check_at_least(self, 1, "max_train_samples", "max_eval_samples")

    def describe(self, split: str) -> str:
        """The ``"train"`` or ``"validation"`` data, named by the setting that gave it."""
        if self.dataset_name is not None:
            return f"dataset_name {self.dataset_name} (split {getattr(self, split + '_split')!r})"
        return f"{split}_file {getattr(self, split + '_file')}"

    def card_facts(self, extra_train_files: tuple[str, ...] = ()) -> dict:
        """The card's data facts; a local ``validation_file`` is named as a file, never as the public split."""
        public = self.dataset_card_name or self.dataset_name
        extra = [os.path.basename(f) for f in extra_train_files]
        facts = {
            "datasets": [public or os.path.basename(self.train_file), *extra],
            "train_files": [os.path.basename(f) for f in (self.train_file, *extra_train_files) if f],
        }
        if self.dataset_name is not None:
            return {**facts, "eval_dataset": public, "eval_split": self.validation_split}
        validation = self.validation_file
        return {
            **facts,
            "eval_dataset": os.path.basename(validation) if validation else None,
            "eval_split": None,
            "eval_dataset_description": self.validation_card_name if validation else None,
        }


@dataclass(frozen=True)
class ClassificationSettings:
    """Columns and label handling of sequence classification (and distillation)."""

    _argument_group_name = "task"

    text_column: str | None = helped("Column with the text (default: 'sentence', else 'text').")
    text_pair_column: str | None = helped("Second text of a pair task.")
    label_column: str = "label"
    problem_type: str | None = helped(
        "Default: inferred from the labels.",
        choices=("single_label_classification", "regression", "multi_label_classification"),
    )
    label_separator: str = helped("Multi-label labels given as one string are split on this.", ",")
    # a comma-separated string on the command line; a tuple of names after __post_init__
    label_names: tuple[str, ...] | str | None = helped(
        "Class names, e.g. negative,positive: integer labels 0..K-1 get these names (pipeline() and the card "
        "show them); with text labels, they fix the id order."
    )

    def __post_init__(self):
        if isinstance(self.label_names, str):
            object.__setattr__(
                self, "label_names", tuple(name.strip() for name in self.label_names.split(","))
            )
        if self.label_names is None:
            return
        if not all(self.label_names):
            raise SettingError(
                "label_names", "needs comma-separated, non-empty names, e.g. negative,positive."
            )
        if len(set(self.label_names)) != len(self.label_names):
            raise SettingError("label_names", f"repeats a name: {','.join(self.label_names)}.")
        if self.problem_type == "regression":
            raise SettingError("label_names", "names classes; a regression model has none.")


@dataclass(frozen=True)
class NerSettings:
    """Columns and sub-word labelling of token classification."""

    _argument_group_name = "task"

    token_column: str = "tokens"
    tag_column: str | None = helped("Default: 'tags', else 'ner_tags'.")
    label_all_tokens: bool = helped(
        "Train on every sub-word of a word (B- becomes I- after the first), not only the first.", False
    )
    crf: bool = helped(
        "A linear-chain CRF head over each word's first sub-word: Viterbi never predicts O -> I-PER.", False
    )

    def __post_init__(self):
        if self.crf and self.label_all_tokens:
            raise SettingError(
                "label_all_tokens",
                "cannot be combined with crf, which tags one position per word (its first sub-word).",
            )


def parse_article_ranges(settings, *names: str) -> None:
    """START:STOP strings (from a command line) become checked ``(start, stop)`` tuples."""
    for name in names:
        spec = getattr(settings, name)
        if not isinstance(spec, str):
            continue
        try:
            start, stop = (int(part) for part in spec.split(":"))
        except ValueError:
            raise SettingError(name, f"{spec!r} must look like START:STOP, e.g. 0:18.") from None
        if not 0 <= start < stop:
            raise SettingError(name, f"{spec!r}: START must be at least 0 and below STOP.")
        object.__setattr__(settings, name, (start, stop))


@dataclass(frozen=True)
class QaSettings:
    """Windows, decoding and data selection of extractive question answering."""

    _argument_group_name = "task"

    # START:STOP on the command line; a (start, stop) tuple after __post_init__
    train_articles: tuple[int, int] | str | None = helped(
        "Use only articles START:STOP of train_file (e.g. 0:18)."
    )
    validation_articles: tuple[int, int] | str | None = helped(
        "Use only articles START:STOP of validation_file (e.g. 18:36)."
    )
    extra_train_file: str | None = helped("A second SQuAD JSON file added to the training data.")
    extra_train_articles: tuple[int, int] | str | None = helped("Articles START:STOP of extra_train_file.")
    doc_stride: int = helped("Overlap in tokens between a context's windows.", 128)
    keep_answerless_windows: float = helped(
        "Fraction (0-1) of training windows without the answer to keep (seeded): faster on long contexts.",
        1.0,
    )
    max_query_length: int = helped("Questions are cut to this many tokens.", 64)
    n_best_size: int = 20
    max_answer_length: int = helped("Longest answer, in tokens.", 30)
    version_2_with_negative: bool = helped("SQuAD v2.0: some questions have no answer.", False)
    null_score_diff_threshold: float = helped(
        "v2.0: predict no answer when null score - best span score exceeds this.", 0.0
    )

    def __post_init__(self):
        parse_article_ranges(self, "train_articles", "validation_articles", "extra_train_articles")
        if not 0.0 <= self.keep_answerless_windows <= 1.0:
            raise SettingError(
                "keep_answerless_windows", f"must be in [0, 1], got {self.keep_answerless_windows}."
            )
        check_at_least(self, 1, "n_best_size", "max_answer_length")

    def window_kwargs(self, max_seq_length: int) -> dict:
        """The window arguments for ``max_seq_length``, checked to leave room for context."""
        room = max_seq_length - self.max_query_length - 3  # [CLS] question [SEP] context [SEP]
        if room <= 0:
            raise SettingError(
                "max_seq_length",
                f"{max_seq_length} leaves no room for context after a question of up to max_query_length "
                f"{self.max_query_length} tokens; raise max_seq_length or lower max_query_length.",
            )
        if not 0 <= self.doc_stride < room:
            raise SettingError(
                "doc_stride",
                f"{self.doc_stride} must be at least 0 and smaller than the context room of a window ({room} "
                f"= max_seq_length {max_seq_length} - max_query_length {self.max_query_length} - 3).",
            )
        return {
            "max_seq_length": max_seq_length,
            "doc_stride": self.doc_stride,
            "max_query_length": self.max_query_length,
        }


@dataclass(frozen=True)
class DistillSettings:
    """Teacher, student initialisation and loss weights of knowledge distillation."""

    _argument_group_name = "teacher and student"

    teacher_model: str = field(metadata={"help": "A fine-tuned briskbert classifier folder."})
    student_model: str | None = helped("Start the student from this briskbert folder.")
    student_preset: str | None = helped("Or a fresh student from a config preset.")
    # comma-separated indices on the command line; a tuple of ints after __post_init__
    student_layers: tuple[int, ...] | str | None = helped(
        "Teacher layers to copy into the student, e.g. 0,2,4 (default: every other layer)."
    )
    temperature: float = 2.0
    alpha_kd: float = helped("Weight of the soft (teacher) loss; the rest is hard.", 0.5)
    hidden_loss_weight: float = helped("Weight of the hidden-state MSE loss.", 0.0)
    max_seq_length: int = 128
    tokenizer_name: str | None = helped("Tokenizer folder (default: the teacher's).")

    def __post_init__(self):
        if isinstance(self.student_layers, str):
            try:
                layers = tuple(int(index) for index in self.student_layers.split(","))
            except ValueError:
                raise SettingError(
                    "student_layers", f"{self.student_layers!r}: give indices such as 0,2,4."
                ) from None
            object.__setattr__(self, "student_layers", layers)
        chosen = [
            name for name in ("student_model", "student_preset", "student_layers") if getattr(self, name)
        ]
        if len(chosen) > 1:
            raise SettingError(chosen[1], f"cannot be combined with {chosen[0]}: give at most one.")
        if self.temperature <= 0:
            raise SettingError("temperature", f"must be > 0, got {self.temperature}.")
        if not 0.0 <= self.alpha_kd <= 1.0:
            raise SettingError("alpha_kd", f"must be in [0, 1], got {self.alpha_kd}.")
        if self.hidden_loss_weight < 0:
            raise SettingError("hidden_loss_weight", f"must be >= 0, got {self.hidden_loss_weight}.")
        check_at_least(self, MIN_SEQ_LENGTH, "max_seq_length")
