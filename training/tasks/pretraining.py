"""Masked-language-model pretraining (+ optional next sentence prediction) on the shared loop.

The command line (``briskbert pretrain``, :mod:`briskbert.commands.pretrain`) parses and checks its flags
and hands a :class:`PretrainingJob` to :func:`pretrain`, which

1. loads the tokenizer, or trains a WordPiece one once per run into ``output_dir/tokenizer`` (streamed
   over the training documents, validation documents left out; reused when the run is resumed);
2. prepares the corpus into a memory-mapped store (:mod:`training.corpus`: parallel tokenization,
   bounded memory, cached; the main process prepares, the others wait and open the cache);
3. builds the sequences from it (:class:`~training.pretraining_data.StoredSequences`, or NSP pairs) and
   calls the shared loop (:func:`training.loop.run`), which shards the batches across processes and
   stores the data position in its checkpoints: the sequences depend only on the store, so a resumed run
   continues exactly.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from briskbert.errors import UserError
from briskbert.training.data.corpus import (
    CorpusSource,
    CorpusStore,
    PreparationSettings,
    iter_documents,
    prepare_corpus,
)
from briskbert.training.data.masking import MaskingCollator, count_masked_tokens
from briskbert.training.data.pretraining_data import (
    StoredSequences,
    StreamingMLMDataset,
    check_file,
    packing_mode,
    split_document_indices,
    stored_nsp_examples,
)
from briskbert.training.engine.arguments import TrainingConfig, validate_training_arguments
from briskbert.training.engine.facts import base_model_id
from briskbert.training.engine.loop import create_accelerator, evaluation_loop, run, seed_everything

TOKENIZER_FOLDER = "tokenizer"


class PretrainingInputError(UserError, ValueError):
    """The data or the tokenizer cannot be used as given (reported as one ``error:`` line)."""


# ------------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class DataSettings:
    """Where the corpus comes from and how it becomes sequences."""

    train: CorpusSource
    validation: CorpusSource | None = None  # None: hold out validation_split_percentage of the documents
    validation_split_percentage: float = 5
    max_seq_length: int = 128
    packing: str = "none"  # see training.pretraining_data.PACKING_MODES
    nsp: bool = False
    streaming: bool = False
    seed: int = 42
    preparation: PreparationSettings = PreparationSettings()


@dataclass(frozen=True)
class ModelSettings:
    """The model to build or continue, and its tokenizer."""

    config_name: str | None = None
    config_overrides: str | None = None
    model_name_or_path: str | None = None
    tokenizer_name: str | None = None
    vocab_size: int | None = None
    tokenizer_train_max_lines: int | None = None


@dataclass(frozen=True)
class MaskingSettings:
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_mask: bool = False
    eval_mask_seed: int = 1234

    def collator_arguments(self) -> dict:
        return dict(
            mlm_probability=self.mlm_probability,
            mask_replace_prob=self.mask_replace_prob,
            random_replace_prob=self.random_replace_prob,
            whole_word_mask=self.whole_word_mask,
        )


@dataclass(frozen=True)
class PretrainingJob:
    data: DataSettings
    model: ModelSettings
    masking: MaskingSettings
    output_dir: str
    language: str = "en"
    license: str = "apache-2.0"
    resuming: bool = False


def validate_arguments(args) -> TrainingConfig:
    """Every contradiction or unusable input on the command line is reported here, before anything is
    built (``args`` is the command line's Namespace); returns the shared loop's checked settings."""
    training_config = validate_training_arguments(args)
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
    _validate_data_arguments(args)
    return training_config


def _validate_data_arguments(args) -> None:
    packing_mode(args.packing_mode)
    if args.nsp and args.packing_mode != "none":
        raise ValueError(
            "--nsp builds its own [CLS] A [SEP] B [SEP] pairs; it cannot be combined with --packing / "
            f"--packing_mode {args.packing_mode}."
        )
    if args.streaming:
        if args.nsp:
            raise ValueError("--streaming supports MLM only; drop --nsp.")
        if args.max_train_steps is None or args.validation_file is None:
            raise ValueError("--streaming needs --max_train_steps and --validation_file.")
        if args.vocab_size is not None or not (args.tokenizer_name or args.model_name_or_path):
            raise ValueError(
                "--streaming needs an existing tokenizer (--tokenizer_name or --model_name_or_path)."
            )
    if args.max_seq_length < 8:
        raise ValueError(f"--max_seq_length must be at least 8, got {args.max_seq_length}.")
    if args.preprocessing_num_workers is not None and args.preprocessing_num_workers < 1:
        raise ValueError(f"--preprocessing_num_workers must be >= 1, got {args.preprocessing_num_workers}.")
    if args.tokenizer_train_max_lines is not None and args.tokenizer_train_max_lines < 1:
        raise ValueError(f"--tokenizer_train_max_lines must be >= 1, got {args.tokenizer_train_max_lines}.")


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


def build_config(settings: ModelSettings, tokenizer, max_seq_length: int):
    from briskbert.modeling import PRESETS, BriskBertConfig

    overrides = parse_config_overrides(settings.config_overrides)
    known = set(BriskBertConfig().to_dict())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"--config_overrides: unknown config field(s) {unknown}; BriskBertConfig has "
            f"{', '.join(sorted(k for k in known if not k.startswith('_')))}."
        )
    overrides.update(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    if settings.config_name in PRESETS:
        config = BriskBertConfig.from_preset(settings.config_name, **overrides)
    elif Path(settings.config_name).is_file():
        config = BriskBertConfig.from_json_file(settings.config_name)
        for key, value in overrides.items():
            setattr(config, key, value)
        config = BriskBertConfig(**config.to_dict())  # re-validate
    else:
        raise ValueError(
            f"--config_name {settings.config_name!r} is neither a preset ({', '.join(sorted(PRESETS))}) "
            "nor a config JSON file."
        )
    if max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"--max_seq_length {max_seq_length} exceeds the model's max_position_embeddings "
            f"{config.max_position_embeddings}."
        )
    return config


def build_model(settings: ModelSettings, tokenizer, max_seq_length: int, nsp: bool):
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

    import briskbert.modeling  # noqa: F401  (registers the Auto classes)
    from briskbert.modeling import BriskBertForMaskedLM, BriskBertForPreTraining

    if settings.model_name_or_path:
        auto = AutoModelForPreTraining if nsp else AutoModelForMaskedLM
        return auto.from_pretrained(settings.model_name_or_path, trust_remote_code=True)
    config = build_config(settings, tokenizer, max_seq_length)
    return (BriskBertForPreTraining if nsp else BriskBertForMaskedLM)(config)


# ------------------------------------------------------------------------------------------ tokenizer
def load_or_train_tokenizer(job: PretrainingJob, accelerator):
    """The named tokenizer, or a WordPiece one trained once per run: a resumed run reuses
    ``output_dir/tokenizer`` (the weights were trained with its ids); a new run trains it, on the main
    process, streaming the training documents (deterministic: same corpus and seed, same vocabulary)."""
    from transformers import AutoTokenizer

    import briskbert.tokenization  # noqa: F401  (registers BriskBertTokenizer)
    from briskbert.tokenization import BriskBertTokenizer, train_wordpiece_tokenizer

    source = job.model.tokenizer_name or job.model.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    folder = Path(job.output_dir) / TOKENIZER_FOLDER
    if job.resuming and (folder / "vocab.txt").is_file():
        accelerator.print(f"Resuming: reusing the tokenizer trained for this run in {folder}")
        return BriskBertTokenizer.from_pretrained(folder)
    if accelerator.is_main_process:
        train_wordpiece_tokenizer(
            dataset=_TrainingParagraphs(job.data),
            vocab_size=job.model.vocab_size or 30522,
            output_dir=folder,
            show_progress=False,
            model_max_length=job.data.max_seq_length,
            max_lines=job.model.tokenizer_train_max_lines,
            seed=job.data.seed,
        )
    accelerator.wait_for_everyone()
    return BriskBertTokenizer.from_pretrained(folder)


class _TrainingParagraphs:
    """The paragraphs of the training documents, streamed (again at every iteration: the tokenizer
    trainer reads them twice); the validation documents, held out as the data split holds them out,
    are left out."""

    def __init__(self, data: DataSettings):
        self.data = data
        self.held_out = np.zeros(0, dtype=bool)
        if data.validation is None:
            count = sum(1 for _ in iter_documents(data.train))
            self.held_out = np.zeros(count, dtype=bool)
            held = split_document_indices(
                count, data.validation_split_percentage, data.seed, data.train.label
            )[1]
            self.held_out[held] = True

    def __iter__(self):
        for number, document in enumerate(iter_documents(self.data.train)):
            if number >= len(self.held_out) or not self.held_out[number]:
                yield from document


# ----------------------------------------------------------------------------------------------- data
def build_datasets(data: DataSettings, tokenizer, accelerator):
    """(training, evaluation) datasets. The main process prepares the stores (or finds them cached)
    while the others wait, then every process opens the same memory-mapped files."""
    preparation = replace(
        data.preparation,
        overwrite=data.preparation.overwrite and accelerator.is_local_main_process,
        show_progress=data.preparation.show_progress and accelerator.is_local_main_process,
    )
    with accelerator.local_main_process_first():
        train_store = None
        if not data.streaming:
            train_store = prepare_corpus(data.train, tokenizer, preparation, log=accelerator.print)
        if data.validation is not None:
            eval_store, train_docs, eval_docs = (
                prepare_corpus(data.validation, tokenizer, preparation, log=accelerator.print),
                None,
                None,
            )
        else:
            train_docs, eval_docs = split_document_indices(
                train_store.num_documents, data.validation_split_percentage, data.seed, data.train.label
            )
            eval_store = train_store
        eval_dataset = _sequences(eval_store, eval_docs, tokenizer, data, data.seed + 1)
        if data.streaming:
            train_dataset = StreamingMLMDataset(
                data.train.path, tokenizer, data.max_seq_length, data.train.text_column, data.packing
            )
        else:
            train_dataset = _sequences(train_store, train_docs, tokenizer, data, data.seed)
    if len(eval_dataset) == 0:
        raise PretrainingInputError("The validation split has no tokens.")
    return train_dataset, eval_dataset


def _sequences(store: CorpusStore, documents, tokenizer, data: DataSettings, seed: int):
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    if data.nsp:
        return stored_nsp_examples(store, documents, cls, sep, data.max_seq_length, seed)
    return StoredSequences(store, documents, data.max_seq_length, data.packing, cls, sep)


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
def card_facts(job: PretrainingJob) -> dict:
    data, model = job.data, job.model
    source = data.train.dataset_name or Path(data.train.path).name
    if data.validation is not None and data.validation.path:
        eval_dataset = Path(data.validation.path).name
    elif data.validation is not None:
        eval_dataset = f"{data.validation.dataset_name} (validation split)"
    else:
        eval_dataset = f"{source} ({data.validation_split_percentage:g}% of documents held out)"
    return {
        "task": "masked-language-modeling" + (" + next-sentence-prediction" if data.nsp else ""),
        "pipeline_tag": "fill-mask",
        "datasets": [source],
        "eval_dataset": eval_dataset,
        "base_model": base_model_id(model.model_name_or_path),
        "config_preset": model.config_name
        if model.config_name and not model.config_name.endswith(".json")
        else None,
        "language": job.language,
        "license": job.license,
        "max_seq_length": data.max_seq_length,
        "objective": {**job.masking.collator_arguments(), "nsp": data.nsp, "packing": data.packing},
    }


def pretrain(job: PretrainingJob, training_config: TrainingConfig):
    """Tokenizer, data, model, then the shared loop."""
    accelerator = create_accelerator(training_config)
    seed_everything(job.data.seed)
    try:
        tokenizer = load_or_train_tokenizer(job, accelerator)
        train_dataset, eval_dataset = build_datasets(job.data, tokenizer, accelerator)
    except (ValueError, FileNotFoundError) as error:
        raise PretrainingInputError(str(error)) from error
    batch_size = training_config.per_device_train_batch_size
    if not job.data.streaming and len(train_dataset) < batch_size:
        raise PretrainingInputError(
            f"The training corpus gives {len(train_dataset)} sequences of up to {job.data.max_seq_length} "
            f"tokens, fewer than one batch (--per_device_train_batch_size {batch_size})."
        )
    seed_everything(job.data.seed)  # the model's initialisation does not depend on the data preparation
    try:
        model = build_model(job.model, tokenizer, job.data.max_seq_length, job.data.nsp)
    except ValueError as error:
        raise PretrainingInputError(str(error)) from error
    masking = job.masking.collator_arguments()
    return run(
        training_config,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        data_collator=MaskingCollator(tokenizer, seed=job.data.seed, **masking),
        eval_dataset=eval_dataset,
        eval_collator=MaskingCollator(tokenizer, seed=job.masking.eval_mask_seed, **masking),
        evaluate_fn=evaluate_mlm,
        count_items=count_masked_tokens,
        card_facts=card_facts(job),
    )


def main(argv=None):
    """``briskbert pretrain`` (kept here for code that imports it from this module)."""
    from briskbert.commands.pretrain import main as command_main

    return command_main(argv)
