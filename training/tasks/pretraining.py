"""Masked-language-model pretraining (+ next sentence prediction) from a corpus prepared into a cached
memory-mapped store, so a resumed run continues exactly."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from briskbert.errors import SettingError, UserError
from briskbert.inputs import check_tokenizer_source
from briskbert.training.data.corpus import CorpusStore, PreparationSettings, iter_documents, prepare_corpus
from briskbert.training.data.masking import MaskingCollator, count_masked_tokens
from briskbert.training.data.pretraining_data import (
    StoredSequences,
    StreamingMLMDataset,
    check_splittable,
    split_document_indices,
    stored_nsp_examples,
)
from briskbert.training.engine.checkpointing import check_finite_weights, resolve_checkpoint, weights_file
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.engine.evaluation import evaluation_loop
from briskbert.training.engine.facts import JobFacts, base_model_id
from briskbert.training.engine.loop import seed_everything
from briskbert.training.engine.task import Task, TaskInputs
from briskbert.training.tasks.finetuning import check_positions, load_pretrained, resolve_base_model
from briskbert.training.tasks.pretraining_settings import (
    PretrainingData,
    PretrainingModel,
    PretrainingSettings,
    parse_config_overrides,
)

DEFAULT_VOCAB_SIZE = 30522  # BERT's


class PretrainingInputError(UserError, ValueError):
    """The data or the tokenizer cannot be used as given."""


def build_config(settings: PretrainingModel, vocab_size: int, pad_token_id: int | None, max_seq_length: int):
    from briskbert.modeling import PRESETS, BriskBertConfig

    overrides = parse_config_overrides(settings.config_overrides)
    known = set(BriskBertConfig().to_dict())
    if unknown := sorted(set(overrides) - known):
        raise SettingError(
            "config_overrides",
            f"unknown config field(s) {unknown}; BriskBertConfig has "
            f"{', '.join(sorted(k for k in known if not k.startswith('_')))}.",
        )
    overrides.update(vocab_size=vocab_size, pad_token_id=pad_token_id)
    if settings.config_name in PRESETS:
        config = BriskBertConfig.from_preset(settings.config_name, **overrides)
    elif Path(settings.config_name).is_file():
        config = BriskBertConfig(
            **{**BriskBertConfig.from_json_file(settings.config_name).to_dict(), **overrides}
        )
    else:
        raise SettingError(
            "config_name",
            f"{settings.config_name!r} is neither a preset ({', '.join(sorted(PRESETS))}) "
            "nor a config JSON file.",
        )
    check_positions(config, max_seq_length)
    return config


def check_new_model_fits(settings: PretrainingSettings, batch_size: int, accelerator) -> None:
    """The new model's config is valid and fits the device's memory, before anything is written."""
    from briskbert.modeling import BriskBertForMaskedLM, BriskBertForPreTraining
    from briskbert.training.engine.memory import (
        available_memory_bytes,
        check_model_fits,
        estimate_training_memory,
    )

    data, vocab_size = settings.data, settings.model.vocab_size or DEFAULT_VOCAB_SIZE
    try:
        config = build_config(settings.model, vocab_size, 0, data.max_seq_length)
    except (ValueError, TypeError) as error:
        raise PretrainingInputError(str(error)) from None
    model_class = BriskBertForPreTraining if data.nsp else BriskBertForMaskedLM
    device = accelerator.device.type
    # trained with the sparse decoder (with_sparse_decoder): logits at the masked positions only
    sizes = (batch_size, data.max_seq_length, device, accelerator.mixed_precision)
    estimate = estimate_training_memory(model_class, config, *sizes, settings.masking.mlm_probability)
    setting = "config_overrides" if settings.model.config_overrides else "config_name"
    check_model_fits(estimate, available_memory_bytes(device), setting)


def build_model(
    settings: PretrainingModel, tokenizer, max_seq_length: int, nsp: bool, output_dir: str = ".", log=print
):
    """A new model from the config, or the one to continue (on briskbert unless `keep_source_class`)."""
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForPreTraining

    import briskbert.modeling  # noqa: F401  (registers the Auto classes)
    from briskbert.modeling import BriskBertForMaskedLM, BriskBertForPreTraining
    from briskbert.modeling.conversion import FAMILIES

    if settings.model_name_or_path:
        auto = AutoModelForPreTraining if nsp else AutoModelForMaskedLM
        path = settings.model_name_or_path
        config = AutoConfig.from_pretrained(path, trust_remote_code=True)
        imported = ["briskbert", *(model_type for family in FAMILIES for model_type in family.model_types)]
        if config.model_type in imported and not settings.keep_source_class:
            return continued_on_briskbert(path, output_dir, tokenizer, nsp, log)
        model = with_sparse_decoder(
            config, lambda config: auto.from_pretrained(path, config=config, trust_remote_code=True)
        )
        check_finite_weights(model, weights_file(path), "model_name_or_path")
        log(f"Continuing {type(model).__name__} from {path} with its own class (not briskbert's fast path).")
        return model
    config = build_config(settings, len(tokenizer), tokenizer.pad_token_id, max_seq_length)
    return with_sparse_decoder(config, BriskBertForPreTraining if nsp else BriskBertForMaskedLM)


def with_sparse_decoder(config, build):
    """``build(config)`` (a model, or a tuple led by one) decoding only the masked positions in training; the
    saved config keeps its ``sparse_prediction``, so the published ``logits`` stay (batch, seq, vocab)."""
    if not hasattr(config, "sparse_prediction"):
        return build(config)
    saved, config.sparse_prediction = config.sparse_prediction, True
    built = build(config)
    (built[0] if isinstance(built, tuple) else built).config.sparse_prediction = saved
    return built


def continued_on_briskbert(path: str, output_dir: str, tokenizer, nsp: bool, log):
    """briskbert's MLM (+ NSP) model continuing `path`: another family's checkpoint is converted once into
    ``output_dir/converted_base`` and checked against its own transformers class; a missing head starts fresh."""
    from transformers import AutoModel, AutoModelForMaskedLM

    from briskbert.inputs import check_model_source
    from briskbert.modeling import BriskBertForMaskedLM, BriskBertForPreTraining
    from briskbert.modeling.conversion.agreement import OUTPUT_TOLERANCE, largest_difference

    location = check_model_source(path, "model_name_or_path", need_tokenizer=False)
    base = resolve_base_model(location, output_dir)
    model_class = BriskBertForPreTraining if nsp else BriskBertForMaskedLM
    model, info = with_sparse_decoder(
        model_class.config_class.from_pretrained(base),
        lambda config: load_pretrained(
            model_class, base, config, "continued pretraining", output_loading_info=True
        ),
    )
    check_finite_weights(model, weights_file(base), "model_name_or_path")
    if base == location.name:  # already a briskbert model
        return model
    new_head = any(name.startswith("head.") for name in info["missing_keys"])
    reference = (AutoModel if new_head else AutoModelForMaskedLM).from_pretrained(location.name)
    difference = largest_difference(reference, model.model if new_head else model, tokenizer)
    compared = "hidden states" if new_head else "masked-LM logits"
    if difference > OUTPUT_TOLERANCE:
        raise PretrainingInputError(
            f"{path}: the converted model's {compared} differ from {type(reference).__name__}'s by "
            f"{difference:.1e}, more than {OUTPUT_TOLERANCE:g}; continue the source's own class with keep_source_class."
        )
    head = "a new MLM head (the source has none)" if new_head else "the source's MLM head"
    log(
        f"Converted {path} ({(reference.config.architectures or [type(reference).__name__])[0]}) to "
        f"{model_class.__name__} with {head}: its {compared} match {type(reference).__name__}'s within "
        f"{difference:.1e} (conversion tolerance {OUTPUT_TOLERANCE:g}, fp32); training on briskbert's fast path."
    )
    return model


def load_or_train_tokenizer(settings: PretrainingSettings, config: TrainingConfig, accelerator):
    """The named tokenizer, or a WordPiece one trained into ``output_dir/tokenizer`` (reused on resume)."""
    from transformers import AutoTokenizer

    import briskbert.tokenization  # noqa: F401  (registers BriskBertTokenizer)
    from briskbert.tokenization import BriskBertTokenizer, train_wordpiece_tokenizer

    model, data = settings.model, settings.data
    source = model.tokenizer_name or model.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    folder = Path(config.output_dir) / "tokenizer"
    # A checkpoint's weights were trained with this tokenizer's ids: reuse it. Without one (a run stopped
    # before its first checkpoint) it is trained again, so changed flags such as --vocab_size take effect.
    resuming = config.resume_from_checkpoint and resolve_checkpoint(
        config.resume_from_checkpoint, config.output_dir
    )
    if resuming and (folder / "vocab.txt").is_file():
        accelerator.print(f"Resuming: reusing the tokenizer trained for this run in {folder}")
        return BriskBertTokenizer.from_pretrained(folder)
    if accelerator.is_main_process:
        train_wordpiece_tokenizer(
            dataset=_TrainingParagraphs(data, config.seed),
            vocab_size=model.vocab_size or DEFAULT_VOCAB_SIZE,
            output_dir=folder,
            show_progress=False,
            model_max_length=data.max_seq_length,
            max_lines=model.tokenizer_train_max_lines,
            seed=config.seed,
        )
    accelerator.wait_for_everyone()
    return BriskBertTokenizer.from_pretrained(folder)


class _TrainingParagraphs:
    """The training documents' paragraphs, streamed at every iteration, without the held-out validation ones."""

    def __init__(self, data: PretrainingData, seed: int):
        self.data, self.held_out = data, set()
        if data.validation is None:
            count = sum(1 for _ in iter_documents(data.train))
            held = split_document_indices(count, data.validation_split_percentage, seed, data.train.label)[1]
            self.held_out = set(np.asarray(held).tolist())

    def __iter__(self):
        for number, document in enumerate(iter_documents(self.data.train)):
            if number not in self.held_out:
                yield from document


