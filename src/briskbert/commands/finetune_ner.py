# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for named-entity recognition (token classification).

    briskbert finetune-ner \
        --model_name_or_path path/to/briskbert-or-bert --train_file data/conll2003_train_excerpt.txt \
        --validation_file data/conll2003_dev_excerpt.txt --output_dir runs/ner --metric_for_best_model f1

Data: CoNLL-style files (token first and tag last on each line, a blank line between sentences,
``-DOCSTART-`` ignored) or ``--dataset_name`` with token and tag columns (tag strings or a ``ClassLabel``
sequence). A word's tag goes on its first sub-word (``--label_all_tokens``: on every sub-word).
``--crf`` adds a linear-chain CRF over the per-token scores, trained with its negative log-likelihood over the
words and decoded with Viterbi, so predictions never break the BIO scheme (``O I-PER``).
Metrics: entity-level precision, recall and F1 as CoNLL's ``conlleval`` defines them, token accuracy,
per-type F1 and the share of predicted sentences that break the BIO scheme, scored on whole gold sentences.
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

    from briskbert.hub_cards.facts import JobFacts
    from briskbert.modeling import BriskBertForTokenClassification
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
        build_ner_features,
        count_labelled_tokens,
        make_ner_evaluate_fn,
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
        **({"use_crf": True} if task.crf else {}),  # a CRF model fine-tuned further keeps its CRF
    )
    with accelerator.main_process_first():
        features = build_ner_features(
            data,
            tokenizer,
            task.token_column,
            source.max_seq_length,
            task.label_all_tokens,
            crf=model.config.use_crf,
        )
    if features.crf_repaired_sentences:
        accelerator.print(
            f"CRF: {features.crf_repaired_sentences} sentences start an entity with I-X; trained as B-X "
            "(the same entities under conlleval)."
        )
    evaluate = None
    if features.evaluator is not None:
        evaluate = make_ner_evaluate_fn(features.evaluator, source.max_seq_length)

    card = {
        **card_source_facts(source),
        "task": "token-classification",
        "pipeline_tag": "token-classification",
        "labels": data.labels,
        **data_source.card_facts(),
        "num_train_sentences": len(features.train),
        "num_eval_sentences": len(features.evaluation) if features.evaluation is not None else 0,
        "label_all_tokens": task.label_all_tokens,
        "crf": model.config.use_crf,
        "metric_definitions": METRIC_DEFINITIONS,
    }
    task = PreparedTask(  # not yet a Task of its own: the pieces built above
        model=model,
        tokenizer=tokenizer,
        train_dataset=features.train,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        eval_dataset=features.evaluation,
        evaluate_fn=evaluate,
        count_items_fn=count_labelled_tokens,
        job_facts=JobFacts.from_dict(card),
    )
    return run(task, config, accelerator=accelerator)


if __name__ == "__main__":
    main()
