"""Masked-language-model pretraining (+ optional next sentence prediction) on the shared loop.

``scripts/pretrain.py`` is a thin wrapper around :func:`main`. Flag names follow transformers'
``run_mlm_no_trainer.py`` where they overlap (``--train_file``, ``--validation_file``,
``--validation_split_percentage``, ``--dataset_name``, ``--config_name``, ``--config_overrides``,
``--model_name_or_path``, ``--tokenizer_name``, ``--max_seq_length``, ``--mlm_probability``, ...); the
optimisation, checkpoint and logging flags are the shared ones of :func:`training.add_training_arguments`.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from .facts import base_model_id
from .loop import (
    add_training_arguments,
    create_accelerator,
    evaluation_loop,
    run,
    seed_everything,
    validate_training_arguments,
)
from .masking import MaskingCollator, count_masked_tokens
from .pretraining_data import (
    StreamingMLMDataset,
    check_file,
    mlm_sequences,
    nsp_examples,
    read_documents,
    split_validation,
    to_dataset,
    tokenize_documents,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Pretrain a briskbert encoder with MLM (+ NSP).")
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
        "--streaming",
        action="store_true",
        help="Read, tokenize and pack the training file on the fly (needs --max_train_steps, "
        "--validation_file and --packing).",
    )
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
        help="Train a WordPiece tokenizer of this size on the training data (default 30522).",
    )
    g = parser.add_argument_group("objective")
    g.add_argument("--max_seq_length", type=int, default=128)
    g.add_argument("--packing", action="store_true", help="Concatenate documents into full sequences.")
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
    add_training_arguments(
        parser,
        learning_rate=5e-4,
        weight_decay=0.01,
        lr_scheduler_type="linear",
        warmup_ratio=None,
        eval_steps=None,
    )
    return parser


def validate_arguments(args) -> None:
    """Every contradiction or unusable input is reported here, before anything is built."""
    validate_training_arguments(args)
    if bool(args.train_file) == bool(args.dataset_name):
        raise ValueError("Give exactly one of --train_file and --dataset_name.")
    check_file(args.train_file, "--train_file")
    check_file(args.validation_file, "--validation_file")
    if args.model_name_or_path and (args.config_name or args.config_overrides):
        raise ValueError(
            "--model_name_or_path continues an existing model: drop --config_name/--config_overrides."
        )
    if not args.model_name_or_path and not args.config_name:
        raise ValueError(
            "Give --config_name (a preset such as bert-small, or a config JSON) or --model_name_or_path."
        )
    if args.vocab_size is not None and (args.tokenizer_name or args.model_name_or_path):
        raise ValueError(
            "--vocab_size trains a new tokenizer; it cannot be combined with --tokenizer_name or "
            "--model_name_or_path (whose tokenizer is used)."
        )
    if not 0 < args.mlm_probability < 1:
        raise ValueError(f"--mlm_probability must be in (0, 1), got {args.mlm_probability}.")
    if (
        min(args.mask_replace_prob, args.random_replace_prob) < 0
        or args.mask_replace_prob + args.random_replace_prob > 1
    ):
        raise ValueError(
            f"--mask_replace_prob {args.mask_replace_prob} + --random_replace_prob "
            f"{args.random_replace_prob} must be within [0, 1] (the rest stays unchanged)."
        )
    if args.nsp and args.packing:
        raise ValueError(
            "--nsp builds its own [CLS] A [SEP] B [SEP] pairs; it cannot be combined with --packing."
        )
    if args.streaming:
        if args.nsp:
            raise ValueError("--streaming supports MLM only; drop --nsp.")
        if args.max_train_steps is None or args.validation_file is None or not args.packing:
            raise ValueError("--streaming needs --max_train_steps, --validation_file and --packing.")
        if args.vocab_size is not None or not (args.tokenizer_name or args.model_name_or_path):
            raise ValueError(
                "--streaming needs an existing tokenizer (--tokenizer_name or --model_name_or_path)."
            )
    if args.max_seq_length < 8:
        raise ValueError(f"--max_seq_length must be at least 8, got {args.max_seq_length}.")


# --------------------------------------------------------------------------------------------- model
def parse_config_overrides(text: str | None) -> dict:
    """'a=1,b=0.1,c=rope,d=true' -> {'a': 1, 'b': 0.1, 'c': 'rope', 'd': True}."""
    overrides = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise ValueError(f"--config_overrides item {item!r} is not key=value.")
        key, value = (s.strip() for s in item.split("=", 1))
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def build_config(args, tokenizer):
    from briskbert.modeling import PRESETS, BriskBertConfig

    overrides = parse_config_overrides(args.config_overrides)
    known = set(BriskBertConfig().to_dict())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"--config_overrides: unknown config field(s) {unknown}; BriskBertConfig has "
            f"{', '.join(sorted(k for k in known if not k.startswith('_')))}."
        )
    overrides.update(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    if args.config_name in PRESETS:
        config = BriskBertConfig.from_preset(args.config_name, **overrides)
    elif Path(args.config_name).is_file():
        config = BriskBertConfig.from_json_file(args.config_name)
        for key, value in overrides.items():
            setattr(config, key, value)
        config = BriskBertConfig(**config.to_dict())  # re-validate
    else:
        raise ValueError(
            f"--config_name {args.config_name!r} is neither a preset ({', '.join(sorted(PRESETS))}) "
            "nor a config JSON file."
        )
    if args.max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"--max_seq_length {args.max_seq_length} exceeds the model's max_position_embeddings "
            f"{config.max_position_embeddings}."
        )
    return config


def build_model(args, tokenizer):
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

    import briskbert.modeling  # noqa: F401  (registers the Auto classes)
    from briskbert.modeling import BriskBertForMaskedLM, BriskBertForPreTraining

    if args.model_name_or_path:
        auto = AutoModelForPreTraining if args.nsp else AutoModelForMaskedLM
        return auto.from_pretrained(args.model_name_or_path, trust_remote_code=True)
    config = build_config(args, tokenizer)
    return (BriskBertForPreTraining if args.nsp else BriskBertForMaskedLM)(config)


def load_or_train_tokenizer(args, accelerator, train_documents):
    from transformers import AutoTokenizer

    import briskbert.tokenization  # noqa: F401  (registers BriskBertTokenizer)

    source = args.tokenizer_name or args.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    folder = Path(args.output_dir) / "tokenizer"
    if accelerator.is_main_process:
        from briskbert.tokenization import train_wordpiece_tokenizer

        texts = ({"text": p} for doc in train_documents for p in doc)
        train_wordpiece_tokenizer(
            dataset=texts,
            vocab_size=args.vocab_size or 30522,
            output_dir=folder,
            show_progress=False,
            model_max_length=args.max_seq_length,
        )
    accelerator.wait_for_everyone()
    from briskbert.tokenization import BriskBertTokenizer

    return BriskBertTokenizer.from_pretrained(folder)


# ---------------------------------------------------------------------------------------------- data
def load_documents(args):
    """(train documents, validation documents) as lists of lists of paragraphs."""
    if args.dataset_name:
        import datasets

        raw = datasets.load_dataset(args.dataset_name, args.dataset_config_name)
        column = args.text_column or "text"
        from .pretraining_data import documents_from_rows

        train = documents_from_rows(raw["train"][column], blank_line_separates=True)
        val = documents_from_rows(raw["validation"][column], True) if "validation" in raw else None
    else:
        train = read_documents(args.train_file, args.text_column)
        val = read_documents(args.validation_file, args.text_column) if args.validation_file else None
    if val is None:
        train, val = split_validation(train, args.validation_split_percentage, args.seed)
    return train, val


def build_examples(documents, tokenizer, args, seed):
    if args.nsp:
        return to_dataset(
            nsp_examples(
                tokenize_documents(documents, tokenizer, sentences=True), tokenizer, args.max_seq_length, seed
            )
        )
    return to_dataset(
        mlm_sequences(tokenize_documents(documents, tokenizer), tokenizer, args.max_seq_length, args.packing)
    )


# ---------------------------------------------------------------------------------------- evaluation
def mlm_batch_stats(batch: dict, outputs) -> dict:
    """Per-example masked-token loss sum, correct predictions and count (+ NSP correctness)."""
    labels = batch["labels"]
    masked = labels != -100
    logits = getattr(outputs, "prediction_logits", None)
    if logits is None:
        logits = outputs.logits
    if logits.dim() == 3:  # a model that decodes every position
        logits = logits[masked]
    targets = labels[masked]
    rows = masked.nonzero()[:, 0]
    n = labels.shape[0]
    ce = F.cross_entropy(logits.float(), targets, reduction="none")
    zeros = torch.zeros(n, device=labels.device)
    stats = {
        "loss_sum": zeros.index_add(0, rows, ce),
        "correct": zeros.index_add(0, rows, (logits.argmax(-1) == targets).float()),
        "count": masked.sum(1).float(),
    }
    if "next_sentence_label" in batch and getattr(outputs, "seq_relationship_logits", None) is not None:
        stats["nsp_correct"] = (
            outputs.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]
        ).float()
    return stats


def evaluate_mlm(model, dataloader, accelerator) -> dict:
    """Token-weighted MLM loss, accuracy and perplexity over all masked validation tokens; NSP accuracy."""
    stats = evaluation_loop(model, dataloader, accelerator, mlm_batch_stats)
    count = stats["count"].sum().item()
    loss = stats["loss_sum"].sum().item() / count
    metrics = {
        "loss": loss,
        "accuracy": stats["correct"].sum().item() / count,
        "perplexity": math.exp(min(loss, 50.0)),
        "masked_tokens": count,
    }
    if "nsp_correct" in stats:
        metrics["nsp_accuracy"] = stats["nsp_correct"].mean().item()
    return metrics


# ---------------------------------------------------------------------------------------------- main
def main(argv=None):
    args = build_parser().parse_args(argv)
    validate_arguments(args)
    accelerator = create_accelerator(args)
    seed_everything(args.seed)

    if args.streaming:
        train_documents, val_documents = None, read_documents(args.validation_file, args.text_column)
    else:
        train_documents, val_documents = load_documents(args)
    tokenizer = load_or_train_tokenizer(args, accelerator, train_documents)
    if args.streaming:
        train_dataset = StreamingMLMDataset(args.train_file, tokenizer, args.max_seq_length, args.text_column)
    else:
        train_dataset = build_examples(train_documents, tokenizer, args, args.seed)
    eval_dataset = build_examples(val_documents, tokenizer, args, args.seed + 1)
    if len(eval_dataset) == 0:
        raise ValueError("The validation split has no tokens.")
    if not args.streaming and len(train_dataset) < args.per_device_train_batch_size:
        raise ValueError(
            f"The training corpus gives {len(train_dataset)} sequences of up to {args.max_seq_length} tokens, fewer "
            f"than one batch (--per_device_train_batch_size {args.per_device_train_batch_size})."
        )

    seed_everything(args.seed)  # the model's initialisation does not depend on the data preparation
    model = build_model(args, tokenizer)
    masking = dict(
        mlm_probability=args.mlm_probability,
        mask_replace_prob=args.mask_replace_prob,
        random_replace_prob=args.random_replace_prob,
        whole_word_mask=args.whole_word_mask,
    )
    source = args.dataset_name or Path(args.train_file).name
    facts = {
        "task": "masked-language-modeling" + (" + next-sentence-prediction" if args.nsp else ""),
        "pipeline_tag": "fill-mask",
        "datasets": [source],
        "eval_dataset": (
            Path(args.validation_file).name
            if args.validation_file
            else f"{source} ({args.validation_split_percentage:g}% of documents held out)"
        ),
        "base_model": base_model_id(args.model_name_or_path),
        "config_preset": args.config_name
        if args.config_name and not args.config_name.endswith(".json")
        else None,
        "language": args.language,
        "license": args.license,
        "max_seq_length": args.max_seq_length,
        "objective": {**masking, "nsp": args.nsp, "packing": args.packing},
    }
    return run(
        args,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        data_collator=MaskingCollator(tokenizer, seed=args.seed, **masking),
        eval_dataset=eval_dataset,
        eval_collator=MaskingCollator(tokenizer, seed=args.eval_mask_seed, **masking),
        evaluate_fn=evaluate_mlm,
        count_items=count_masked_tokens,
        card_facts=facts,
    )
