# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a sentence-embedding model (a dual encoder): in-batch negatives, or scored pairs.

    briskbert finetune-embeddings --model_name_or_path runs/minilm-briskbert \
        --train_file xquad-en.json --train_articles 0:24 --output_dir runs/embeddings --mine_hard_negatives

Data (TSV, CSV or JSON lines; the columns decide the task): ``query`` (or ``anchor``), ``positive``, optional
``negative``, or SQuAD ``.json``: the multiple-negatives ranking loss, validated with Recall@k, MRR@10, nDCG@10.
``sentence1``, ``sentence2``, ``score``: ``--loss cosent`` (default) or ``cosine_mse``, validated with Spearman and
Pearson. ``--mini_batch_size`` caches gradients (GradCache). ``final/`` loads with ``SentenceTransformer``.
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.retrieval.settings import EmbeddingData, EmbeddingSettings
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.tasks.settings import ModelSource


def main(argv=None):
    model, data, settings, config = parse(
        __doc__, ModelSource, EmbeddingData, EmbeddingSettings, TrainingConfig, argv=argv,
        learning_rate=2e-5, num_train_epochs=1.0, per_device_train_batch_size=32, warmup_ratio=0.1,
    )  # fmt: skip

    from briskbert.commands.training_run import train
    from briskbert.training.retrieval.embeddings import EmbeddingTask

    task = EmbeddingTask(model, data, settings)  # reads the examples, which decide the loss
    return train(task, config)
