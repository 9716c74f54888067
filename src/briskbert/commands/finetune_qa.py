# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for extractive question answering (SQuAD v1.1, or v2.0 with
``--version_2_with_negative``).

    briskbert finetune-qa \
        --model_name_or_path path/to/briskbert-or-bert --train_file train.json \
        --validation_file data/xquad_en_excerpt.json --max_seq_length 384 --doc_stride 128 \
        --output_dir runs/qa --metric_for_best_model f1

Contexts longer than a window are split into windows that overlap by ``--doc_stride`` tokens, so long
contexts are covered; a training window without the (whole) answer targets ``[CLS]``. Answers are decoded
from the ``--n_best_size`` best starts and ends of every window (at most ``--max_answer_length`` tokens)
and scored with the official SQuAD exact match and F1; predictions (and n-best lists) are written to
``output_dir/eval_predictions.json``. Answers whose text is not at their ``answer_start`` are moved to
the nearest occurrence, answers absent from their context are dropped; both are counted and reported.
The saved model names the project's question-answering pipeline in its config, so
``pipeline("question-answering", model=folder, trust_remote_code=True)`` works on it.
"""

from __future__ import annotations

from briskbert.training.engine.arguments import add_training_arguments
from briskbert.training.tasks.task_arguments import (
    add_data_arguments,
    add_model_arguments,
    add_qa_arguments,
    data_source_from_args,
    model_source_from_args,
    new_parser,
    qa_task_from_args,
)


def parse_args(argv=None):
    parser = new_parser(__doc__)
    add_model_arguments(parser)
    add_data_arguments(parser, "SQuAD-format JSON file.")
    add_qa_arguments(parser)
    add_training_arguments(parser)
    parser.set_defaults(max_seq_length=384)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    source, data_source, task = (
        model_source_from_args(args),
        data_source_from_args(args),
        qa_task_from_args(args),
    )

    # Inputs first: a wrong path or a bad file costs a second, not the import of torch and a model.
    from briskbert.training.tasks.finetuning import check_model_inputs, training_config
    from briskbert.training.tasks.qa import load_qa_data

    config = training_config(args)
    location = check_model_inputs(source)
    data = load_qa_data(data_source, task)

    from transformers import DataCollatorWithPadding

    from briskbert.modeling import BriskBertForQuestionAnswering
    from briskbert.training.engine.loop import run, seed_everything
    from briskbert.training.tasks.finetuning import (
        card_source_facts,
        load_model,
        load_tokenizer,
        report_skips,
        resolve_base_model,
        start_accelerator,
    )
    from briskbert.training.tasks.qa import (
        MODEL_INPUTS,
        make_qa_evaluate_fn,
        qa_card_facts,
        qa_features,
        register_qa_pipeline,
    )

    accelerator = start_accelerator(config)
    seed_everything(config.seed)
    base = resolve_base_model(location, config.output_dir, source.trust_remote_code) if location else None
    tokenizer = load_tokenizer(source.tokenizer_name or base)
    model = load_model(BriskBertForQuestionAnswering, source, base, tokenizer)
    register_qa_pipeline(model.config)  # transformers 5 has no question-answering pipeline: name ours
    train_features, eval_features = qa_features(data, tokenizer, task, config.seed, accelerator)
    accelerator.print(
        f"Training: {len(data.train)} questions -> {len(train_features)} windows"
        + (
            f"; evaluation: {len(data.evaluation)} questions -> {len(eval_features)} windows"
            if eval_features is not None
            else ""
        )
    )
    evaluate = eval_inputs = None
    if eval_features is not None:
        evaluate = make_qa_evaluate_fn(data.evaluation, eval_features, task, config.output_dir)
        eval_inputs = eval_features.select_columns(
            [c for c in MODEL_INPUTS if c in eval_features.column_names]
        )
    skipped = report_skips(accelerator, *data.reports)
    return run(
        config,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_features,
        data_collator=DataCollatorWithPadding(tokenizer),
        eval_dataset=eval_inputs,
        evaluate_fn=evaluate,
        card_facts={
            **card_source_facts(source),
            **qa_card_facts(data_source, task, data, train_features, skipped),
        },
    )


if __name__ == "__main__":
    main()
