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

import argparse
import os

from transformers import DataCollatorForTokenClassification

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
    resolve_base_model,
)
from briskbert.training.loop import (
    add_training_arguments,
    create_accelerator,
    evaluation_loop,
    run,
    seed_everything,
)
from briskbert.training.ner import IGNORE_INDEX, NerEvaluator, build_label_list, tokenize_and_align_labels
from briskbert.training.task_data import load_conll, require_columns, require_rows, tags_as_strings


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    add_data_arguments(parser, "CoNLL-style file: 'token ... tag' per line, blank line between sentences.")
    g = parser.add_argument_group("task")
    g.add_argument("--token_column", type=str, default="tokens")
    g.add_argument("--tag_column", type=str, default=None, help="Default: 'tags', else 'ner_tags'.")
    g.add_argument(
        "--label_all_tokens",
        action="store_true",
        help="Train on every sub-word of a word (B- becomes I- after the first), not only the first.",
    )
    add_training_arguments(parser)
    parser.set_defaults(max_seq_length=256)
    args = parser.parse_args(argv)
    check_source_arguments(args)
    return args


def count_labelled_tokens(batch) -> int:
    """The token-classification loss is a mean over labelled sub-words: weight batches by that count."""
    return int((batch["labels"] != IGNORE_INDEX).sum())


def main(argv=None):
    args = parse_args(argv)
    accelerator = create_accelerator(args)
    seed_everything(args.seed)

    train, evaluation = load_splits(args, file_loader=load_conll)
    if args.tag_column is None:
        args.tag_column = (
            "ner_tags" if "tags" not in train.column_names and "ner_tags" in train.column_names else "tags"
        )
    columns = {"--token_column": args.token_column, "--tag_column": args.tag_column}
    train = first_n(train, args.max_train_samples)
    require_rows(train, "the training data")
    require_columns(train, columns, "the training data")
    train_tags = tags_as_strings(train, args.tag_column)
    eval_tags = None
    if evaluation is not None:
        evaluation = first_n(evaluation, args.max_eval_samples)
        require_rows(evaluation, "the evaluation data")
        require_columns(evaluation, columns, "the evaluation data")
        eval_tags = tags_as_strings(evaluation, args.tag_column)
    labels = build_label_list(train_tags, eval_tags)
    label2id = {label: i for i, label in enumerate(labels)}
    accelerator.print(f"Tags ({len(labels)}): {labels}")

    base = resolve_base_model(args) if args.model_name_or_path else None
    tokenizer = load_tokenizer(args, base)
    model = load_model(
        _model_class(),
        args,
        base,
        tokenizer,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id=label2id,
    )

    def features(dataset, tags, label_all_tokens):
        # string tags in a fixed column, whatever the source's tag column holds
        dataset = dataset.select_columns([args.token_column]).add_column("__tags", tags)
        return dataset.map(
            tokenize_and_align_labels,
            batched=True,
            remove_columns=dataset.column_names,
            fn_kwargs=dict(
                tokenizer=tokenizer,
                label2id=label2id,
                token_column=args.token_column,
                tag_column="__tags",
                max_seq_length=args.max_seq_length,
                label_all_tokens=label_all_tokens,
            ),
        )

    with accelerator.main_process_first():
        train_features = features(train, train_tags, args.label_all_tokens).remove_columns("word_ids")
        eval_features = None if evaluation is None else features(evaluation, eval_tags, False)

    evaluate = None
    if eval_features is not None:
        evaluator = NerEvaluator(eval_tags, eval_features["word_ids"], dict(enumerate(labels)))
        eval_features = eval_features.remove_columns("word_ids")

        def evaluate(model, dataloader, accelerator):
            gathered = evaluation_loop(
                model,
                dataloader,
                accelerator,
                lambda batch, outputs: {
                    "predictions": pad_to_width(outputs.logits.argmax(-1), args.max_seq_length, IGNORE_INDEX)
                },
            )
            return evaluator(gathered["predictions"].long().numpy())

    card = {
        **card_source_facts(args, base),
        "task": "token-classification",
        "pipeline_tag": "token-classification",
        "labels": labels,
        "datasets": [args.dataset_name or os.path.basename(args.train_file)],
        "eval_dataset": (args.dataset_name + ":" + args.validation_split)
        if args.dataset_name
        else (os.path.basename(args.validation_file) if args.validation_file else None),
        "num_train_sentences": len(train_features),
        "num_eval_sentences": len(eval_features) if eval_features is not None else 0,
        "label_all_tokens": args.label_all_tokens,
        "metric_definitions": "entity-level precision/recall/F1 (conlleval: exact type and span), token accuracy",
    }
    return run(
        args,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_features,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        eval_dataset=eval_features,
        evaluate_fn=evaluate,
        count_items=count_labelled_tokens,
        card_facts=card,
    )


def _model_class():
    from briskbert.modeling import BriskBertForTokenClassification

    return BriskBertForTokenClassification


if __name__ == "__main__":
    main()
