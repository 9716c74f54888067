# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Distil a fine-tuned briskbert classifier (the teacher) into a smaller student.

    briskbert distill --teacher_model runs/sst2/final \
        --train_file data/sst2_train_excerpt.tsv --validation_file data/sst2_validation_excerpt.tsv \
        --output_dir runs/sst2-distilled --temperature 2 --alpha_kd 0.5 --hidden_loss_weight 0.0

The student is, by default, the teacher with every other encoder layer (``--student_layers`` picks
others, e.g. ``0,3,5``); ``--student_model`` starts from another briskbert folder and ``--student_preset``
from a fresh config (with the teacher's vocabulary). Loss: ``alpha_kd`` x T²-scaled KL divergence to the
teacher's temperature-softened outputs + (1 - ``alpha_kd``) x the hard-label loss
+ ``hidden_loss_weight`` x hidden-state MSE (see ``training.distill``). Data flags and metrics are those
of ``finetune_classification.py``; labels keep the teacher's ids.
"""

from __future__ import annotations

from briskbert.commands.task_flags import (
    add_classification_arguments,
    add_data_arguments,
    add_distill_arguments,
    classification_settings_from_args,
    data_source_from_args,
    distill_settings_from_args,
)
from briskbert.commands.training_flags import add_training_arguments, new_parser, training_config_from_args


def parse_args(argv=None):
    parser = new_parser(__doc__)
    add_distill_arguments(parser)
    add_data_arguments(parser, "CSV, TSV or JSON lines file with a header / keys.")
    add_classification_arguments(parser)
    add_training_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    config = training_config_from_args(args)
    setup, data = distill_settings_from_args(args), data_source_from_args(args)
    settings = classification_settings_from_args(args)

    # The task checks the model folders first: a wrong path costs a second, not the import of torch.
    from briskbert.training.engine.loop import run
    from briskbert.training.tasks.distill import DistillationTask

    return run(DistillationTask(setup, data, settings), config)


if __name__ == "__main__":
    main()
