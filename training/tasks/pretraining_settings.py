# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""``briskbert pretrain``'s options, each checked once in ``__post_init__``. Imports neither torch nor
transformers."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from briskbert.errors import SettingError
from briskbert.training.data.corpus import PACKING_MODES, CorpusSource, check_corpus_file
from briskbert.training.tasks.settings import MIN_SEQ_LENGTH, check_at_least, helped


@dataclass(frozen=True)
class PretrainingData:
    """Where the corpus comes from and how it becomes sequences."""

    _argument_group_name = "data"

    train_file: str | None = helped(
        "Text (.txt: one paragraph per line, blank line between documents), .jsonl, .csv, .parquet."
    )
    validation_file: str | None = None
    validation_split_percentage: float = helped(
        "Without validation_file: %% of training documents held out for validation.", 5
    )
    text_column: str | None = helped("Column with the text (default: 'text').")
    dataset_name: str | None = helped("A Hub dataset (needs network access).")
    dataset_config_name: str | None = None
    preprocessing_num_workers: int | None = helped("Processes that tokenize the corpus (default: one).")
    data_cache_dir: str | None = helped(
        "Where prepared corpora are cached (default: $BRISKBERT_CACHE/pretraining_data, else "
        "~/.cache/briskbert/pretraining_data)."
    )
    overwrite_cache: bool = helped("Prepare the corpus again even if it is cached.", False)
    streaming: bool = helped(
        "Tokenize the training file on the fly (needs max_train_steps, validation_file and a tokenizer).",
        False,
    )
    max_seq_length: int = 128
    packing_mode: str = helped(
        "full-sentences: concatenate documents into full sequences; doc-sentences: the same without crossing "
        "a document boundary; none: one document per sequence (split when longer).",
        "none",
        choices=PACKING_MODES,
    )
    packing: bool = helped("Same as packing_mode full-sentences.", False)
    nsp: bool = helped("Add next sentence prediction (segment pairs).", False)

    def __post_init__(self):
        if (self.train_file is None) == (self.dataset_name is None):
            raise SettingError("train_file", "or dataset_name: give exactly one.")
        for name in ("train_file", "validation_file"):
            if getattr(self, name) is not None:
                check_corpus_file(getattr(self, name), name)
        if self.packing and self.packing_mode not in ("none", "full-sentences"):
            raise SettingError(
                "packing", f"means packing_mode full-sentences, not {self.packing_mode}: give one."
            )
        if self.packing:
            object.__setattr__(self, "packing_mode", "full-sentences")
        if self.nsp and self.packing_mode != "none":
            raise SettingError(
                "nsp",
                "builds its own [CLS] A [SEP] B [SEP] pairs; it cannot be combined with "
                + ("packing." if self.packing else f"packing_mode {self.packing_mode}."),
            )
        if self.streaming and (self.nsp or self.validation_file is None or self.train_file is None):
            raise SettingError(
                "streaming", "reads a train_file with a validation_file, for MLM only (without nsp)."
            )
        check_at_least(self, MIN_SEQ_LENGTH, "max_seq_length")
        check_at_least(self, 1, "preprocessing_num_workers")
        if self.validation is None and not 0 < self.validation_split_percentage < 100:
            raise SettingError(
                "validation_split_percentage", f"must be in (0, 100), got {self.validation_split_percentage}."
            )

    @property
    def train(self) -> CorpusSource:
        return self._source(self.train_file, "train")

    @property
    def validation(self) -> CorpusSource | None:
        """The validation corpus; None: hold out validation_split_percentage of the training documents."""
        if self.validation_file or self.dataset_name:
            return self._source(self.validation_file, "validation")
        return None

    def _source(self, path: str | None, split: str) -> CorpusSource:
        if path:
            return CorpusSource(path=path, text_column=self.text_column)
        return CorpusSource(
            text_column=self.text_column,
            dataset_name=self.dataset_name,
            dataset_config_name=self.dataset_config_name,
            split=split,
        )


MAX_VOCAB_SIZE = 1 << 20  # the largest vocabularies in use have about 256k entries


