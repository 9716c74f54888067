# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The flags of the fine-tuning and distillation commands, and the settings dataclasses they become.

A command builds its parser from the ``add_*_arguments`` functions here, parses, and converts the
Namespace once with the matching ``*_from_args`` function; the jobs only ever see the dataclasses of
:mod:`briskbert.training.tasks.settings`, which check their values. Importing this module imports
neither torch nor transformers: ``briskbert finetune-* --help`` stays instant.
"""

from __future__ import annotations

import argparse

from briskbert.errors import UserError
from briskbert.training.tasks.settings import (
    PROBLEM_TYPES,
    ClassificationSettings,
    DataSource,
    DistillSettings,
    ModelSource,
    NerSettings,
    QaSettings,
    parse_article_range,
)


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
        "--validation_card_name",
        type=str,
        default=None,
        help="What the model card says a local --validation_file is, e.g. 'a held-out part of the "
        "stanfordnlp/sst2 training split' (default: the file name).",
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
        validation_card_name=args.validation_card_name,
    )


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


def classification_settings_from_args(args: argparse.Namespace) -> ClassificationSettings:
    return ClassificationSettings(
        text_column=args.text_column,
        text_pair_column=args.text_pair_column,
        label_column=args.label_column,
        problem_type=args.problem_type,
        label_separator=args.label_separator,
        label_names=None
        if args.label_names is None
        else tuple(n.strip() for n in args.label_names.split(",")),
    )


def add_ner_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("task")
    g.add_argument("--token_column", type=str, default="tokens")
    g.add_argument("--tag_column", type=str, default=None, help="Default: 'tags', else 'ner_tags'.")
    g.add_argument(
        "--label_all_tokens",
        action="store_true",
        help="Train on every sub-word of a word (B- becomes I- after the first), not only the first.",
    )
    g.add_argument(
        "--crf",
        action="store_true",
        help="A linear-chain CRF over the per-token scores (config use_crf): trained with its negative "
        "log-likelihood over each word's first sub-word, decoded with Viterbi; transitions the BIO scheme "
        "forbids (O -> I-PER, B-PER -> I-LOC) are never predicted.",
    )
    return parser


def ner_settings_from_args(args: argparse.Namespace) -> NerSettings:
    return NerSettings(args.token_column, args.tag_column, args.label_all_tokens, args.crf)


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


def qa_settings_from_args(args: argparse.Namespace) -> QaSettings:
    return QaSettings(
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


def distill_settings_from_args(args: argparse.Namespace) -> DistillSettings:
    layers = None
    if args.student_layers is not None:
        try:
            layers = tuple(int(index) for index in args.student_layers.split(","))
        except ValueError:
            raise UserError(
                f"--student_layers {args.student_layers!r}: give indices such as 0,2,4."
            ) from None
    return DistillSettings(
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
