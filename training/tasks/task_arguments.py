# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The flags of the fine-tuning and distillation commands and the small dataclasses they become.

A command builds its parser from the ``add_*_arguments`` functions here, parses, and converts the
Namespace once with the matching ``*_from_args`` function; library code only ever sees the dataclasses.
Each dataclass checks its values in ``__post_init__`` and raises :class:`~briskbert.errors.UserError`
naming the flag, so a contradictory command line stops before anything is loaded. This module imports
neither torch nor transformers: ``briskbert finetune-* --help`` stays instant.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from briskbert.errors import UserError

PROBLEM_TYPES = ("single_label_classification", "regression", "multi_label_classification")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Flag defaults in ``--help`` and the description as written (its usage example keeps its lines)."""


def new_parser(description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)


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


def add_model_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("model")
    g.add_argument(
        "--model_name_or_path",
        type=str,
        default=None,
        help="A briskbert model folder, a Hub repo id, or a BERT, RoBERTa, DistilBERT, ELECTRA or "
        "ModernBERT checkpoint, which is converted to briskbert first.",
    )
    g.add_argument(
        "--config_preset",
        type=str,
        default=None,
        help="Train from scratch with a BriskBertConfig preset (e.g. bert-tiny); needs --tokenizer_name.",
    )
    g.add_argument(
        "--tokenizer_name", type=str, default=None, help="Tokenizer folder or repo id (default: the model's)."
    )
    g.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="Allow code from a Hub repo id to run (briskbert folders load with the installed code).",
    )
    g.add_argument("--max_seq_length", type=int, default=128, help="Tokens per sequence after truncation.")
    return parser


def model_source_from_args(args: argparse.Namespace) -> ModelSource:
    return ModelSource(
        model_name_or_path=args.model_name_or_path,
        config_preset=args.config_preset,
        tokenizer_name=args.tokenizer_name,
        trust_remote_code=args.trust_remote_code,
        max_seq_length=args.max_seq_length,
    )


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
        """``datasets`` / ``eval_dataset`` / ``eval_split`` for the card: the public name when known (a
        ``--dataset_name``, or ``--dataset_card_name`` for local files), else the local file names."""
        public = self.dataset_card_name or self.dataset_name
        if public is not None:
            datasets = [public]
            has_eval = self.dataset_name is not None or self.validation_file is not None
            return {
                "datasets": datasets + [os.path.basename(f) for f in extra_train_files],
                "eval_dataset": public if has_eval else None,
                "eval_split": self.validation_split if has_eval else None,
            }
        return {
            "datasets": [os.path.basename(self.train_file)]
            + [os.path.basename(f) for f in extra_train_files],
            "eval_dataset": os.path.basename(self.validation_file) if self.validation_file else None,
            "eval_split": None,
        }


def add_data_arguments(parser: argparse.ArgumentParser, file_help: str) -> argparse.ArgumentParser:
    g = parser.add_argument_group("data")
    g.add_argument("--train_file", type=str, default=None, help=file_help)
    g.add_argument("--validation_file", type=str, default=None, help=file_help)
    g.add_argument(
        "--dataset_name",
        type=str,
        default=None,
        help="A `datasets` dataset name or a folder written by save_to_disk (instead of files).",
    )
    g.add_argument("--dataset_config_name", type=str, default=None)
    g.add_argument("--train_split", type=str, default="train")
    g.add_argument("--validation_split", type=str, default="validation")
    g.add_argument(
        "--dataset_card_name",
        type=str,
        default=None,
        help="The data's public name for the model card (e.g. stanfordnlp/sst2) when training on local "
        "files (default: --dataset_name, else the file names).",
    )
    g.add_argument(
        "--max_train_samples", type=int, default=None, help="Keep only the first N training examples."
    )
    g.add_argument(
        "--max_eval_samples", type=int, default=None, help="Keep only the first N evaluation examples."
    )
    return parser


def data_source_from_args(args: argparse.Namespace) -> DataSource:
    return DataSource(
        train_file=args.train_file,
        validation_file=args.validation_file,
        dataset_name=args.dataset_name,
        dataset_config_name=args.dataset_config_name,
        train_split=args.train_split,
        validation_split=args.validation_split,
        max_train_samples=args.max_train_samples,
        max_eval_samples=args.max_eval_samples,
        dataset_card_name=args.dataset_card_name,
    )


# --------------------------------------------------------------------------------------- classification
@dataclass(frozen=True)
class ClassificationTask:
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


def add_classification_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("task")
    g.add_argument(
        "--text_column",
        type=str,
        default=None,
        help="Column with the text (default: 'sentence' or 'text', whichever exists).",
    )
    g.add_argument("--text_pair_column", type=str, default=None, help="Second text of a pair task.")
    g.add_argument("--label_column", type=str, default="label")
    g.add_argument(
        "--problem_type",
        type=str,
        default=None,
        choices=PROBLEM_TYPES,
        help="Default: inferred from the labels.",
    )
    g.add_argument(
        "--label_separator",
        type=str,
        default=",",
        help="Multi-label labels given as one string are split on this.",
    )
    g.add_argument(
        "--label_names",
        type=str,
        default=None,
        help="Comma-separated class names, e.g. negative,positive: integer labels 0..K-1 get these names "
        "(shown by pipeline() and the model card); with text labels, the names fix the id order. "
        "Default: the labels as they appear in the data.",
    )
    return parser


def classification_task_from_args(args: argparse.Namespace) -> ClassificationTask:
    return ClassificationTask(
        text_column=args.text_column,
        text_pair_column=args.text_pair_column,
        label_column=args.label_column,
        problem_type=args.problem_type,
        label_separator=args.label_separator,
        label_names=None
        if args.label_names is None
        else tuple(n.strip() for n in args.label_names.split(",")),
    )


# -------------------------------------------------------------------------------------------------- NER
@dataclass(frozen=True)
class NerTask:
    token_column: str = "tokens"
    tag_column: str | None = None  # None: 'tags', else 'ner_tags'
    label_all_tokens: bool = False


def add_ner_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("task")
    g.add_argument("--token_column", type=str, default="tokens")
    g.add_argument("--tag_column", type=str, default=None, help="Default: 'tags', else 'ner_tags'.")
    g.add_argument(
        "--label_all_tokens",
        action="store_true",
        help="Train on every sub-word of a word (B- becomes I- after the first), not only the first.",
    )
    return parser


def ner_task_from_args(args: argparse.Namespace) -> NerTask:
    return NerTask(args.token_column, args.tag_column, args.label_all_tokens)


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
class QaTask:
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


def add_qa_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("task")
    g.add_argument(
        "--train_articles",
        type=str,
        default=None,
        help="Use only articles START:STOP of --train_file (e.g. 0:18).",
    )
    g.add_argument(
        "--validation_articles",
        type=str,
        default=None,
        help="Use only articles START:STOP of --validation_file (e.g. 18:36).",
    )
    g.add_argument(
        "--extra_train_file",
        type=str,
        default=None,
        help="A second SQuAD JSON file added to the training data.",
    )
    g.add_argument(
        "--extra_train_articles", type=str, default=None, help="Articles START:STOP of --extra_train_file."
    )
    g.add_argument(
        "--doc_stride", type=int, default=128, help="Overlap in tokens between a context's windows."
    )
    g.add_argument(
        "--keep_answerless_windows",
        type=float,
        default=1.0,
        help="Fraction (0-1) of training windows without the answer to keep (seeded draw); below 1 "
        "speeds up training on very long contexts.",
    )
    g.add_argument("--max_query_length", type=int, default=64, help="Questions are cut to this many tokens.")
    g.add_argument("--n_best_size", type=int, default=20)
    g.add_argument("--max_answer_length", type=int, default=30, help="Longest answer, in tokens.")
    g.add_argument(
        "--version_2_with_negative", action="store_true", help="SQuAD v2.0: some questions have no answer."
    )
    g.add_argument(
        "--null_score_diff_threshold",
        type=float,
        default=0.0,
        help="v2.0: predict no answer when null score - best span score exceeds this.",
    )
    return parser


def qa_task_from_args(args: argparse.Namespace) -> QaTask:
    return QaTask(
        max_seq_length=args.max_seq_length,
        doc_stride=args.doc_stride,
        max_query_length=args.max_query_length,
        n_best_size=args.n_best_size,
        max_answer_length=args.max_answer_length,
        version_2_with_negative=args.version_2_with_negative,
        null_score_diff_threshold=args.null_score_diff_threshold,
        keep_answerless_windows=args.keep_answerless_windows,
        train_articles=parse_article_range(args.train_articles, "--train_articles"),
        validation_articles=parse_article_range(args.validation_articles, "--validation_articles"),
        extra_train_file=args.extra_train_file,
        extra_train_articles=parse_article_range(args.extra_train_articles, "--extra_train_articles"),
    )


# ----------------------------------------------------------------------------------------- distillation
@dataclass(frozen=True)
class DistillSetup:
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


def add_distill_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("teacher and student")
    g.add_argument(
        "--teacher_model", type=str, required=True, help="A fine-tuned briskbert classifier folder."
    )
    g.add_argument(
        "--student_model", type=str, default=None, help="Start the student from this briskbert folder."
    )
    g.add_argument(
        "--student_preset", type=str, default=None, help="Or a fresh student from a config preset."
    )
    g.add_argument(
        "--student_layers",
        type=str,
        default=None,
        help="Teacher layers to copy into the student, e.g. 0,2,4 (default: every other layer).",
    )
    g.add_argument("--temperature", type=float, default=2.0)
    g.add_argument(
        "--alpha_kd", type=float, default=0.5, help="Weight of the soft (teacher) loss; the rest is hard."
    )
    g.add_argument(
        "--hidden_loss_weight", type=float, default=0.0, help="Weight of the hidden-state MSE loss."
    )
    g.add_argument("--max_seq_length", type=int, default=128)
    g.add_argument(
        "--tokenizer_name", type=str, default=None, help="Tokenizer folder (default: the teacher's)."
    )
    return parser


def distill_setup_from_args(args: argparse.Namespace) -> DistillSetup:
    layers = None
    if args.student_layers is not None:
        try:
            layers = tuple(int(index) for index in args.student_layers.split(","))
        except ValueError:
            raise UserError(
                f"--student_layers {args.student_layers!r}: give indices such as 0,2,4."
            ) from None
    return DistillSetup(
        teacher_model=args.teacher_model,
        student_model=args.student_model,
        student_preset=args.student_preset,
        student_layers=layers,
        temperature=args.temperature,
        alpha_kd=args.alpha_kd,
        hidden_loss_weight=args.hidden_loss_weight,
        tokenizer_name=args.tokenizer_name,
        max_seq_length=args.max_seq_length,
    )
