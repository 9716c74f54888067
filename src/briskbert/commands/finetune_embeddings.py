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

from briskbert.commands.task_flags import add_model_arguments, model_source_from_args
from briskbert.commands.training_flags import add_training_arguments, new_parser, training_config_from_args
from briskbert.training.retrieval.job_settings import EmbeddingData, EmbeddingSettings
from briskbert.training.retrieval.retrieval_arguments import (
    EMBEDDING_LOSSES,
    add_embedding_arguments,
    parse_score_range,
)
from briskbert.training.tasks.settings import parse_article_range


def parse_args(argv=None):
    parser = new_parser(__doc__)
    add_model_arguments(parser)
    data = parser.add_argument_group("data")
    data.add_argument(
        "--train_file",
        required=True,
        help="TSV/CSV/JSON lines: query|anchor/positive[/negative], or sentence1/sentence2/score; or SQuAD .json.",
    )
    data.add_argument(
        "--validation_file",
        default=None,
        help="Same format as --train_file: retrieval metrics among its passages, or Spearman/Pearson.",
    )
    data.add_argument("--train_articles", default=None, help="SQuAD files: use only articles START:STOP.")
    data.add_argument(
        "--validation_articles", default=None, help="SQuAD files: use only articles START:STOP."
    )
    data.add_argument("--max_train_samples", type=int, default=None, help="Keep only the first N pairs.")
    data.add_argument("--max_query_length", type=int, default=64, help="Tokens per query after truncation.")
    add_embedding_arguments(parser)
    loss = parser.add_argument_group("loss")
    loss.add_argument(
        "--loss",
        choices=EMBEDDING_LOSSES,
        default=None,
        help="Default: multiple_negatives_ranking for pairs and triplets, cosent for scored pairs.",
    )
    loss.add_argument("--scale", type=float, default=20.0, help="Similarity scale, 1/temperature.")
    loss.add_argument("--symmetric", action="store_true", help="Also rank the queries for each positive.")
    loss.add_argument(
        "--score_range",
        default=None,
        help="cosine_mse: LOW:HIGH gold scores that map to cosine 0 and 1 (default: the training scores' range).",
    )
    loss.add_argument(
        "--mine_hard_negatives",
        action="store_true",
        help="Add each query's highest-ranked other training passage (by the starting model) as its negative.",
    )
    loss.add_argument(
        "--mini_batch_size",
        type=int,
        default=None,
        help="Cached gradients: encode this many texts at a time; memory of a mini-batch, negatives of the batch.",
    )
    add_training_arguments(
        parser, learning_rate=2e-5, num_train_epochs=1.0, per_device_train_batch_size=32, warmup_ratio=0.1
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    config = training_config_from_args(args)
    model = model_source_from_args(args)
    data = EmbeddingData(
        train_file=args.train_file,
        validation_file=args.validation_file,
        train_articles=parse_article_range(args.train_articles, "--train_articles"),
        validation_articles=parse_article_range(args.validation_articles, "--validation_articles"),
        max_train_samples=args.max_train_samples,
        max_query_length=args.max_query_length,
        mine_hard_negatives=args.mine_hard_negatives,
    )
    settings = EmbeddingSettings(
        loss=args.loss,
        scale=args.scale,
        symmetric=args.symmetric,
        score_range=parse_score_range(args.score_range),
        mini_batch_size=args.mini_batch_size,
        pooling=args.pooling,
        no_normalize=args.no_normalize,
    )

    from briskbert.training.retrieval.embedding_task import EmbeddingTask

    task = EmbeddingTask(model, data, settings)  # reads the examples, which decide the loss

    from briskbert.training.engine.loop import run

    return run(task, config)


if __name__ == "__main__":
    main()
