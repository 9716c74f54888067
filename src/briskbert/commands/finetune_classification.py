# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for sequence classification, regression or multi-label classification.

    briskbert finetune-classification \\
        --model_name_or_path path/to/briskbert-or-bert --train_file data/sst2_train_excerpt.tsv \\
        --validation_file data/sst2_validation_excerpt.tsv --text_column sentence --label_column label \\
        --output_dir runs/sst2 --num_train_epochs 1 --metric_for_best_model accuracy

Data: CSV, TSV or JSON lines files, or ``--dataset_name``; one text column or a pair (``--text_pair_column``).
The labels decide the task (lists: multi-label, fractional numbers: regression) unless ``--problem_type`` is
given; ``--label_names negative,positive`` names integer labels for ``pipeline()`` and the model card.
Metrics: accuracy, macro F1 and Matthews correlation; Pearson, Spearman and MSE for regression; subset
accuracy and micro/macro F1 for multi-label.
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.tasks.settings import ClassificationSettings, DataSource, ModelSource


def main(argv=None):
    model, data, settings, config = parse(
        __doc__, ModelSource, DataSource, ClassificationSettings, TrainingConfig, argv=argv
    )
    from briskbert.commands.training_run import train
    from briskbert.training.tasks.classification import ClassificationTask

    return train(ClassificationTask(model, data, settings), config)
