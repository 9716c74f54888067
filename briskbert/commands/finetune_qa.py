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
"""

from __future__ import annotations

import argparse
import os

from transformers import DataCollatorWithPadding

from briskbert.modeling.pipeline_question_answering import add_to_model_folder
from briskbert.training.finetuning import (
    add_data_arguments,
    add_model_arguments,
    card_source_facts,
    check_source_arguments,
    first_n,
    load_model,
    load_splits,
    load_tokenizer,
    pad_to_width,
    report_skips,
    resolve_base_model,
)
from briskbert.training.loop import (
    add_training_arguments,
    create_accelerator,
    evaluation_loop,
    run,
    seed_everything,
)
from briskbert.training.qa import (
    MODEL_INPUTS,
    check_qa_dataset,
    check_window_arguments,
    evaluate_predictions,
    keep_some_answerless_windows,
    postprocess_qa_predictions,
    prepare_eval_features,
    prepare_train_features,
    write_predictions,
)
from briskbert.training.task_data import load_squad, require_columns, require_rows

QA_COLUMNS = {"id": "id", "question": "question", "context": "context", "answers": "answers"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    add_data_arguments(parser, "SQuAD-format JSON file.")
    g = parser.add_argument_group("task")
    g.add_argument(
        "--train_articles",
        type=str,
        default=None,
        help="Use only articles START:STOP of --train_file (e.g. 0:18).",
    )
    g.add_argument(
        "--validation_articles",
        type=str,
        default=None,
        help="Use only articles START:STOP of --validation_file (e.g. 18:36).",
    )
    g.add_argument(
        "--extra_train_file",
        type=str,
        default=None,
        help="A second SQuAD JSON file added to the training data.",
    )
    g.add_argument(
        "--extra_train_articles", type=str, default=None, help="Articles START:STOP of --extra_train_file."
    )
    g.add_argument(
        "--doc_stride", type=int, default=128, help="Overlap in tokens between a context's windows."
    )
    g.add_argument(
        "--keep_answerless_windows",
        type=float,
        default=1.0,
        help="Fraction (0-1) of training windows without the answer to keep (seeded draw); below 1 "
        "speeds up training on very long contexts.",
    )
    g.add_argument("--max_query_length", type=int, default=64, help="Questions are cut to this many tokens.")
    g.add_argument("--n_best_size", type=int, default=20)
    g.add_argument("--max_answer_length", type=int, default=30, help="Longest answer, in tokens.")
    g.add_argument(
        "--version_2_with_negative", action="store_true", help="SQuAD v2.0: some questions have no answer."
    )
    g.add_argument(
        "--null_score_diff_threshold",
        type=float,
        default=0.0,
        help="v2.0: predict no answer when null score - best span score exceeds this.",
    )
    add_training_arguments(parser)
    parser.set_defaults(max_seq_length=384)
    args = parser.parse_args(argv)
    check_source_arguments(args)
    check_window_arguments(args.max_seq_length, args.doc_stride, args.max_query_length)
    if not 0.0 <= args.keep_answerless_windows <= 1.0:
        raise ValueError(f"--keep_answerless_windows must be in [0, 1], got {args.keep_answerless_windows}.")
    for name in ("n_best_size", "max_answer_length"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}.")
    return args


def _articles(spec: str | None):
    if spec is None:
        return None
    try:
        start, stop = (int(part) for part in spec.split(":"))
    except ValueError:
        raise ValueError(f"article range {spec!r} must look like START:STOP, e.g. 0:18.") from None
    return start, stop


def _checked(dataset, name: str, version_2: bool):
    """Schema and emptiness checks; ``is_impossible`` derived from empty answers when absent."""
    require_rows(dataset, name)
    require_columns(dataset, {f"({key})": column for key, column in QA_COLUMNS.items()}, name)
    if "is_impossible" not in dataset.column_names:
        dataset = dataset.add_column("is_impossible", [not answers["text"] for answers in dataset["answers"]])
    check_qa_dataset(dataset, name, version_2)
    return dataset


def main(argv=None):
    args = parse_args(argv)
    accelerator = create_accelerator(args)
    seed_everything(args.seed)

    reports = []

    def squad_loader(articles):
        def load(path):
            dataset, report = load_squad(path, _articles(articles))
            reports.append(report)
            return dataset

        return load

    if args.dataset_name is not None:
        train, evaluation = load_splits(args)
    else:
        train = squad_loader(args.train_articles)(args.train_file)
        evaluation = (
            squad_loader(args.validation_articles)(args.validation_file) if args.validation_file else None
        )
    if args.extra_train_file:
        import datasets

        extra = squad_loader(args.extra_train_articles)(args.extra_train_file)
        train = datasets.concatenate_datasets([train, extra.cast(train.features)])
    train = first_n(train, args.max_train_samples)
    evaluation = first_n(evaluation, args.max_eval_samples)
    train = _checked(train, "the training data", args.version_2_with_negative)
    if evaluation is not None:
        evaluation = _checked(evaluation, "the evaluation data", args.version_2_with_negative)

    base = resolve_base_model(args) if args.model_name_or_path else None
    tokenizer = load_tokenizer(args, base)
    model = load_model(_model_class(), args, base, tokenizer)
    windows = dict(
        tokenizer=tokenizer,
        max_seq_length=args.max_seq_length,
        doc_stride=args.doc_stride,
        max_query_length=args.max_query_length,
    )
    with accelerator.main_process_first():
        train_features = train.map(
            prepare_train_features,
            batched=True,
            remove_columns=train.column_names,
            fn_kwargs=windows,
            desc="train windows",
        )
        eval_features = (
            None
            if evaluation is None
            else evaluation.map(
                prepare_eval_features,
                batched=True,
                remove_columns=evaluation.column_names,
                fn_kwargs=windows,
                desc="eval windows",
            )
        )
    if args.keep_answerless_windows < 1.0:
        train_features = keep_some_answerless_windows(train_features, args.keep_answerless_windows, args.seed)
    accelerator.print(
        f"Training: {len(train)} questions -> {len(train_features)} windows"
        + (
            f"; evaluation: {len(evaluation)} questions -> {len(eval_features)} windows"
            if evaluation is not None
            else ""
        )
    )

    evaluate = eval_inputs = None
    if eval_features is not None:
        eval_inputs = eval_features.select_columns(
            [c for c in MODEL_INPUTS if c in eval_features.column_names]
        )

        def evaluate(model, dataloader, accelerator):
            gathered = evaluation_loop(
                model,
                dataloader,
                accelerator,
                lambda batch, outputs: {
                    "start": pad_to_width(outputs.start_logits, args.max_seq_length, -1e4),
                    "end": pad_to_width(outputs.end_logits, args.max_seq_length, -1e4),
                },
            )
            predictions, nbest = postprocess_qa_predictions(
                evaluation,
                eval_features,
                gathered["start"].numpy(),
                gathered["end"].numpy(),
                n_best_size=args.n_best_size,
                max_answer_length=args.max_answer_length,
                version_2=args.version_2_with_negative,
                null_score_diff_threshold=args.null_score_diff_threshold,
            )
            if accelerator.is_main_process:
                write_predictions(args.output_dir, predictions, nbest)
            return evaluate_predictions(evaluation, predictions, version_2=args.version_2_with_negative)

    skipped = report_skips(accelerator, *reports)
    sources = [args.dataset_name or os.path.basename(args.train_file)]
    if args.extra_train_file:
        sources.append(os.path.basename(args.extra_train_file))
    card = {
        **card_source_facts(args, base),
        "task": "question-answering",
        "pipeline_tag": "question-answering",
        "datasets": sources,
        "train_articles": args.train_articles,
        "extra_train_articles": args.extra_train_articles,
        "eval_dataset": (args.dataset_name + ":" + args.validation_split)
        if args.dataset_name
        else (os.path.basename(args.validation_file) if args.validation_file else None),
        "validation_articles": args.validation_articles,
        "num_train_questions": len(train),
        "num_train_windows": len(train_features),
        "keep_answerless_windows": args.keep_answerless_windows,
        "num_eval_questions": len(evaluation) if evaluation is not None else 0,
        "max_seq_length": args.max_seq_length,
        "doc_stride": args.doc_stride,
        "version_2_with_negative": args.version_2_with_negative,
        "metric_definitions": "exact match and F1 (percent) with the official SQuAD answer normalisation",
        "data_skipped": skipped,
    }
    result = run(
        args,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_features,
        data_collator=DataCollatorWithPadding(tokenizer),
        eval_dataset=eval_inputs,
        evaluate_fn=evaluate,
        card_facts=card,
    )
    if accelerator.is_main_process:  # transformers 5 has no built-in question-answering pipeline: ship ours
        for folder in (result.final_dir, result.output_dir / "best"):
            if folder is not None and (folder / "config.json").is_file():
                add_to_model_folder(str(folder))
    return result


def _model_class():
    from briskbert.modeling import BriskBertForQuestionAnswering

    return BriskBertForQuestionAnswering


if __name__ == "__main__":
    main()
