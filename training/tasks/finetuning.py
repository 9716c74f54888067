"""What the fine-tuning jobs share besides the training loop: :class:`FinetuningTask`, their data splits and
the starting model. Imports neither torch nor transformers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from briskbert.errors import SettingError
from briskbert.inputs import ModelLocation, check_model_source, check_tokenizer_source
from briskbert.training.data.task_data import load_named_dataset, load_table, pick_split
from briskbert.training.engine.facts import JobFacts, base_model_id
from briskbert.training.engine.task import Task, TaskInputs
from briskbert.training.tasks.settings import DataSource, ModelSource

logger = logging.getLogger(__name__)


def load_splits(data: DataSource, file_loader=load_table):
    """``(train, validation or None)`` from files (read by ``file_loader(path, setting)``) or a dataset."""
    if data.dataset_name is not None:
        splits = load_named_dataset(data.dataset_name, data.dataset_config_name)
        train = pick_split(splits, data.train_split, f"dataset_name {data.dataset_name}")
        evaluation = splits[data.validation_split] if data.validation_split in splits else None
    else:
        train = file_loader(data.train_file, "train_file")
        evaluation = file_loader(data.validation_file, "validation_file") if data.validation_file else None
    return first_n(train, data.max_train_samples), first_n(evaluation, data.max_eval_samples)


def first_n(dataset, n: int | None):
    return dataset if n is None or dataset is None else dataset.select(range(min(n, len(dataset))))


def check_model_inputs(source: ModelSource) -> ModelLocation | None:
    """Check the starting model folder and the tokenizer before any data is read."""
    if source.tokenizer_name is not None:
        check_tokenizer_source(source.tokenizer_name, "tokenizer_name")
    if source.model_name_or_path is None:
        return None
    return check_model_source(
        source.model_name_or_path, "model_name_or_path", need_tokenizer=source.tokenizer_name is None
    )


def resolve_base_model(location: ModelLocation, output_dir: str, trust_remote_code: bool = False) -> str:
    """A briskbert folder or repo id; another family's checkpoint is converted once into
    ``output_dir/converted_base``."""
    import briskbert.modeling  # noqa: F401  (registers the briskbert config for AutoConfig)
    from briskbert.modeling.conversion import FAMILIES, convert_checkpoint

    convertible = [model_type for family in FAMILIES for model_type in family.model_types]
    source = location.name
    if location.is_local:
        config = json.loads((Path(source) / "config.json").read_text(encoding="utf-8"))
    else:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code).to_dict()
        if config.get("model_type") in convertible:
            from huggingface_hub import snapshot_download

            source = snapshot_download(source)
    model_type = config.get("model_type")
    if model_type == "briskbert":
        return source
    if model_type not in convertible:
        raise SettingError(
            "model_name_or_path",
            f"{location.name} has model_type {model_type!r}; give a briskbert model or a "
            f"checkpoint that is converted first (model_type one of {', '.join(convertible)}).",
        )
    converted = Path(output_dir) / "converted_base"
    if not (converted / "config.json").is_file():
        logger.info("Converting the %s checkpoint %s to briskbert in %s", model_type, source, converted)
        convert_checkpoint(source, converted)
    return str(converted)


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    import briskbert.tokenization  # noqa: F401  (registers BriskBertTokenizer for AutoTokenizer)

    return AutoTokenizer.from_pretrained(name, trust_remote_code=True)


def load_pretrained(model_class, base: str, config, purpose: str = "fine-tuning", output_loading_info=False):
    """``model_class.from_pretrained(base)``; transformers' load report shrinks to one line when it lists only
    the new task head (and the checkpoint's own head or pooler), else it is shown whole."""
    from accelerate import PartialState

    held = []
    report = logging.getLogger("transformers.modeling_utils")

    def hold(record) -> bool:  # keep the report back until it is known whether it says anything unexpected
        if "LOAD REPORT" in str(record.msg):
            held.append(record)
            return False
        return True

    report.addFilter(hold)
    expected = False
    try:
        model, info = model_class.from_pretrained(base, config=config, output_loading_info=True)
        encoder = model.base_model_prefix + "."
        listed = (*info["missing_keys"], *info["unexpected_keys"])
        expected = not info["mismatched_keys"] and not any(
            key.startswith(encoder) and not key.startswith(encoder + "pooler.") for key in listed
        )
    finally:
        report.removeFilter(hold)
        for record in [] if expected else held:  # something else is missing, or the load failed: the table
            report.handle(record)
    if expected and info["missing_keys"] and PartialState().is_main_process:
        new = ", ".join(key for key in model.state_dict() if key in info["missing_keys"])
        print(f"New head ({new}) initialised randomly, as expected for {purpose}.")
    return (model, info) if output_loading_info else model


def check_positions(config, max_seq_length: int) -> None:
    """Learned (absolute) positions stop at ``max_position_embeddings``; the other schemes run past it."""
    limit = config.max_position_embeddings
    if config.position_embedding_type == "absolute" and max_seq_length > limit:
        raise SettingError(
            "max_seq_length",
            f"{max_seq_length} exceeds the model's max_position_embeddings {limit}; lower it.",
        )


def load_starting_model(
    model_class, source: ModelSource, location: ModelLocation | None, output_dir: str, **config_overrides
):
    """``(model, tokenizer)``: ``model_class`` from ``source``'s model with config fields overridden, or fresh
    from ``source.config_preset`` sized to the tokenizer's vocabulary."""
    from briskbert.modeling import BriskBertConfig
    from briskbert.training.engine.checkpointing import check_finite_weights, weights_file

    base = None if location is None else resolve_base_model(location, output_dir, source.trust_remote_code)
    tokenizer = load_tokenizer(source.tokenizer_name or base)
    if base is not None:
        config = BriskBertConfig.from_pretrained(base, **config_overrides)
    else:
        try:
            config = BriskBertConfig.from_preset(
                source.config_preset, vocab_size=len(tokenizer), **config_overrides
            )
        except ValueError as error:  # an unknown preset name
            raise SettingError("config_preset", str(error)) from None
        if tokenizer.pad_token_id is not None:
            config.pad_token_id = tokenizer.pad_token_id
    check_positions(config, source.max_seq_length)
    if base is None:
        return model_class(config), tokenizer
    try:
        model = load_pretrained(model_class, base, config)
    except RuntimeError as error:
        if "mismatched_sizes" not in str(error) and "size mismatch" not in str(error):
            raise
        raise SettingError(
            "model_name_or_path",
            f"{base}: its weights do not fit its config.json (tensor shapes differ, as "
            "when hidden_size or intermediate_size was edited); restore config.json or save the model again.",
        ) from None
    check_finite_weights(model, f"{source.model_name_or_path} ({weights_file(base)})", "model_name_or_path")
    return model, tokenizer


def card_source_facts(source: ModelSource) -> dict:
    return {"base_model": base_model_id(source.model_name_or_path), "config_preset": source.config_preset}


def pad_to_width(tensor, width: int, value: float):
    """Right-pad (rows, positions) to ``width`` positions: ``evaluation_loop`` concatenates rows of one shape."""
    import torch.nn.functional as F

    return F.pad(tensor, (0, width - tensor.shape[1]), value=value)


class FinetuningTask(Task):
    """A job that fine-tunes a starting model on :class:`DataSource` data, checked and read (``load_data``)
    before torch is imported; the card states the starting model, the data and ``details()``."""

    pipeline_tag: str  # the card's task and pipeline tag
    model_class: str  # the briskbert.modeling head

    def __init__(self, model: ModelSource, data: DataSource, settings):
        self.source, self.data_source, self.settings = model, data, settings
        self.location = check_model_inputs(model)
        self.load_data()

    def load_starting_model(self, config, **config_overrides):
        import briskbert.modeling

        head = getattr(briskbert.modeling, self.model_class)
        return load_starting_model(head, self.source, self.location, config.output_dir, **config_overrides)

    def tokenize(self, accelerator, prepare_train, prepare_eval=None, **fn_kwargs) -> None:
        """``train_features`` and ``eval_features``: the splits through batched ``prepare_*`` functions."""

        def features(table, prepare):
            if table is None:
                return None
            return table.map(prepare, batched=True, remove_columns=table.column_names, fn_kwargs=fn_kwargs)

        with accelerator.main_process_first():
            self.train_features = features(self.train, prepare_train)
            self.eval_features = features(self.evaluation, prepare_eval or prepare_train)

    def task_inputs(self, accelerator, model, tokenizer, collator, eval_dataset=None) -> TaskInputs:
        """What ``build`` hands the loop; the data's skip reports are logged and kept for the card."""
        reports = [report for report in self.reports if report]
        if accelerator.is_main_process:
            for report in reports:
                report.log()
        self.skipped = {report.source: report.as_dict() for report in reports if report.counts}
        return TaskInputs(
            model=model,
            train_dataset=self.train_features,
            data_collator=collator,
            tokenizer=tokenizer,
            eval_dataset=self.eval_features if eval_dataset is None else eval_dataset,
        )

    def data_facts(self) -> dict:
        return self.data_source.card_facts()

    def facts(self) -> JobFacts:
        return JobFacts(
            task=self.pipeline_tag,
            pipeline_tag=self.pipeline_tag,
            **card_source_facts(self.source),
            **self.data_facts(),
            details=self.details(),
        )
