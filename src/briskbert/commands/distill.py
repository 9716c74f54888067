# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Distil a fine-tuned briskbert classifier (the teacher) into a smaller student.

    briskbert distill --teacher_model runs/sst2/final \\
        --train_file data/sst2_train_excerpt.tsv --validation_file data/sst2_validation_excerpt.tsv \\
        --output_dir runs/sst2-distilled --temperature 2 --alpha_kd 0.5 --hidden_loss_weight 0.0

The student is, by default, the teacher with every other encoder layer (``--student_layers`` picks
others, e.g. ``0,3,5``); ``--student_model`` starts from another briskbert folder and ``--student_preset``
from a fresh config (with the teacher's vocabulary). Loss: ``alpha_kd`` x T²-scaled KL divergence to the
teacher's temperature-softened outputs + (1 - ``alpha_kd``) x the hard-label loss
+ ``hidden_loss_weight`` x hidden-state MSE (see ``training.distill``). Data (CSV, TSV or JSON lines files),
its flags and the metrics are those of ``briskbert finetune-classification``; labels keep the teacher's ids.
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.tasks.settings import ClassificationSettings, DataSource, DistillSettings


def main(argv=None):
    setup, data, settings, config = parse(
        __doc__, DistillSettings, DataSource, ClassificationSettings, TrainingConfig, argv=argv
    )
    from briskbert.commands.training_run import train
    from briskbert.training.tasks.distill import DistillationTask

    return train(DistillationTask(setup, data, settings), config)
