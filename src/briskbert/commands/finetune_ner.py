# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a briskbert model for named-entity recognition (token classification).

    briskbert finetune-ner \\
        --model_name_or_path path/to/briskbert-or-bert --train_file data/conll2003_train_excerpt.txt \\
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

from briskbert.commands.arguments import parse
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.tasks.settings import DataSource, ModelSource, NerSettings


def main(argv=None):
    model, data, settings, config = parse(
        __doc__, ModelSource, DataSource, NerSettings, TrainingConfig, argv=argv, max_seq_length=256
    )
    from briskbert.commands.training_run import train
    from briskbert.training.tasks.ner import NerTask

    return train(NerTask(model, data, settings), config)
