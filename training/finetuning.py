# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""What every fine-tuning script shares besides the training loop: flags for the starting model and the
data, loading the tokenizer and the model (a briskbert folder, a Hub repo id, a real BERT checkpoint that
is converted first, or a config preset), and fixed-width gathering of per-token outputs.

The training loop itself is :func:`training.loop.run`; scripts call it with the pieces built here and in
the task modules (:mod:`training.classification`, :mod:`training.ner`, :mod:`training.qa`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import torch

from .facts import base_model_id
from .task_data import DataError, load_named_dataset, load_table, pick_split

logger = logging.getLogger(__name__)


def add_model_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("model")
    g.add_argument(
        "--model_name_or_path",
        type=str,
        default=None,
        help="A briskbert model folder, a Hub repo id, or a BERT checkpoint (model_type 'bert'), "
        "which is converted to briskbert first.",
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
        "--max_train_samples", type=int, default=None, help="Keep only the first N training examples."
    )
    g.add_argument(
        "--max_eval_samples", type=int, default=None, help="Keep only the first N evaluation examples."
    )
    return parser


def check_source_arguments(args) -> None:
    if (args.model_name_or_path is None) == (args.config_preset is None):
        raise ValueError(
            "Give exactly one of --model_name_or_path (fine-tune) or --config_preset (from scratch)."
        )
    if args.config_preset is not None and args.tokenizer_name is None:
        raise ValueError("--config_preset builds a new model; give --tokenizer_name for its vocabulary.")
    if args.dataset_name is None and args.train_file is None:
        raise ValueError("Give --train_file (and usually --validation_file) or --dataset_name.")
    if args.max_seq_length < 8:
        raise ValueError(f"--max_seq_length must be at least 8, got {args.max_seq_length}.")


def load_splits(args, file_loader=load_table):
    """``(train, validation or None)`` from files (through ``file_loader``) or ``--dataset_name``."""
    if args.dataset_name is not None:
        splits = load_named_dataset(args.dataset_name, args.dataset_config_name)
        train = pick_split(splits, args.train_split, args.dataset_name)
        evaluation = splits[args.validation_split] if args.validation_split in splits else None
    else:
        train = file_loader(args.train_file)
        evaluation = file_loader(args.validation_file) if args.validation_file else None
    return train, evaluation


def first_n(dataset, n: int | None):
    return dataset.select(range(min(n, len(dataset)))) if n is not None and dataset is not None else dataset


# ----------------------------------------------------------------------------------------------- models


def _local_config(path: str) -> dict | None:
    config_file = Path(path) / "config.json"
    return json.loads(config_file.read_text()) if config_file.is_file() else None


def resolve_base_model(args) -> str:
    """A folder or repo id that holds a briskbert model; a BERT checkpoint is converted once into
    ``output_dir/converted_base`` (with its tokenizer) and that folder is returned."""
    import briskbert.modeling  # noqa: F401  (registers the briskbert config for AutoConfig)

    source = args.model_name_or_path
    config = _local_config(source)
    if config is None and not os.path.isdir(source):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(source, trust_remote_code=args.trust_remote_code).to_dict()
        if config.get("model_type") == "bert":
            from huggingface_hub import snapshot_download

            source = snapshot_download(source)
    if config is None:
        raise DataError(f"--model_name_or_path {source!r} is a folder without config.json.")
    model_type = config.get("model_type")
    if model_type == "briskbert":
        return source
    if model_type != "bert":
        raise ValueError(
            f"--model_name_or_path {args.model_name_or_path!r} has model_type {model_type!r}; expected a briskbert "
            "model or a BERT checkpoint (model_type 'bert') to convert."
        )
    from briskbert.modeling.conversion import convert_bert_checkpoint

    converted = Path(args.output_dir) / "converted_base"
    if not (converted / "config.json").is_file():
        logger.info("Converting the BERT checkpoint %s to briskbert in %s", source, converted)
        convert_bert_checkpoint(source, converted)
    return str(converted)


def load_tokenizer(args, base: str | None):
    from transformers import AutoTokenizer

    import briskbert.tokenization  # noqa: F401  (registers BriskBertTokenizer for AutoTokenizer)

    name = args.tokenizer_name or base
    tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=True)
    if not getattr(tokenizer, "is_fast", True):
        raise ValueError(
            f"tokenizer {name!r} is not a fast (tokenizers-backed) tokenizer; offsets are needed."
        )
    return tokenizer


def load_model(model_class, args, base: str | None, tokenizer=None, **config_overrides):
    """``model_class`` (a BriskBert head) from ``base`` with config fields overridden, or a fresh model
    from ``--config_preset`` sized to the tokenizer's vocabulary."""
    from briskbert.modeling import BriskBertConfig

    if base is None:
        config = BriskBertConfig.from_preset(
            args.config_preset, vocab_size=len(tokenizer), **config_overrides
        )
        if tokenizer.pad_token_id is not None:
            config.pad_token_id = tokenizer.pad_token_id
        return model_class(config)
    config = BriskBertConfig.from_pretrained(base, **config_overrides)
    return model_class.from_pretrained(base, config=config)


def card_source_facts(args, base: str | None) -> dict:
    return {
        "base_model": base_model_id(args.model_name_or_path),
        "config_preset": args.config_preset,
        "language": "en",
        "license": "apache-2.0",
    }


# ---------------------------------------------------------------------------------------------- outputs


def pad_to_width(tensor: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """Right-pad the second dimension to ``width`` so batches of different lengths can be concatenated
    (``evaluation_loop`` gathers and concatenates per-example rows of one fixed shape)."""
    missing = width - tensor.shape[1]
    if missing < 0:
        raise ValueError(f"a batch is {tensor.shape[1]} tokens wide, more than --max_seq_length {width}.")
    if missing == 0:
        return tensor
    pad = tensor.new_full((tensor.shape[0], missing, *tensor.shape[2:]), value)
    return torch.cat([tensor, pad], dim=1)


def report_skips(accelerator, *reports) -> dict:
    """Log skip reports on the main process and return their counts for the card facts."""
    facts = {}
    for report in reports:
        if report is None:
            continue
        if accelerator.is_main_process:
            report.log()
        if report.counts:
            facts[report.source] = report.as_dict()
    return facts
