# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for sequence classification, regression or multi-label classification.

    briskbert finetune-classification \
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

from transformers import DataCollatorWithPadding

from briskbert.training.classification import (
    add_classification_arguments,
    classification_card_facts,
    load_classification_data,
    make_evaluate_fn,
    tokenize_classification,
)
from briskbert.training.finetuning import (
    add_data_arguments,
    add_model_arguments,
    card_source_facts,
    check_source_arguments,
    load_model,
    load_tokenizer,
    report_skips,
    resolve_base_model,
)
from briskbert.training.loop import add_training_arguments, create_accelerator, run, seed_everything


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    add_data_arguments(parser, "CSV, TSV or JSON lines file with a header / keys.")
    add_classification_arguments(parser)
    add_training_arguments(parser)
    args = parser.parse_args(argv)
    check_source_arguments(args)
    return args


def main(argv=None):
    args = parse_args(argv)
    accelerator = create_accelerator(args)
    seed_everything(args.seed)

    data = load_classification_data(args)
    accelerator.print(
        f"Task: {data.spec.problem_type}, {data.spec.num_labels} label(s) {data.spec.label_list[:10]}"
    )
    base = resolve_base_model(args) if args.model_name_or_path else None
    tokenizer = load_tokenizer(args, base)
    model = load_model(_model_class(), args, base, tokenizer, **data.spec.config_kwargs())
    train_features, eval_features = tokenize_classification(data, tokenizer, args, accelerator)

    card = {
        **card_source_facts(args, base),
        **classification_card_facts(
            args, data, train_features, eval_features, report_skips(accelerator, *data.reports)
        ),
    }
    return run(
        args,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_features,
        data_collator=DataCollatorWithPadding(tokenizer),
        eval_dataset=eval_features,
        evaluate_fn=make_evaluate_fn(data.spec) if eval_features is not None else None,
        card_facts=card,
    )


def _model_class():
    from briskbert.modeling import BriskBertForSequenceClassification

    return BriskBertForSequenceClassification


if __name__ == "__main__":
    main()
