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

from briskbert.commands.task_flags import (
    add_data_arguments,
    add_model_arguments,
    add_qa_arguments,
    data_source_from_args,
    model_source_from_args,
    qa_settings_from_args,
)
from briskbert.commands.training_flags import add_training_arguments, new_parser, training_config_from_args


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
    config = training_config_from_args(args)
    model, data, settings = (
        model_source_from_args(args),
        data_source_from_args(args),
        qa_settings_from_args(args),
    )

    # The task checks the model folder and reads the data first: a wrong path or a bad file costs a
    # second, not the import of torch and a model.
    from briskbert.training.tasks.qa import QaTask

    task = QaTask(model, data, settings)

    from briskbert.training.engine.loop import run

    return run(task, config)


if __name__ == "__main__":
    main()
