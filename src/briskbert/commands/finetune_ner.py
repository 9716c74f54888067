# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for named-entity recognition (token classification).

    briskbert finetune-ner \
        --model_name_or_path path/to/briskbert-or-bert --train_file data/conll2003_train_excerpt.txt \
        --validation_file data/conll2003_dev_excerpt.txt --output_dir runs/ner --metric_for_best_model f1

Data: CoNLL-style files (token first and tag last on each line, a blank line between sentences,
``-DOCSTART-`` ignored) or ``--dataset_name`` with token and tag columns (tag strings or a ``ClassLabel``
sequence). A word's tag goes on its first sub-word (``--label_all_tokens``: on every sub-word).
Metrics: entity-level precision, recall and F1 as CoNLL's ``conlleval`` defines them, token accuracy and
per-type F1, scored on whole gold sentences.
"""

from __future__ import annotations

from briskbert.commands.task_flags import (
    add_data_arguments,
    add_model_arguments,
    add_ner_arguments,
    data_source_from_args,
    model_source_from_args,
    ner_task_from_args,
)
from briskbert.commands.training_flags import add_training_arguments, new_parser, training_config_from_args


def parse_args(argv=None):
    parser = new_parser(__doc__)
    add_model_arguments(parser)
    add_data_arguments(parser, "CoNLL-style file: 'token ... tag' per line, blank line between sentences.")
    add_ner_arguments(parser)
    add_training_arguments(parser)
    parser.set_defaults(max_seq_length=256)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    source, data_source, task = (
        model_source_from_args(args),
        data_source_from_args(args),
        ner_task_from_args(args),
    )

    # Inputs first: a wrong path or a bad file costs a second, not the import of torch and a model.
    from briskbert.training.tasks.finetuning import check_model_inputs
    from briskbert.training.tasks.ner import load_ner_data

    config = training_config_from_args(args)
    location = check_model_inputs(source)
    data = load_ner_data(data_source, task)

    from transformers import DataCollatorForTokenClassification

    from briskbert.modeling import BriskBertForTokenClassification
    from briskbert.training.engine.facts import JobFacts
    from briskbert.training.engine.loop import run, seed_everything
    from briskbert.training.engine.task import PreparedTask
    from briskbert.training.tasks.finetuning import (
        card_source_facts,
        load_model,
        load_tokenizer,
        resolve_base_model,
        start_accelerator,
    )
    from briskbert.training.tasks.ner import (
        METRIC_DEFINITIONS,
        NerEvaluator,
        count_labelled_tokens,
        make_ner_evaluate_fn,
        ner_features,
    )

    accelerator = start_accelerator(config)
    seed_everything(config.seed)
    accelerator.print(f"Tags ({len(data.labels)}): {data.labels}")
    base = resolve_base_model(location, config.output_dir, source.trust_remote_code) if location else None
    tokenizer = load_tokenizer(source.tokenizer_name or base)
    model = load_model(
        BriskBertForTokenClassification,
        source,
        base,
        tokenizer,
        num_labels=len(data.labels),
        id2label=data.id2label,
        label2id=data.label2id,
    )
    features = dict(
        tokenizer=tokenizer,
        label2id=data.label2id,
        token_column=task.token_column,
        max_seq_length=source.max_seq_length,
    )
    with accelerator.main_process_first():
        train_features = ner_features(
            data.train, data.train_tags, label_all_tokens=task.label_all_tokens, **features
        )
        eval_features = None
        if data.evaluation is not None:
            eval_features = ner_features(data.evaluation, data.eval_tags, label_all_tokens=False, **features)
    evaluate = None
    if eval_features is not None:
        evaluator = NerEvaluator(data.eval_tags, eval_features["word_ids"], data.id2label)
        evaluate = make_ner_evaluate_fn(evaluator, source.max_seq_length)
        eval_features = eval_features.remove_columns("word_ids")

    card = {
        **card_source_facts(source),
        "task": "token-classification",
        "pipeline_tag": "token-classification",
        "labels": data.labels,
        **data_source.card_facts(),
        "num_train_sentences": len(train_features),
        "num_eval_sentences": len(eval_features) if eval_features is not None else 0,
        "label_all_tokens": task.label_all_tokens,
        "metric_definitions": METRIC_DEFINITIONS,
    }
    task = PreparedTask(  # not yet a Task of its own: the pieces built above
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_features.remove_columns("word_ids"),
        data_collator=DataCollatorForTokenClassification(tokenizer),
        eval_dataset=eval_features,
        evaluate_fn=evaluate,
        count_items_fn=count_labelled_tokens,
        job_facts=JobFacts.from_dict(card),
    )
    return run(task, config, accelerator=accelerator)


if __name__ == "__main__":
    main()