def build_datasets(data: PretrainingData, tokenizer, accelerator, seed: int):
    """(training, evaluation) datasets over stores the local main process prepares (or finds cached)."""
    if data.validation is None:
        check_splittable(data.train)  # a corpus that will be refused is refused before it is prepared
    preparation = PreparationSettings(
        sentences=data.nsp,
        num_workers=data.preprocessing_num_workers or 1,
        cache_dir=data.data_cache_dir,
        overwrite=data.overwrite_cache and accelerator.is_local_main_process,
        show_progress=accelerator.is_local_main_process,
    )
    with accelerator.local_main_process_first():
        train_store = None
        if not data.streaming:
            train_store = prepare_corpus(data.train, tokenizer, preparation, log=accelerator.print)
        if data.validation is not None:
            eval_store = prepare_corpus(data.validation, tokenizer, preparation, log=accelerator.print)
            train_docs = eval_docs = None
        else:
            train_docs, eval_docs = split_document_indices(
                train_store.num_documents, data.validation_split_percentage, seed, data.train.label
            )
            eval_store = train_store
        eval_dataset = _sequences(eval_store, eval_docs, tokenizer, data, seed + 1)
        if data.streaming:
            train_dataset = StreamingMLMDataset(
                data.train.path, tokenizer, data.max_seq_length, data.train.text_column, data.packing_mode
            )
        else:
            train_dataset = _sequences(train_store, train_docs, tokenizer, data, seed)
    return train_dataset, eval_dataset


