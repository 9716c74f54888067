"""Pretrain a briskbert encoder with masked language modelling (+ next sentence prediction).

    briskbert pretrain --train_file corpus.txt --config_name bert-small --vocab_size 30522 \\
        --max_seq_length 128 --packing_mode full-sentences --preprocessing_num_workers 2 \\
        --per_device_train_batch_size 32 --max_train_steps 10000 --output_dir runs/mlm

The corpus is tokenized once, in parallel, into a memory-mapped store on disk (memory does not grow with
the corpus) and cached: a second run, or a resumed one, with the same corpus and tokenizer starts at once.
Flag names follow transformers' ``run_mlm_no_trainer.py`` where they overlap; the optimisation,
checkpoint and logging flags are the shared ones of the training loop.
"""

from __future__ import annotations

import argparse

from briskbert.commands.training_flags import (
    add_training_arguments,
    new_parser,
    training_config_from_args,
)
from briskbert.errors import UserError
from briskbert.training.data.corpus import PACKING_MODES, CorpusSource, PreparationSettings
from briskbert.training.tasks.settings import (
    MaskingSettings,
    PretrainingData,
    PretrainingModel,
    PretrainingSettings,
)


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("data")
    g.add_argument(
        "--train_file",
        type=str,
        default=None,
        help="Text (.txt: one paragraph per line, blank line between documents), .jsonl, .csv, .parquet.",
    )
    g.add_argument("--validation_file", type=str, default=None)
    g.add_argument(
        "--validation_split_percentage",
        type=float,
        default=5,
        help="Without --validation_file: %% of training documents held out for validation.",
    )
    g.add_argument("--text_column", type=str, default=None, help="Column with the text (default: 'text').")
    g.add_argument("--dataset_name", type=str, default=None, help="A Hub dataset (needs network access).")
    g.add_argument("--dataset_config_name", type=str, default=None)
    g.add_argument(
        "--preprocessing_num_workers",
        type=int,
        default=None,
        help="Processes that tokenize the corpus (default: one, using the tokenizer's own threads).",
    )
    g.add_argument(
        "--data_cache_dir",
        type=str,
        default=None,
        help="Where prepared corpora are cached (default: $BRISKBERT_CACHE/pretraining_data, else "
        "~/.cache/briskbert/pretraining_data).",
    )
    g.add_argument(
        "--overwrite_cache", action="store_true", help="Prepare the corpus again even if it is cached."
    )
    g.add_argument(
        "--streaming",
        action="store_true",
        help="Read, tokenize and pack the training file on the fly instead of preparing it first (needs "
        "--max_train_steps, --validation_file and an existing tokenizer).",
    )


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model and tokenizer")
    g.add_argument(
        "--config_name", type=str, default=None, help="A preset name (e.g. bert-small) or a config JSON."
    )
    g.add_argument(
        "--config_overrides",
        type=str,
        default=None,
        help="Override config fields, e.g. 'num_hidden_layers=4,hidden_dropout_prob=0.0'.",
    )
    g.add_argument("--model_name_or_path", type=str, default=None, help="Continue pretraining this model.")
    g.add_argument(
        "--tokenizer_name", type=str, default=None, help="A tokenizer folder (default: train one)."
    )
    g.add_argument(
        "--vocab_size",
        type=int,
        default=None,
        help="Train a WordPiece tokenizer of this size on the training data (default 30522); it is trained "
        "once per run, into output_dir/tokenizer, and reused on resume.",
    )
    g.add_argument(
        "--tokenizer_train_max_lines",
        type=int,
        default=None,
        help="Train the tokenizer on a seeded uniform sample of this many paragraphs (default: all).",
    )


