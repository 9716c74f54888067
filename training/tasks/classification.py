"""Sequence classification, regression and multi-label classification: the labels decide the problem type
(lists are multi-label, fractional numbers regression, integers or text single-label) unless it is given."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from briskbert.training.data.task_data import (
    DataError,
    SkipReport,
    require_columns,
    require_rows,
    separator_hint,
)
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.engine.task import TaskInputs
from briskbert.training.tasks.finetuning import FinetuningTask, load_splits
from briskbert.training.tasks.metrics import classification_metrics, not_learned

logger = logging.getLogger(__name__)


def _parse_number(value):
    """``int``/``float`` for numeric values and numeric strings, else ``None``."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return value.item() if hasattr(value, "item") else value
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value.strip())
            except ValueError:
                pass
    return None


def _is_missing(value) -> bool:
    return (
        value is None
        or (isinstance(value, str) and not value.strip())
        or (isinstance(value, float) and np.isnan(value))
    )


def _label_name(value) -> str:
    number = _parse_number(value)
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    return str(number) if number is not None else str(value).strip()


def _label_names(value, separator: str) -> list:
    """The names of one multi-label label: a list, or a string of names joined by ``separator``."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(separator) if part.strip()]
    return list(value)


def _label_kind(value) -> str:
    if isinstance(value, (list, tuple)):
        return "list"
    number = _parse_number(value)
    if number is None:
        return "str"
    return "float" if isinstance(number, float) and not number.is_integer() else "int"


@dataclass
class LabelSpec:
    """How raw labels become model targets, and the label fields of the model's config."""

    problem_type: str
    label_list: list[str] = field(default_factory=list)  # names in id order (empty for regression)
    multi_hot: bool = False  # multi-label given as 0/1 vectors rather than names
    ids_given: bool = False  # integer labels are ids into label_list, not names
    label_separator: str = ","

    def __post_init__(self):
        self.num_labels = 1 if self.problem_type == "regression" else len(self.label_list)
        self.label2id = {name: i for i, name in enumerate(self.label_list)}
        self.id2label = dict(enumerate(self.label_list))

    def encode(self, value):
        """Model target of one raw label (``int`` id, ``float`` or a float multi-hot vector)."""
        if self.problem_type == "regression":
            return float(_parse_number(value))
        if self.problem_type == "single_label_classification":
            return int(_label_name(value)) if self.ids_given else self.label2id[_label_name(value)]
        if self.multi_hot:
            return [float(v) for v in value]
        vector = [0.0] * len(self.label_list)
        for name in _label_names(value, self.label_separator):
            vector[self.label2id[str(name)]] = 1.0
        return vector


def _label_kinds(values, source: str) -> str:
    """``"list"``, ``"int"``, ``"float"`` or ``"str"``; raises on a column that mixes numbers and text."""
    kinds = Counter(_label_kind(value) for value in values)
    if len(kinds) > 1 and ("list" in kinds or "str" in kinds):
        examples = {}
        for row, value in enumerate(values):
            examples.setdefault(_label_kind(value), f"row {row} = {value!r}")
        described = "; ".join(f"{kind}: {count} rows, e.g. {examples[kind]}" for kind, count in kinds.items())
        raise DataError(
            f"{source}: the label column mixes types ({described}). Use one kind of label throughout: "
            "class names or integer ids (classification), numbers (regression), or lists (multi-label)."
        )
    return "float" if "float" in kinds else next(iter(kinds))


