# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a cross-encoder re-ranker on (query, passage) pairs and choose how to fuse it with retrieval.

    briskbert finetune-reranker --model_name_or_path runs/qa/final \
        --train_file xquad-en.json --train_articles 0:20 --negatives_from runs/embed/final \
        --validation_file xquad-en.json --validation_articles 20:24 --output_dir runs/reranker

Data: JSON lines ``query``/``positive``/optional ``negative``, or SQuAD ``.json``. Each query is read with its
positive and ``--num_negatives`` negatives drawn each epoch from a pool: its own, then those ``--negatives_from``
ranks highest, else random ones; ``--loss listwise`` or ``pointwise``. The fusion weights (re-ranker and BM25
against ``--fusion_retriever``'s similarity) are chosen on the validation queries (``--validation_file``, else
``--validation_split_percentage`` of the training documents, held out whole) and saved as ``final/fusion.json``,
which ``evaluate-retrieval`` and ``open-domain-qa`` apply. ``final/`` loads with sentence-transformers'
``CrossEncoder``.
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.retrieval.settings import RerankerData, RerankerValidation
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.tasks.settings import ModelSource


def main(argv=None):
    # 2e-4: the new one-logit head learns within tens of CPU steps (3e-5 left the loss at ln 4, docs/results.md).
    source, data, validation, config = parse(
        __doc__, ModelSource, RerankerData, RerankerValidation, TrainingConfig, argv=argv,
        learning_rate=2e-4, num_train_epochs=1.0, per_device_train_batch_size=8, warmup_ratio=0.1,
        max_seq_length=256,
    )  # fmt: skip
    from briskbert.commands.training_run import train
    from briskbert.training.retrieval.reranker_task import RerankerTask

    return train(RerankerTask(source, data, validation), config)
