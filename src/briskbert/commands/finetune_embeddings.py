# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a sentence-embedding model (a dual encoder): in-batch negatives, or scored pairs.

    briskbert finetune-embeddings --model_name_or_path runs/minilm-briskbert \
        --train_file xquad-en.json --train_articles 0:24 --output_dir runs/embeddings \
        --per_device_train_batch_size 32 --num_train_epochs 1 --mine_hard_negatives

    briskbert finetune-embeddings --model_name_or_path runs/minilm-briskbert \
        --train_file stsb/train.tsv --validation_file stsb/dev.tsv --output_dir runs/sts \
        --per_device_train_batch_size 16 --num_train_epochs 1 --metric_for_best_model spearman

Data (TSV, CSV or JSON lines; the columns decide the task):

* ``query`` (or ``anchor``), ``positive`` and optional ``negative``: pairs, or NLI-style triplets, or a
  SQuAD-format ``.json`` file (each question paired with its paragraph). Loss: the multiple-negatives
  ranking loss, every other candidate of the batch being a negative (``--scale`` = 1/temperature,
  ``--symmetric`` adds the passage-to-query direction); ``--mine_hard_negatives`` adds, for every query,
  the training passage the starting model ranks highest after its own. Validation: Recall@k, MRR@10,
  nDCG@10 among the validation passages.
* ``sentence1``, ``sentence2``, ``score``: scored pairs (e.g. STS-B, scores 0 to 5). Loss: ``--loss cosent``
  (default; ranks every two pairs of the batch by their scores) or ``cosine_mse`` (cosine against the
  score mapped from ``--score_range`` to [0, 1]). Validation: Spearman and Pearson correlation of cosine
  similarity with the gold scores (``briskbert evaluate-similarity`` computes the same).

On several processes (``accelerate launch``), in-batch negatives and CoSENT's pairs are gathered from every
process: the batch is the global one. ``--mini_batch_size`` caches gradients (GradCache) so a large batch
fits in the memory of a small one. The saved ``final/`` folder loads with
``AutoModel.from_pretrained(..., trust_remote_code=True)`` and with
``SentenceTransformer(folder, trust_remote_code=True)`` (it holds modules.json, 1_Pooling, 2_Normalize).
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.retrieval.settings import EmbeddingData, EmbeddingSettings
from briskbert.training.tasks.settings import ModelSource


def main(argv=None):
    model, data, settings, config = parse(
        __doc__, ModelSource, EmbeddingData, EmbeddingSettings, TrainingConfig, argv=argv,
        learning_rate=2e-5, num_train_epochs=1.0, per_device_train_batch_size=32, warmup_ratio=0.1,
    )  # fmt: skip

    from briskbert.training.retrieval.embedding_task import EmbeddingTask

    task = EmbeddingTask(model, data, settings)  # reads the examples, which decide the loss

    from briskbert.commands.training_run import train

    return train(task, config)


if __name__ == "__main__":
    main()
