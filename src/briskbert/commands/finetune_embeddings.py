# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a sentence-embedding model (a dual encoder) with in-batch negatives.

    briskbert finetune-embeddings --model_name_or_path runs/minilm-briskbert \
        --train_file xquad-en.json --train_articles 0:24 --output_dir runs/embeddings \
        --per_device_train_batch_size 32 --num_train_epochs 1 --mine_hard_negatives

Data: JSON lines with ``query``, ``positive`` and optional ``negative`` strings, or a SQuAD-format ``.json``
file (each question paired with its paragraph). Loss: the multiple-negatives ranking loss, every other
candidate of the batch being a negative (``--scale`` = 1/temperature, ``--symmetric`` adds the
passage-to-query direction); ``--mine_hard_negatives`` adds, for every query, the training passage the
starting model ranks highest after its own. ``--mini_batch_size`` caches gradients (GradCache) so a large
batch of negatives fits in the memory of a small one. The saved ``final/`` folder loads with
``AutoModel.from_pretrained(..., trust_remote_code=True)`` and with
``SentenceTransformer(folder, trust_remote_code=True)`` (it holds modules.json, 1_Pooling, 2_Normalize).
"""

from __future__ import annotations

from dataclasses import dataclass

from briskbert.commands.task_flags import add_model_arguments, model_source_from_args
from briskbert.commands.training_flags import add_training_arguments, new_parser, training_config_from_args
from briskbert.errors import UserError
from briskbert.training.retrieval.retrieval_arguments import add_embedding_arguments
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
        "--train_file", required=True, help="JSON lines (query/positive[/negative]) or SQuAD .json."
    )
    data.add_argument(
        "--validation_file", default=None, help="Same formats; retrieval metrics among its passages."
    )
    data.add_argument("--train_articles", default=None, help="SQuAD files: use only articles START:STOP.")
    data.add_argument(
        "--validation_articles", default=None, help="SQuAD files: use only articles START:STOP."
    )
    data.add_argument("--max_train_samples", type=int, default=None, help="Keep only the first N pairs.")
    data.add_argument("--max_query_length", type=int, default=64, help="Tokens per query after truncation.")
    add_embedding_arguments(parser)
    loss = parser.add_argument_group("contrastive loss")
    loss.add_argument("--scale", type=float, default=20.0, help="Similarity scale, 1/temperature.")
    loss.add_argument("--symmetric", action="store_true", help="Also rank the queries for each positive.")
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
    from briskbert.training.retrieval.embeddings import ContrastiveLossSpec

    loss = ContrastiveLossSpec(
        scale=args.scale, symmetric=args.symmetric, mini_batch_size=args.mini_batch_size
    )
    return _train(args, source, data, loss)


def _train(args, source, data: EmbeddingData, loss):
    from briskbert.hub_cards.facts import JobFacts
    from briskbert.modeling import BriskBertModel
    from briskbert.modeling.sentence_transformers_files import EmbeddingSpec, read_embedding_spec
    from briskbert.training.engine.loop import run, seed_everything
    from briskbert.training.engine.task import PreparedTask
    from briskbert.training.retrieval.embeddings import (
        DualEncoder,
        PairCollator,
        load_pairs,
        make_evaluate_fn,
    )
    from briskbert.training.retrieval.embeddings import mine_hard_negatives as mine
    from briskbert.training.tasks.finetuning import (
        card_source_facts,
        check_model_inputs,
        load_model,
        load_tokenizer,
        resolve_base_model,
        start_accelerator,
    )

    config = training_config_from_args(args)
    location = check_model_inputs(source)
    train_pairs = load_pairs(data.train_file, data.train_articles)[: data.max_train_samples]
    eval_pairs = load_pairs(data.validation_file, data.validation_articles) if data.validation_file else None
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
        train_pairs = mine(
            encoder.to(accelerator.device), tokenizer, train_pairs, spec, config.per_device_eval_batch_size
        )
    accelerator.print(f"Pairs: {len(train_pairs)} train, {len(eval_pairs or [])} validation; pooling {spec}")
    card = {
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
        "loss": {"name": "multiple_negatives_ranking", "scale": loss.scale, "symmetric": loss.symmetric},
        "hard_negatives": "mined with the starting model" if data.mine_hard_negatives else None,
    }
    task = PreparedTask(  # not yet a Task of its own: the pieces built above
        model=DualEncoder(encoder, spec, loss),
        tokenizer=tokenizer,
        train_dataset=train_pairs,
        data_collator=PairCollator(tokenizer, data.max_query_length, spec.max_seq_length),
        eval_dataset=eval_pairs,
        evaluate_fn=make_evaluate_fn() if eval_pairs else None,
        job_facts=JobFacts.from_dict(card),
    )
    return run(task, config, accelerator=accelerator)


if __name__ == "__main__":
    main()
