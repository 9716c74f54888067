# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for sequence classification, regression or multi-label classification.

    briskbert finetune-classification \
        --model_name_or_path path/to/briskbert-or-bert --train_file data/sst2_train_excerpt.tsv \
        --validation_file data/sst2_validation_excerpt.tsv --text_column sentence --label_column label \
        --output_dir runs/sst2 --num_train_epochs 1 --metric_for_best_model accuracy

Data: CSV, TSV or JSON lines files, or ``--dataset_name``; one text column or a pair
(``--text_pair_column``). The task is inferred from the labels (see ``training.classification``) or set
with ``--problem_type``; ``--label_names negative,positive`` names integer labels for ``pipeline()`` and
the model card. Metrics: accuracy, macro F1 and Matthews correlation; Pearson, Spearman and MSE
for regression; subset accuracy and micro/macro F1 for multi-label.
"""

from __future__ import annotations

from briskbert.training.engine.arguments import add_training_arguments
from briskbert.training.tasks.task_arguments import (
    add_classification_arguments,
    add_data_arguments,
    add_model_arguments,
    classification_task_from_args,
    data_source_from_args,
    model_source_from_args,
    new_parser,
)


def parse_args(argv=None):
    parser = new_parser(__doc__)
    add_model_arguments(parser)
    add_data_arguments(parser, "CSV, TSV or JSON lines file with a header / keys.")
    add_classification_arguments(parser)
    add_training_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    source, data_source = model_source_from_args(args), data_source_from_args(args)
    task = classification_task_from_args(args)

    # Inputs first: a wrong path or a bad file costs a second, not the import of torch and a model.
    from briskbert.training.tasks.classification import load_classification_data
    from briskbert.training.tasks.finetuning import check_model_inputs, training_config

    config = training_config(args)
    location = check_model_inputs(source)
    data = load_classification_data(data_source, task)

    from briskbert.modeling import BriskBertForSequenceClassification
    from briskbert.training.engine.loop import run, seed_everything
    from briskbert.training.tasks.classification import (
        classification_card_facts,
        classification_run_inputs,
        tokenize_classification,
    )
    from briskbert.training.tasks.finetuning import (
        card_source_facts,
        load_model,
        load_tokenizer,
        report_skips,
        resolve_base_model,
        start_accelerator,
    )

    accelerator = start_accelerator(config)
    seed_everything(config.seed)
    accelerator.print(
        f"Task: {data.spec.problem_type}, {data.spec.num_labels} label(s) {data.spec.label_list[:10]}"
    )
    base = resolve_base_model(location, config.output_dir, source.trust_remote_code) if location else None
    tokenizer = load_tokenizer(source.tokenizer_name or base)
    model = load_model(
        BriskBertForSequenceClassification, source, base, tokenizer, **data.spec.config_kwargs()
    )
    train_features, eval_features = tokenize_classification(
        data, task, tokenizer, source.max_seq_length, accelerator
    )
    skipped = report_skips(accelerator, *data.reports)
    card = {
        **card_source_facts(source),
        **classification_card_facts(data_source, task, data, train_features, eval_features, skipped),
    }
    return run(
        config,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        card_facts=card,
        **classification_run_inputs(data.spec, tokenizer, train_features, eval_features),
    )


if __name__ == "__main__":
    main()
