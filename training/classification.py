# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Sequence classification and regression: label inference and validation, tokenisation, evaluation.

:func:`infer_label_spec` looks at the training labels once and decides the task:

* lists of label names or 0/1 vectors -> ``multi_label_classification`` (strings such as ``"a,b"`` are
  split on ``label_separator`` when that problem type is asked for);
* non-integral numbers -> ``regression`` (``num_labels=1``);
* integers or strings -> ``single_label_classification``; string labels are sorted into ids, integer
  labels that already are ``0..K-1`` keep their values; ``id2label``/``label2id`` are saved in the config.

A column mixing numbers and text, evaluation labels never seen in training, and regression on
non-numeric labels raise a :class:`~training.task_data.DataError` naming the values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .metrics import classification_metrics
from .task_data import DataError, SkipReport

PROBLEM_TYPES = ("single_label_classification", "regression", "multi_label_classification")


def _parse_number(value):
    """``int``/``float`` for numeric values and numeric strings, else ``None``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return value.item() if hasattr(value, "item") else value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return None
    return None


def _is_missing(value) -> bool:
    return (
        value is None
        or (isinstance(value, str) and not value.strip())
        or (isinstance(value, float) and np.isnan(value))
    )


@dataclass
class LabelSpec:
    """How labels are turned into model targets, and what goes into the config."""

    problem_type: str
    label_list: list[str] = field(default_factory=list)  # names in id order (empty for regression)
    multi_hot: bool = False  # multi-label given as 0/1 vectors rather than names
    label_separator: str = ","

    @property
    def num_labels(self) -> int:
        return 1 if self.problem_type == "regression" else len(self.label_list)

    @property
    def label2id(self) -> dict:
        return {name: i for i, name in enumerate(self.label_list)} if self.label_list else {"LABEL_0": 0}

    @property
    def id2label(self) -> dict:
        return {i: name for name, i in self.label2id.items()}

    def _names(self, value) -> list:
        if isinstance(value, str):
            return [part.strip() for part in value.split(self.label_separator) if part.strip()]
        return list(value)

    def encode(self, value):
        """Model target of one raw label (``int`` id, ``float`` or a float multi-hot vector)."""
        if self.problem_type == "regression":
            return float(_parse_number(value))
        if self.problem_type == "multi_label_classification":
            if self.multi_hot:
                return [float(v) for v in value]
            vector = [0.0] * len(self.label_list)
            for name in self._names(value):
                vector[self.label2id[str(name)]] = 1.0
            return vector
        return self.label2id[_label_name(value)]

    def config_kwargs(self) -> dict:
        kwargs = {"num_labels": self.num_labels, "problem_type": self.problem_type}
        if self.problem_type != "regression":
            kwargs["id2label"] = self.id2label
            kwargs["label2id"] = self.label2id
        return kwargs


def _label_name(value) -> str:
    number = _parse_number(value)
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    return str(number) if number is not None else str(value).strip()


def _label_kinds(values, source: str) -> str:
    """``"list"``, ``"int"``, ``"float"`` or ``"str"``; raises on a column that mixes numbers and text."""
    kinds, examples = {}, {}
    for row, value in enumerate(values):
        if isinstance(value, (list, tuple)):
            kind = "list"
        else:
            number = _parse_number(value)
            if number is None:
                kind = "str"
            elif isinstance(number, float) and not number.is_integer():
                kind = "float"
            else:
                kind = "int"
        kinds[kind] = kinds.get(kind, 0) + 1
        examples.setdefault(kind, (row, value))
    if "list" in kinds and len(kinds) > 1 or "str" in kinds and len(kinds) > 1:
        described = "; ".join(
            f"{kind}: {count} rows, e.g. row {examples[kind][0]} = {examples[kind][1]!r}"
            for kind, count in kinds.items()
        )
        raise DataError(
            f"{source}: the label column mixes types ({described}). Use one kind of label throughout: "
            "class names or integer ids (classification), numbers (regression), or lists (multi-label)."
        )
    if "list" in kinds:
        return "list"
    if "float" in kinds:
        return "float"
    return next(iter(kinds))


def infer_label_spec(
    train_labels,
    eval_labels=None,
    problem_type: str | None = None,
    label_separator: str = ",",
    source: str = "training data",
    label_list: list[str] | None = None,
) -> LabelSpec:
    """Decide the problem type and the label set from the (non-missing) training labels.

    ``label_list`` fixes the names and their ids (e.g. a teacher's ``id2label`` when distilling); then
    training and evaluation labels outside it are an error."""
    if problem_type is not None and problem_type not in PROBLEM_TYPES:
        raise ValueError(f"--problem_type {problem_type!r} is not one of {PROBLEM_TYPES}.")
    if not train_labels:
        raise DataError(f"{source} has no labelled rows.")
    kind = _label_kinds(train_labels, source)
    if eval_labels:
        eval_kind = _label_kinds(eval_labels, "evaluation data")
        if {kind, eval_kind} not in ({"int"}, {"float"}, {"str"}, {"list"}, {"int", "float"}):
            raise DataError(
                f"training labels are {kind} values but evaluation labels are {eval_kind} values; they must agree."
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
    if problem_type == "multi_label_classification":
        spec = LabelSpec(problem_type, label_separator=label_separator)
        first = train_labels[0]
        if (
            kind == "list"
            and all(_parse_number(v) in (0, 1) for v in first)
            and all(isinstance(v, (int, float, bool)) for v in first)
        ):
            width = len(first)
            for row, value in enumerate(list(train_labels) + list(eval_labels or [])):
                if len(value) != width:
                    raise DataError(
                        f"multi-hot label of row {row} has {len(value)} entries, expected {width}."
                    )
            spec.multi_hot = True
            spec.label_list = [f"LABEL_{i}" for i in range(width)]
            return spec
        names = sorted({str(n) for value in train_labels for n in spec._names(value)})
        spec.label_list = names
        _check_unseen({str(n) for value in (eval_labels or []) for n in spec._names(value)}, names)
        return spec
    if kind == "float":
        raise DataError(
            f"{source}: single-label classification needs class names or integer ids, got fractional numbers "
            f"such as {next(v for v in train_labels if _label_kinds([v], source) == 'float')!r}; "
            "pass --problem_type regression for a numeric target."
        )
    if kind == "list":
        raise DataError(
            f"{source}: single-label classification got list labels; pass --problem_type multi_label_classification."
        )
    names = sorted({_label_name(v) for v in train_labels})
    if kind == "int":
        numbers = sorted({int(n) for n in names})
        names = [str(n) for n in numbers]  # numeric order ("10" after "9"); 0..K-1 keep their values
    if label_list is not None:
        _check_unseen(set(names), list(label_list), "training")
        names = list(label_list)
    _check_unseen({_label_name(v) for v in (eval_labels or [])}, names)
    return LabelSpec(problem_type, label_list=names)


def _check_unseen(eval_names: set, train_names: list, what: str = "evaluation") -> None:
    unseen = sorted(eval_names - set(train_names))
    if unseen:
        known = "the model's labels" if what == "training" else "training labels"
        raise DataError(
            f"the {what} data has labels never seen in {'the model' if what == 'training' else 'training'}: "
            f"{unseen[:10]}{' ...' if len(unseen) > 10 else ''}. Known ({known}): {train_names[:20]}. The model "
            "cannot predict them; fix the label names or remove those rows."
        )


def drop_incomplete_rows(dataset, columns: list[str], source: str):
    """Remove rows where any of ``columns`` is missing or blank; return ``(dataset, SkipReport)``."""
    report = SkipReport(source=source, total=len(dataset))
    keep = []
    values = {column: dataset[column] for column in columns}
    for row in range(len(dataset)):
        missing = [column for column in columns if _is_missing(values[column][row])]
        if missing:
            report.add("rows_skipped_missing_value", f"row {row}: empty {missing}")
        else:
            keep.append(row)
    if len(keep) < len(dataset):
        dataset = dataset.select(keep)
    return dataset, report


def make_preprocess_function(
    tokenizer,
    spec: LabelSpec,
    text_column: str,
    text_pair_column: str | None,
    label_column: str | None,
    max_seq_length: int,
):
    """Batched ``datasets.map`` function: tokenised (pairs of) texts plus ``labels``."""

    def preprocess(batch):
        texts = [str(t) for t in batch[text_column]]
        pairs = [str(t) for t in batch[text_pair_column]] if text_pair_column else None
        encoded = tokenizer(texts, pairs, truncation=True, max_length=max_seq_length)
        if label_column is not None:
            encoded["labels"] = [spec.encode(value) for value in batch[label_column]]
        return encoded

    return preprocess


@dataclass
class ClassificationEvaluator:
    """Metrics of gathered logits and labels for the spec's problem type."""

    problem_type: str

    def __call__(self, logits, labels) -> dict:
        return classification_metrics(np.asarray(logits), np.asarray(labels), self.problem_type)


# --------------------------------------------------------------------------------------------------
# Script pieces shared by finetune_classification.py and distill.py
# --------------------------------------------------------------------------------------------------

METRIC_DEFINITIONS = {
    "single_label_classification": "accuracy; macro F1 (unweighted mean of per-class F1); Matthews correlation "
    "(multi-class form)",
    "regression": "Pearson and Spearman (tie-averaged ranks) correlation; mean squared error",
    "multi_label_classification": "subset accuracy; micro F1 and macro F1 over labels (sigmoid > 0.5)",
}


def add_classification_arguments(parser):
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
    return parser


@dataclass
class ClassificationData:
    train: object
    evaluation: object | None
    spec: LabelSpec
    reports: list


def load_classification_data(args, label_list: list[str] | None = None) -> ClassificationData:
    """Training/evaluation tables from the script's flags, validated, with the label spec decided."""
    from .finetuning import first_n, load_splits
    from .task_data import require_columns, require_rows

    train, evaluation = load_splits(args)
    require_rows(train, "the training data")
    if args.text_column is None:
        args.text_column = next((c for c in ("sentence", "text") if c in train.column_names), None)
        if args.text_column is None:
            raise DataError(
                f"the training data has no 'sentence' or 'text' column; pass --text_column "
                f"(columns: {train.column_names})."
            )
    columns = {
        "--text_column": args.text_column,
        "--text_pair_column": args.text_pair_column,
        "--label_column": args.label_column,
    }
    needed = [c for c in columns.values() if c is not None]
    require_columns(train, columns, "the training data")
    train, train_report = drop_incomplete_rows(
        first_n(train, args.max_train_samples), needed, "training data"
    )
    require_rows(train, "the training data (after skipping rows with empty values)")
    eval_report = None
    if evaluation is not None:
        require_rows(evaluation, "the evaluation data")
        require_columns(evaluation, columns, "the evaluation data")
        evaluation, eval_report = drop_incomplete_rows(
            first_n(evaluation, args.max_eval_samples), needed, "evaluation data"
        )
        require_rows(evaluation, "the evaluation data (after skipping rows with empty values)")
    spec = infer_label_spec(
        train[args.label_column],
        evaluation[args.label_column] if evaluation else None,
        args.problem_type,
        args.label_separator,
        label_list=label_list,
    )
    return ClassificationData(train, evaluation, spec, [train_report, eval_report])


def tokenize_classification(data: ClassificationData, tokenizer, args, accelerator):
    """``(train_features, eval_features or None)`` ready for the loop's collator."""
    preprocess = make_preprocess_function(
        tokenizer, data.spec, args.text_column, args.text_pair_column, args.label_column, args.max_seq_length
    )
    with accelerator.main_process_first():
        train = data.train.map(
            preprocess, batched=True, remove_columns=data.train.column_names, desc="tokenizing train"
        )
        evaluation = (
            None
            if data.evaluation is None
            else data.evaluation.map(
                preprocess, batched=True, remove_columns=data.evaluation.column_names, desc="tokenizing eval"
            )
        )
    return train, evaluation


def make_evaluate_fn(spec: LabelSpec):
    """``evaluate_fn`` for :func:`training.loop.run`: gathered logits and labels -> metrics."""
    from .loop import evaluation_loop

    evaluator = ClassificationEvaluator(spec.problem_type)

    def evaluate(model, dataloader, accelerator):
        gathered = evaluation_loop(
            model,
            dataloader,
            accelerator,
            lambda batch, outputs: {"logits": outputs.logits, "labels": batch["labels"]},
        )
        labels = gathered["labels"].numpy()
        if spec.problem_type == "single_label_classification":
            labels = labels.astype(int)
        return evaluator(gathered["logits"].numpy(), labels)

    return evaluate


def classification_card_facts(args, data: ClassificationData, train_features, eval_features, skipped) -> dict:
    import os

    spec = data.spec
    return {
        "task": "text-classification",
        "pipeline_tag": "text-classification",
        "problem_type": spec.problem_type,
        "labels": spec.label_list if spec.problem_type != "regression" else None,
        "datasets": [args.dataset_name or os.path.basename(args.train_file)],
        "eval_dataset": (args.dataset_name + ":" + args.validation_split)
        if args.dataset_name
        else (os.path.basename(args.validation_file) if args.validation_file else None),
        "text_columns": [c for c in (args.text_column, args.text_pair_column) if c],
        "num_train_examples": len(train_features),
        "num_eval_examples": len(eval_features) if eval_features is not None else 0,
        "metric_definitions": METRIC_DEFINITIONS[spec.problem_type],
        "data_skipped": skipped,
    }