def infer_label_spec(
    train_labels,
    eval_labels=None,
    problem_type: str | None = None,
    label_separator: str = ",",
    source: str = "the training data",
    label_names: list[str] | None = None,
    names_source: str = "label_names",
    eval_source: str = "the evaluation data",
    every_name_seen: bool = True,
) -> LabelSpec:
    """The problem type and label set of the (non-missing) training labels. ``label_names`` (the setting, or a
    teacher's, described by ``names_source``) fixes names and ids: integer labels 0..K-1 index it, text labels
    must be among it, and (``every_name_seen``) each name must be found in the data. Without it, labels are
    sorted (integers by value)."""
    kind = _label_kinds(train_labels, source)
    if eval_labels:
        eval_kind = _label_kinds(eval_labels, eval_source)
        if kind != eval_kind and {kind, eval_kind} != {"int", "float"}:
            raise DataError(
                f"{source} has {kind} labels but {eval_source} has {eval_kind} labels; they must agree."
            )
    if problem_type is None:
        problem_type = {"list": "multi_label_classification", "float": "regression"}.get(
            kind, "single_label_classification"
        )
    if problem_type == "regression":
        if kind not in ("int", "float"):
            raise DataError(
                f"{source}: regression needs numeric labels, got {kind} values such as {train_labels[0]!r}."
            )
        return LabelSpec("regression")
    multi = problem_type == "multi_label_classification"
    if not multi and kind in ("float", "list"):
        fix = "regression for a numeric target" if kind == "float" else "multi_label_classification"
        example = next(value for value in train_labels if _label_kind(value) == kind)
        raise DataError(
            f"{source}: single-label classification needs class names or integer ids, got {example!r}; "
            f"set problem_type {fix}."
        )
    if (
        multi
        and kind == "list"
        and all(isinstance(v, (int, float, bool)) and v in (0, 1) for v in train_labels[0])
    ):
        return _multi_hot_spec(train_labels, eval_labels, label_names, names_source)

    def found_in(labels) -> set[str]:
        if multi:
            return {str(name) for value in labels or [] for name in _label_names(value, label_separator)}
        return {_label_name(value) for value in labels or []}

    train_found, eval_found = found_in(train_labels), found_in(eval_labels)
    found = train_found | eval_found
    where = f"{source} and {eval_source}" if eval_labels else source
    # Fixed names: integer labels index them (unless they are the names themselves, as a teacher trained
    # on integer labels records them); text labels must be names.
    if label_names is not None and not multi and kind == "int" and not train_found <= set(label_names):
        ids = sorted(int(label) for label in found)
        every_id = set(ids) == set(range(len(label_names)))
        if not every_id and (every_name_seen or not set(ids) <= set(range(len(label_names)))):
            raise DataError(
                f"{names_source} gives {len(label_names)} names (label ids 0..{len(label_names) - 1}) but the "
                f"labels found in {where} are {ids[:20]}; give one name per label found, in id order."
            )
        return LabelSpec(problem_type, list(label_names), ids_given=True, label_separator=label_separator)
    # A label outside the given names is refused; without names, an evaluation label with no training example
    # is warned of (the model cannot learn it).
    known = train_found if label_names is None else set(label_names)
    for labels, place in ((train_found, source), (eval_found, eval_source)):
        if unseen := sorted(labels - known):
            listed = f"{unseen[:10]}{' ...' if len(unseen) > 10 else ''}"
            if label_names is None:
                logger.warning(
                    f"{place} has labels with no training example: {listed}; the model cannot learn them."
                )
                continue
            raise DataError(
                f"{place} has labels never seen in {names_source}: {listed}. Known ({names_source}): "
                f"{list(label_names)[:20]}. The model cannot predict them; fix the label names or remove those rows."
            )
    if label_names is None:
        return LabelSpec(
            problem_type, sorted(found, key=int if kind == "int" else None), label_separator=label_separator
        )
    # A name no row has would be a class the model never learns (or misname the others): refused.
    if every_name_seen and (missing := [name for name in label_names if name not in found]):
        raise DataError(
            f"{names_source} names {missing}, a label no row of {where} has (labels found: {sorted(found)[:20]}); "
            "give exactly the labels found, in the id order you want."
        )
    return LabelSpec(problem_type, list(label_names), label_separator=label_separator)


def _multi_hot_spec(train_labels, eval_labels, label_names, names_source: str) -> LabelSpec:
    width = len(train_labels[0])
    for row, value in enumerate([*train_labels, *(eval_labels or [])]):
        if len(value) != width:
            raise DataError(f"multi-hot label of row {row} has {len(value)} entries, expected {width}.")
    if label_names is not None and len(label_names) != width:
        raise DataError(
            f"{names_source} gives {len(label_names)} names for multi-hot labels of {width} entries."
        )
    names = list(label_names) if label_names is not None else [f"LABEL_{i}" for i in range(width)]
    return LabelSpec("multi_label_classification", names, multi_hot=True)


def drop_incomplete_rows(dataset, columns: list[str], source: str):
    """Remove rows where any of ``columns`` is missing or blank; return ``(dataset, SkipReport)``."""
    report = SkipReport(source=source, total=len(dataset))
    keep = []
    values = {column: dataset[column] for column in columns}
    for row in range(len(dataset)):
        if missing := [column for column in columns if _is_missing(values[column][row])]:
            report.add("rows_skipped_missing_value", f"row {row}: empty {missing}")
        else:
            keep.append(row)
    return (dataset.select(keep) if len(keep) < len(dataset) else dataset), report


def refuse_non_finite_labels(labels, source: str) -> None:
    """A NaN or infinite label (every loss would be NaN) is refused, naming its row; missing ones are not."""
    for row, value in enumerate(labels):
        number = None if isinstance(value, float) and np.isnan(value) else _parse_number(value)
        if isinstance(number, float) and not np.isfinite(number):
            raise DataError(
                f"{source}: row {row} has the label {value!r}, not a finite number; fix or remove that row."
            )


class ClassificationTask(FinetuningTask):
    """``briskbert finetune-classification``: single- or multi-label classification or regression of texts."""

    pipeline_tag = "text-classification"
    model_class = "BriskBertForSequenceClassification"

    def load_data(self, label_names: list[str] | None = None, names_source: str = "label_names") -> None:
        """The tables, validated, and the label spec; ``label_names``: a teacher's, when distilling."""
        data, settings = self.data_source, self.settings
        train, evaluation = load_splits(data)
        train_name, eval_name = data.describe("train"), data.describe("validation")
        self.text_column = settings.text_column or next(
            (c for c in ("sentence", "text") if c in train.column_names), None
        )
        if self.text_column is None:
            raise DataError(
                f"{train_name} has no 'sentence' or 'text' column; set text_column (columns: {train.column_names}). "
                + separator_hint(train.column_names)
            )
        columns = {
            "text_column": self.text_column,
            "text_pair_column": settings.text_pair_column,
            "label_column": settings.label_column,
        }

        def checked(table, name: str):  # -> (table, SkipReport): rows with a missing value skipped
            require_rows(table, name)
            require_columns(table, columns, name)
            if settings.problem_type in (None, "regression"):  # a number can be a regression target
                refuse_non_finite_labels(table[settings.label_column], name)
            table, report = drop_incomplete_rows(table, [c for c in columns.values() if c], name)
            require_rows(table, f"{name} (after skipping rows with empty values)")
            return table, report

        self.train, train_report = checked(train, train_name)
        self.evaluation, eval_report = (None, None) if evaluation is None else checked(evaluation, eval_name)
        self.reports = [train_report, eval_report]
        self.spec = infer_label_spec(
            self.train[settings.label_column],
            self.evaluation[settings.label_column] if self.evaluation else None,
            settings.problem_type,
            settings.label_separator,
            source=train_name,
            label_names=label_names or settings.label_names,
            names_source=names_source,
            eval_source=eval_name,
            every_name_seen=label_names is None,  # a teacher's labels may include classes this data lacks
        )

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        from transformers import DataCollatorWithPadding

        spec, settings = self.spec, self.settings
        accelerator.print(f"Task: {spec.problem_type}, {spec.num_labels} label(s) {spec.label_list[:10]}")
        model, tokenizer = self.make_model(accelerator, config)

        def preprocess(batch):
            pairs = [str(t) for t in batch[settings.text_pair_column]] if settings.text_pair_column else None
            texts = [str(t) for t in batch[self.text_column]]
            encoded = tokenizer(texts, pairs, truncation=True, max_length=self.source.max_seq_length)
            encoded["labels"] = [spec.encode(value) for value in batch[settings.label_column]]
            return encoded

        self.tokenize(accelerator, preprocess)
        return self.task_inputs(accelerator, model, tokenizer, DataCollatorWithPadding(tokenizer))

    def make_model(self, accelerator, config: TrainingConfig):
        spec = self.spec
        labels = (
            {}
            if spec.problem_type == "regression"
            else {"id2label": spec.id2label, "label2id": spec.label2id}
        )
        return self.load_starting_model(
            config, num_labels=spec.num_labels, problem_type=spec.problem_type, **labels
        )

    def evaluate(self, model, dataloader, accelerator) -> dict:
        from briskbert.training.engine.evaluation import evaluation_loop, majority_class, not_above_baseline

        spec = self.spec

        def gather(batch, outputs):
            return {"logits": outputs.logits, "labels": batch["labels"]}

        gathered = evaluation_loop(model, dataloader, accelerator, gather)
        labels, logits = gathered["labels"].numpy(), gathered["logits"].numpy()
        metrics = classification_metrics(logits, labels, spec.problem_type)
        if spec.problem_type != "single_label_classification":
            return metrics
        predicted = [spec.id2label[i] for i in logits.argmax(-1)]
        references = [spec.id2label[int(i)] for i in labels]
        majority, metrics["majority_accuracy"] = majority_class(references)
        self.verdict = not_learned(predicted, references) or not_above_baseline(
            "eval_accuracy",
            metrics["accuracy"],
            metrics["majority_accuracy"],
            f"answering {majority} for every example",
        )
        return metrics

    def details(self) -> dict:
        spec = self.spec
        return {
            "problem_type": spec.problem_type,
            "labels": spec.label_list if spec.problem_type != "regression" else None,
            "text_columns": [c for c in (self.text_column, self.settings.text_pair_column) if c],
            "num_train_examples": len(self.train_features),
            "num_eval_examples": len(self.eval_features) if self.eval_features is not None else 0,
            "data_skipped": self.skipped,
        }