def _sequences(store: CorpusStore, documents, tokenizer, data: PretrainingData, seed: int):
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    if data.nsp:
        return stored_nsp_examples(store, documents, cls, sep, data.max_seq_length, seed)
    return StoredSequences(store, documents, data.max_seq_length, data.packing_mode, cls, sep)


def mlm_batch_stats(batch: dict, outputs) -> dict:
    """Per-example masked-token loss sum, correct predictions and count (+ NSP correctness)."""
    labels = batch["labels"]
    masked = labels != -100
    logits = outputs.prediction_logits if "prediction_logits" in outputs else outputs.logits
    if logits.dim() == 3:  # a model that decodes every position
        logits = logits[masked]
    targets, rows = labels[masked], masked.nonzero()[:, 0]
    ce = F.cross_entropy(logits.float(), targets, reduction="none")
    zeros = torch.zeros(labels.shape[0], device=labels.device)
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


class PretrainingTask(Task):
    """``briskbert pretrain``: MLM (+ NSP) of a new or continued encoder, evaluated with a fixed masking."""

    def __init__(self, settings: PretrainingSettings):
        self.settings = settings
        if settings.model.tokenizer_name:  # before the run folder exists; a damaged tokenizer.json is named
            check_tokenizer_source(settings.model.tokenizer_name, "tokenizer_name")

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        settings = self.settings
        data = settings.data
        if not settings.model.model_name_or_path:
            check_new_model_fits(settings, config.per_device_train_batch_size, accelerator)
        try:
            tokenizer = load_or_train_tokenizer(settings, config, accelerator)
            train_dataset, eval_dataset = build_datasets(data, tokenizer, accelerator, config.seed)
            seed_everything(config.seed)  # the model's initialisation does not depend on the data preparation
            with accelerator.local_main_process_first():  # converts an imported checkpoint once
                model = build_model(
                    settings.model,
                    tokenizer,
                    data.max_seq_length,
                    data.nsp,
                    config.output_dir,
                    accelerator.print,
                )
        except (ValueError, FileNotFoundError) as error:
            raise PretrainingInputError(str(error)) from error
        masking = settings.masking.collator_arguments()
        return TaskInputs(
            model=model,
            train_dataset=train_dataset,
            data_collator=MaskingCollator(tokenizer, seed=config.seed, **masking),
            tokenizer=tokenizer,
            eval_dataset=eval_dataset,
            eval_collator=MaskingCollator(tokenizer, seed=settings.masking.eval_mask_seed, **masking),
        )

    def count_items(self, batch: dict) -> int:
        return count_masked_tokens(batch)

    def evaluate(self, model, dataloader, accelerator) -> dict:
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

    def facts(self) -> JobFacts:
        data, model, masking = self.settings.data, self.settings.model, self.settings.masking
        source = data.dataset_name or Path(data.train_file).name
        if data.validation_file:
            eval_dataset = Path(data.validation_file).name
        elif data.dataset_name:
            eval_dataset = f"{data.dataset_name} (validation split)"
        else:
            eval_dataset = f"{source} ({data.validation_split_percentage:g}% of documents held out)"
        preset = model.config_name if model.config_name and not model.config_name.endswith(".json") else None
        objective = {**masking.collator_arguments(), "nsp": data.nsp, "packing": data.packing_mode}
        return JobFacts(
            task="masked-language-modeling" + (" + next-sentence-prediction" if data.nsp else ""),
            pipeline_tag="fill-mask",
            datasets=(source,),
            eval_dataset=eval_dataset,
            base_model=base_model_id(model.model_name_or_path),
            config_preset=preset,
            language=model.language,
            license=model.license,
            details={"max_seq_length": data.max_seq_length, "objective": objective},
        )