@dataclass(frozen=True)
class PretrainingModel:
    """The model to build or to continue, its tokenizer, and its card's language and license."""

    _argument_group_name = "model and tokenizer"

    config_name: str | None = helped("A preset name (e.g. bert-small) or a config JSON.")
    config_overrides: str | None = helped(
        "Override config fields, e.g. 'num_hidden_layers=4,hidden_dropout_prob=0.0'."
    )
    model_name_or_path: str | None = helped("Continue pretraining this model.")
    keep_source_class: bool = helped(
        "Continue model_name_or_path with its own class (e.g. BertForMaskedLM), not converted to briskbert.",
        False,
    )
    tokenizer_name: str | None = helped("A tokenizer folder (default: train one).")
    vocab_size: int | None = helped(
        "Train a WordPiece tokenizer of this size (default 30522) in output_dir/tokenizer, reused on resume."
    )
    tokenizer_train_max_lines: int | None = helped(
        "Train the tokenizer on a seeded sample of this many paragraphs."
    )
    language: str = helped("The model card's language.", "en")
    license: str = helped("The model card's license.", "apache-2.0")

    def __post_init__(self):
        if self.model_name_or_path and (self.config_name or self.config_overrides):
            raise SettingError(
                "model_name_or_path", "continues an existing model: drop config_name/config_overrides."
            )
        if self.keep_source_class and not self.model_name_or_path:
            raise SettingError("keep_source_class", "applies to a model_name_or_path to continue: give one.")
        if not self.model_name_or_path and not self.config_name:
            raise SettingError(
                "config_name",
                "is missing: give a preset such as bert-small or a config JSON (or model_name_or_path).",
            )
        if self.vocab_size is not None and (self.tokenizer_name or self.model_name_or_path):
            raise SettingError(
                "vocab_size",
                "trains a new tokenizer; it cannot be combined with tokenizer_name or model_name_or_path "
                "(whose tokenizer is used).",
            )
        if self.vocab_size is not None and not 5 < self.vocab_size <= MAX_VOCAB_SIZE:
            raise SettingError(
                "vocab_size",
                f"must be above the 5 special tokens and at most {MAX_VOCAB_SIZE:,} (BERT uses 30,522), "
                f"got {self.vocab_size:,}.",
            )
        check_at_least(self, 1, "tokenizer_train_max_lines")


@dataclass(frozen=True)
class MaskingSettings:
    """Which tokens masked-language modelling hides, and how."""

    _argument_group_name = "objective"

    mlm_probability: float = 0.15
    mask_replace_prob: float = helped("Of masked tokens: share set to [MASK].", 0.8)
    random_replace_prob: float = helped("Of masked tokens: share made random.", 0.1)
    whole_word_mask: bool = False
    eval_mask_seed: int = helped("Fixed masking of the validation set.", 1234)

    def __post_init__(self):
        if not 0 < self.mlm_probability < 1:
            raise SettingError("mlm_probability", f"must be in (0, 1), got {self.mlm_probability}.")
        if min(self.mask_replace_prob, self.random_replace_prob) < 0 or (
            self.mask_replace_prob + self.random_replace_prob > 1
        ):
            raise SettingError(
                "mask_replace_prob",
                f"{self.mask_replace_prob} + random_replace_prob {self.random_replace_prob} must be within "
                "[0, 1] (the rest stays unchanged).",
            )

    def collator_arguments(self) -> dict:
        return {name: value for name, value in asdict(self).items() if name != "eval_mask_seed"}


@dataclass(frozen=True)
class PretrainingSettings:
    """A pretraining job: data, model and masking."""

    data: PretrainingData
    model: PretrainingModel
    masking: MaskingSettings = field(default_factory=MaskingSettings)

    def __post_init__(self):
        if self.data.streaming and not (self.model.tokenizer_name or self.model.model_name_or_path):
            raise SettingError(
                "streaming", "needs an existing tokenizer (tokenizer_name or model_name_or_path)."
            )


def parse_config_overrides(text: str | None) -> dict:
    """'a=1,b=0.1,c=rope,d=true' -> {'a': 1, 'b': 0.1, 'c': 'rope', 'd': True}."""
    overrides = {}
    for item in filter(str.strip, (text or "").split(",")):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals:
            raise SettingError("config_overrides", f"item {item!r} is not key=value.")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides
