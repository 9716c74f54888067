# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for extractive question answering (SQuAD v1.1, or v2.0 with
``--version_2_with_negative``).

    briskbert finetune-qa \\
        --model_name_or_path path/to/briskbert-or-bert --train_file train.json \\
        --validation_file data/xquad_en_excerpt.json --max_seq_length 384 --doc_stride 128 \\
        --output_dir runs/qa --metric_for_best_model f1

Long contexts become windows overlapping by ``--doc_stride`` tokens; a training window without the whole
answer targets ``[CLS]``. Answers are decoded from the ``--n_best_size`` best starts and ends of every window
and scored with the official SQuAD exact match and F1; predictions and n-best lists are written to
``output_dir/eval_predictions.json`` and ``eval_nbest_predictions.json``. An answer not at its
``answer_start`` is moved to the nearest occurrence, one absent from its context is dropped (both counted).
``pipeline("question-answering", model=folder, trust_remote_code=True)`` works on the saved model.
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.tasks.settings import DataSource, ModelSource, QaSettings


def main(argv=None):
    model, data, settings, config = parse(
        __doc__, ModelSource, DataSource, QaSettings, TrainingConfig, argv=argv, max_seq_length=384
    )
    from briskbert.commands.training_run import train
    from briskbert.training.tasks.qa import QaTask

    return train(QaTask(model, data, settings), config)
