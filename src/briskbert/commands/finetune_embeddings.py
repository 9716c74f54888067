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

from dataclasses import dataclass

from briskbert.commands.task_flags import add_model_arguments, model_source_from_args
from briskbert.commands.training_flags import add_training_arguments, new_parser, training_config_from_args
from briskbert.errors import UserError
from briskbert.training.retrieval.retrieval_arguments import (
    EMBEDDING_LOSSES,
    SCORED_PAIR_LOSSES,
    add_embedding_arguments,
    parse_score_range,
)
from briskbert.training.tasks.settings import parse_article_range


@dataclass(frozen=True)
class EmbeddingData:
    train_file: str
    validation_file: str | None = None
    train_articles: tuple[int, int] | None = None
    validation_articles: tuple[int, int] | None = None
    max_train_samples: int | None = None
    max_query_length: int = 64
    mine_hard_negatives: bool = False

    def __post_init__(self):
        if self.max_train_samples is not None and self.max_train_samples < 1:
            raise UserError(f"--max_train_samples must be >= 1, got {self.max_train_samples}.")
        if self.max_query_length < 4:
            raise UserError(f"--max_query_length must be at least 4, got {self.max_query_length}.")


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
    source = model_source_from_args(args)
    data = EmbeddingData(
        train_file=args.train_file,
        validation_file=args.validation_file,
        train_articles=parse_article_range(args.train_articles, "--train_articles"),
        validation_articles=parse_article_range(args.validation_articles, "--validation_articles"),
        max_train_samples=args.max_train_samples,
        max_query_length=args.max_query_length,
        mine_hard_negatives=args.mine_hard_negatives,
    )
    score_range = parse_score_range(args.score_range)
    if args.mini_batch_size is not None and args.mini_batch_size < 1:
        raise UserError(f"--mini_batch_size must be >= 1, got {args.mini_batch_size}.")
    if args.scale <= 0:
        raise UserError(f"--scale (1/temperature) must be > 0, got {args.scale}.")
    return _train(args, source, data, score_range)


def _examples(data: EmbeddingData, loss_name: str | None, score_range, scale, symmetric, mini_batch_size):
    """``(train, validation or None, ContrastiveLossSpec)``: the files read, and the loss checked against them."""
    from briskbert.training.retrieval.embeddings import ContrastiveLossSpec, load_training_examples
    from briskbert.training.retrieval.similarity import ScoredPair
    from briskbert.training.retrieval.similarity import score_range as observed_range

    train = load_training_examples(data.train_file, data.train_articles)[: data.max_train_samples]
    validation = None
    if data.validation_file:
        validation = load_training_examples(
            data.validation_file, data.validation_articles, "--validation_file"
        )
    scored = isinstance(train[0], ScoredPair)
    if validation is not None and isinstance(validation[0], ScoredPair) != scored:
        raise UserError(
            f"--validation_file {data.validation_file} and --train_file {data.train_file} hold different kinds of "
            "examples; give scored pairs for both (sentence1/sentence2/score) or pairs for both."
        )
    loss_name = loss_name or ("cosent" if scored else "multiple_negatives_ranking")
    if (loss_name in SCORED_PAIR_LOSSES) != scored:
        kind = "scored pairs (sentence1, sentence2, score)" if scored else "(query, positive) pairs"
        raise UserError(
            f"--loss {loss_name} does not fit --train_file {data.train_file}, which holds {kind}; use "
            f"{'cosent or cosine_mse' if scored else 'multiple_negatives_ranking'}."
        )
    if scored and data.mine_hard_negatives:
        raise UserError(
            "--mine_hard_negatives needs (query, positive) pairs; the training file holds scored pairs."
        )
    loss = ContrastiveLossSpec(
        scale=scale,
        symmetric=symmetric,
        mini_batch_size=mini_batch_size,
        name=loss_name,
        score_range=score_range or (observed_range(train) if scored else (0.0, 1.0)),
    )
    return train, validation, loss


def _train(args, source, data: EmbeddingData, score_range):
    from briskbert.hub_cards.facts import JobFacts
    from briskbert.modeling import BriskBertModel
    from briskbert.modeling.sentence_transformers_files import EmbeddingSpec, read_embedding_spec
    from briskbert.training.engine.loop import run, seed_everything
    from briskbert.training.engine.task import PreparedTask
    from briskbert.training.retrieval.embeddings import DualEncoder, PairCollator, make_evaluate_fn
    from briskbert.training.retrieval.embeddings import mine_hard_negatives as mine
    from briskbert.training.retrieval.similarity import ScoredPairCollator, make_similarity_evaluate_fn
    from briskbert.training.tasks.finetuning import (
        check_model_inputs,
        load_model,
        load_tokenizer,
        resolve_base_model,
        start_accelerator,
    )

    config = training_config_from_args(args)
    location = check_model_inputs(source)
    train, validation, loss = _examples(
        data, args.loss, score_range, args.scale, args.symmetric, args.mini_batch_size
    )
    accelerator = start_accelerator(config)
    seed_everything(config.seed)
    base = resolve_base_model(location, config.output_dir, source.trust_remote_code) if location else None
    declared = (read_embedding_spec(source.model_name_or_path) if location else None) or EmbeddingSpec()
    spec = EmbeddingSpec(
        pooling=args.pooling or declared.pooling,
        normalize=declared.normalize and not args.no_normalize,
        max_seq_length=source.max_seq_length,
    )
    tokenizer = load_tokenizer(source.tokenizer_name or base)
    encoder = load_model(BriskBertModel, source, base, tokenizer)
    if data.mine_hard_negatives:
        train = mine(
            encoder.to(accelerator.device), tokenizer, train, spec, config.per_device_eval_batch_size
        )
    accelerator.print(f"Examples: {len(train)} train, {len(validation or [])} validation; pooling {spec}")
    if loss.on_scored_pairs:
        collator, evaluate_fn = (
            ScoredPairCollator(tokenizer, spec.max_seq_length),
            make_similarity_evaluate_fn(),
        )
    else:
        collator, evaluate_fn = (
            PairCollator(tokenizer, data.max_query_length, spec.max_seq_length),
            make_evaluate_fn(),
        )
    task = PreparedTask(  # not yet a Task of its own: the pieces built above
        model=DualEncoder(encoder, spec, loss),
        tokenizer=tokenizer,
        train_dataset=train,
        data_collator=collator,
        eval_dataset=validation,
        evaluate_fn=evaluate_fn if validation else None,
        job_facts=JobFacts.from_dict(_card(source, data, spec, loss)),
    )
    return run(task, config, accelerator=accelerator)


def _card(source, data: EmbeddingData, spec, loss) -> dict:
    from briskbert.training.tasks.finetuning import card_source_facts

    loss_facts = {"name": loss.name, "scale": loss.scale}
    if loss.name == "multiple_negatives_ranking":
        loss_facts["symmetric"] = loss.symmetric
    if loss.name == "cosine_mse":
        loss_facts["score_range"] = list(loss.score_range)
    return {
        **card_source_facts(source),
        "task": "sentence-similarity",
        "pipeline_tag": "sentence-similarity",
        "library_name": "sentence-transformers",
        "datasets": [data.train_file],
        "eval_dataset": data.validation_file,
        "embedding": {
            "pooling": spec.pooling,
            "normalize": spec.normalize,
            "max_seq_length": spec.max_seq_length,
        },
        "loss": loss_facts,
        "hard_negatives": "mined with the starting model" if data.mine_hard_negatives else None,
    }


if __name__ == "__main__":
    main()