def _add_objective_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("objective")
    g.add_argument("--max_seq_length", type=int, default=128)
    g.add_argument(
        "--packing_mode",
        choices=PACKING_MODES,
        default="none",
        help="full-sentences: concatenate documents into full sequences; doc-sentences: the same without "
        "crossing a document boundary; none: one document per sequence (split when longer).",
    )
    g.add_argument(
        "--packing",
        dest="packing_mode",
        action="store_const",
        const="full-sentences",
        help="Same as --packing_mode full-sentences.",
    )
    g.add_argument("--mlm_probability", type=float, default=0.15)
    g.add_argument(
        "--mask_replace_prob", type=float, default=0.8, help="Of masked tokens: share set to [MASK]."
    )
    g.add_argument(
        "--random_replace_prob", type=float, default=0.1, help="Of masked tokens: share made random."
    )
    g.add_argument("--whole_word_mask", action="store_true")
    g.add_argument("--nsp", action="store_true", help="Add next sentence prediction (segment pairs).")
    g.add_argument("--eval_mask_seed", type=int, default=1234, help="Fixed masking of the validation set.")
    g = parser.add_argument_group("model card facts")
    g.add_argument("--language", type=str, default="en")
    g.add_argument("--license", type=str, default="apache-2.0")


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_arguments(
        parser,
        learning_rate=5e-4,
        weight_decay=0.01,
        lr_scheduler_type="linear",
        warmup_ratio=None,
        eval_steps=None,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser(__doc__)
    _add_data_arguments(parser)
    _add_model_arguments(parser)
    _add_objective_arguments(parser)
    _add_training_arguments(parser)
    return parser


def pretraining_settings_from_args(args: argparse.Namespace) -> PretrainingSettings:
    """The command line's Namespace, converted once into the job's settings (each checks its values)."""
    if bool(args.train_file) == bool(args.dataset_name):
        raise UserError("Give exactly one of --train_file and --dataset_name.")
    if args.dataset_name:
        hub = dict(dataset_name=args.dataset_name, dataset_config_name=args.dataset_config_name)
        train = CorpusSource(**hub, text_column=args.text_column)
    else:
        train = CorpusSource(path=args.train_file, text_column=args.text_column)
    validation = None
    if args.validation_file:
        validation = CorpusSource(path=args.validation_file, text_column=args.text_column)
    elif args.dataset_name:
        validation = CorpusSource(**hub, text_column=args.text_column, split="validation")
    preparation = PreparationSettings(
        sentences=args.nsp,
        num_workers=args.preprocessing_num_workers or 1,
        cache_dir=args.data_cache_dir,
        overwrite=args.overwrite_cache,
    )
    if args.preprocessing_num_workers is not None and args.preprocessing_num_workers < 1:
        raise UserError(f"--preprocessing_num_workers must be >= 1, got {args.preprocessing_num_workers}.")
    return PretrainingSettings(
        data=PretrainingData(
            train=train,
            validation=validation,
            validation_split_percentage=args.validation_split_percentage,
            max_seq_length=args.max_seq_length,
            packing=args.packing_mode,
            nsp=args.nsp,
            streaming=args.streaming,
            preparation=preparation,
        ),
        model=PretrainingModel(
            config_name=args.config_name,
            config_overrides=args.config_overrides,
            model_name_or_path=args.model_name_or_path,
            tokenizer_name=args.tokenizer_name,
            vocab_size=args.vocab_size,
            tokenizer_train_max_lines=args.tokenizer_train_max_lines,
        ),
        masking=MaskingSettings(
            mlm_probability=args.mlm_probability,
            mask_replace_prob=args.mask_replace_prob,
            random_replace_prob=args.random_replace_prob,
            whole_word_mask=args.whole_word_mask,
            eval_mask_seed=args.eval_mask_seed,
        ),
        language=args.language,
        license=args.license,
    )


def main(argv: list[str] | None = None):
    """Parse and check the flags, then prepare the data and train (a user error is a ``UserError``: one
    ``error: ...`` line from ``briskbert``, exit status 2)."""
    args = build_parser().parse_args(argv)
    config = training_config_from_args(args)
    settings = pretraining_settings_from_args(args)

    from briskbert.training.engine.loop import run
    from briskbert.training.tasks.pretraining import PretrainingTask

    return run(PretrainingTask(settings), config)


if __name__ == "__main__":
    main()
