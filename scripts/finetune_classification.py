# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for sequence classification, regression or multi-label classification.

    python scripts/finetune_classification.py \
        --model_name_or_path path/to/briskbert-or-bert --train_file data/sst2_train_excerpt.tsv \
        --validation_file data/sst2_validation_excerpt.tsv --text_column sentence --label_column label \
        --output_dir runs/sst2 --num_train_epochs 1 --metric_for_best_model accuracy

Data: CSV, TSV or JSON lines files, or ``--dataset_name``; one text column or a pair
(``--text_pair_column``). The task is inferred from the labels (see ``training.classification``) or set
with ``--problem_type``. Metrics: accuracy, macro F1 and Matthews correlation; Pearson, Spearman and MSE
for regression; subset accuracy and micro/macro F1 for multi-label.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transformers import DataCollatorWithPadding  # noqa: E402

from training.classification import (  # noqa: E402
    PROBLEM_TYPES,
    ClassificationEvaluator,
    drop_incomplete_rows,
    infer_label_spec,
    make_preprocess_function,
)
from training.finetuning import (  # noqa: E402
    add_data_arguments,
    add_model_arguments,
    card_source_facts,
    check_source_arguments,
    first_n,
    load_model,
    load_splits,
    load_tokenizer,
    report_skips,
    resolve_base_model,
)
from training.loop import add_training_arguments, create_accelerator, evaluation_loop, run, seed_everything  # noqa: E402
from training.task_data import require_columns, require_rows  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    add_data_arguments(parser, "CSV, TSV or JSON lines file with a header / keys.")
    g = parser.add_argument_group("task")
    g.add_argument("--text_column", type=str, default=None,
                   help="Column with the text (default: 'sentence' or 'text', whichever exists).")
    g.add_argument("--text_pair_column", type=str, default=None, help="Second text of a pair task.")
    g.add_argument("--label_column", type=str, default="label")
    g.add_argument("--problem_type", type=str, default=None, choices=PROBLEM_TYPES,
                   help="Default: inferred from the labels.")
    g.add_argument("--label_separator", type=str, default=",",
                   help="Multi-label labels given as one string are split on this.")
    add_training_arguments(parser)
    args = parser.parse_args(argv)
    check_source_arguments(args)
    return args


def main(argv=None):
    args = parse_args(argv)
    accelerator = create_accelerator(args)
    seed_everything(args.seed)

    train, evaluation = load_splits(args)
    require_rows(train, "the training data")
    if args.text_column is None:
        args.text_column = next((c for c in ("sentence", "text") if c in train.column_names), None)
        if args.text_column is None:
            raise ValueError(f"no 'sentence' or 'text' column; pass --text_column (columns: {train.column_names}).")
    columns = {"--text_column": args.text_column, "--text_pair_column": args.text_pair_column,
               "--label_column": args.label_column}
    needed = [c for c in columns.values() if c is not None]
    require_columns(train, columns, "the training data")
    train, train_report = drop_incomplete_rows(first_n(train, args.max_train_samples), needed, "training data")
    require_rows(train, "the training data (after skipping rows with empty values)")
    eval_report = None
    if evaluation is not None:
        require_columns(evaluation, columns, "the evaluation data")
        evaluation, eval_report = drop_incomplete_rows(first_n(evaluation, args.max_eval_samples), needed,
                                                       "evaluation data")
        require_rows(evaluation, "the evaluation data (after skipping rows with empty values)")
    spec = infer_label_spec(train[args.label_column], evaluation[args.label_column] if evaluation else None,
                            args.problem_type, args.label_separator)
    accelerator.print(f"Task: {spec.problem_type}, {spec.num_labels} label(s) {spec.label_list[:10]}")

    base = resolve_base_model(args) if args.model_name_or_path else None
    tokenizer = load_tokenizer(args, base)
    model = load_model(_model_class(), args, base, tokenizer, **spec.config_kwargs())

    preprocess = make_preprocess_function(tokenizer, spec, args.text_column, args.text_pair_column,
                                          args.label_column, args.max_seq_length)
    with accelerator.main_process_first():
        train_features = train.map(preprocess, batched=True, remove_columns=train.column_names,
                                   desc="tokenizing train")
        eval_features = None if evaluation is None else evaluation.map(
            preprocess, batched=True, remove_columns=evaluation.column_names, desc="tokenizing eval")

    evaluator = ClassificationEvaluator(spec.problem_type)

    def evaluate(model, dataloader, accelerator):
        gathered = evaluation_loop(model, dataloader, accelerator,
                                   lambda batch, outputs: {"logits": outputs.logits, "labels": batch["labels"]})
        labels = gathered["labels"].numpy()
        if spec.problem_type == "single_label_classification":
            labels = labels.astype(int)
        return evaluator(gathered["logits"].numpy(), labels)

    skipped = report_skips(accelerator, train_report, eval_report)
    card = {
        **card_source_facts(args, base),
        "task": "text-classification",
        "pipeline_tag": "text-classification",
        "problem_type": spec.problem_type,
        "labels": spec.label_list if spec.problem_type != "regression" else None,
        "datasets": [args.dataset_name or os.path.basename(args.train_file)],
        "eval_dataset": (args.dataset_name + ":" + args.validation_split) if args.dataset_name
        else (os.path.basename(args.validation_file) if args.validation_file else None),
        "num_train_examples": len(train_features),
        "num_eval_examples": len(eval_features) if eval_features is not None else 0,
        "metric_definitions": _METRIC_DEFINITIONS[spec.problem_type],
        "data_skipped": skipped,
    }
    return run(args, accelerator=accelerator, model=model, tokenizer=tokenizer, train_dataset=train_features,
               data_collator=DataCollatorWithPadding(tokenizer), eval_dataset=eval_features,
               evaluate_fn=evaluate if eval_features is not None else None, card_facts=card)


_METRIC_DEFINITIONS = {
    "single_label_classification": "accuracy; macro F1 (unweighted mean of per-class F1); Matthews correlation "
                                   "(multi-class form)",
    "regression": "Pearson and Spearman (tie-averaged ranks) correlation; mean squared error",
    "multi_label_classification": "subset accuracy; micro F1 and macro F1 over labels (sigmoid > 0.5)",
}


def _model_class():
    from modeling import BriskBertForSequenceClassification

    return BriskBertForSequenceClassification


if __name__ == "__main__":
    main()
