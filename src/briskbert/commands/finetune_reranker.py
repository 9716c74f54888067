# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a cross-encoder re-ranker on (query, passage) pairs.

    briskbert finetune-reranker --model_name_or_path runs/minilm-briskbert \
        --train_file xquad-en.json --train_articles 0:24 --negatives_from runs/embeddings/final \
        --num_negatives 3 --output_dir runs/reranker

Each query is read with its positive passage and ``--num_negatives`` negatives through
``BriskBertForSequenceClassification`` with one relevance logit. Data: JSON lines with ``query``,
``positive`` and optional ``negative``, or a SQuAD-format ``.json`` file whose other paragraphs supply
the negatives. Negatives: the pair's own, then the passages the dual encoder ``--negatives_from`` ranks
highest (the mistakes the re-ranker has to fix), else random passages. ``--loss listwise`` is
cross-entropy over each group (the positive must win); ``pointwise`` is binary cross-entropy per pair.
The saved ``final/`` folder (``pipeline_tag: text-ranking``) loads with
``AutoModelForSequenceClassification`` and sentence-transformers' ``CrossEncoder`` (``trust_remote_code=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

from briskbert.commands.task_flags import add_model_arguments, model_source_from_args
from briskbert.commands.training_flags import add_training_arguments, new_parser, training_config_from_args
from briskbert.errors import UserError
from briskbert.training.retrieval.retrieval_arguments import RANKING_LOSSES
from briskbert.training.tasks.settings import parse_article_range


@dataclass(frozen=True)
class RerankerData:
    train_file: str
    train_articles: tuple[int, int] | None = None
    max_train_samples: int | None = None
    num_negatives: int = 3
    negatives_from: str | None = None
    loss: str = "listwise"

    def __post_init__(self):
        if self.num_negatives < 1:
            raise UserError(f"--num_negatives must be >= 1, got {self.num_negatives}.")
        if self.loss not in RANKING_LOSSES:
            raise UserError(f"--loss {self.loss!r} is not one of {', '.join(RANKING_LOSSES)}.")


def parse_args(argv=None):
    parser = new_parser(__doc__)
    add_model_arguments(parser)
    data = parser.add_argument_group("data and negatives")
    data.add_argument(
        "--train_file", required=True, help="JSON lines (query/positive[/negative]) or SQuAD .json."
    )
    data.add_argument("--train_articles", default=None, help="SQuAD files: use only articles START:STOP.")
    data.add_argument("--max_train_samples", type=int, default=None, help="Keep only the first N queries.")
    data.add_argument("--num_negatives", type=int, default=3, help="Negatives read with each positive.")
    data.add_argument(
        "--negatives_from",
        default=None,
        help="A dual encoder (e.g. from finetune-embeddings) whose top-ranked wrong passages are the negatives; "
        "default: random passages.",
    )
    data.add_argument(
        "--loss", choices=RANKING_LOSSES, default="listwise", help="Ranking loss over each group."
    )
    add_training_arguments(
        parser,
        learning_rate=3e-5,
        num_train_epochs=1.0,
        per_device_train_batch_size=8,
        warmup_ratio=0.1,
        max_seq_length=256,
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    source = model_source_from_args(args)
    data = RerankerData(
        train_file=args.train_file,
        train_articles=parse_article_range(args.train_articles, "--train_articles"),
        max_train_samples=args.max_train_samples,
        num_negatives=args.num_negatives,
        negatives_from=args.negatives_from,
        loss=args.loss,
    )
    return _train(args, source, data)


def _groups(data: RerankerData, seed: int, batch_size: int, device):
    from briskbert.training.retrieval.dense import load_dual_encoder
    from briskbert.training.retrieval.embeddings import load_pairs
    from briskbert.training.retrieval.reranking import random_negative_groups, retrieved_negative_groups

    pairs = load_pairs(data.train_file, data.train_articles)[: data.max_train_samples]
    if data.negatives_from is None:
        return random_negative_groups(pairs, data.num_negatives, seed)
    encoder, tokenizer, spec = load_dual_encoder(data.negatives_from)
    return retrieved_negative_groups(
        pairs, data.num_negatives, encoder.to(device), tokenizer, spec, batch_size
    )


def _train(args, source, data: RerankerData):
    from briskbert.modeling import BriskBertForSequenceClassification
    from briskbert.training.engine.facts import JobFacts
    from briskbert.training.engine.loop import run, seed_everything
    from briskbert.training.engine.task import PreparedTask
    from briskbert.training.retrieval.reranking import CrossEncoderForRanking, GroupCollator
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
    accelerator = start_accelerator(config)
    seed_everything(config.seed)
    groups = _groups(data, config.seed, config.per_device_eval_batch_size, accelerator.device)
    base = resolve_base_model(location, config.output_dir, source.trust_remote_code) if location else None
    tokenizer = load_tokenizer(source.tokenizer_name or base)
    # One relevance logit; problem_type regression keeps the head's own (unused) loss well defined.
    model = load_model(
        BriskBertForSequenceClassification, source, base, tokenizer, num_labels=1, problem_type="regression"
    )
    accelerator.print(f"Groups: {len(groups)} queries x (1 positive + {data.num_negatives} negatives)")
    card = {
        **card_source_facts(source),
        "task": "text-ranking",
        "pipeline_tag": "text-ranking",
        "datasets": [data.train_file],
        "negatives": f"top-ranked by {data.negatives_from}" if data.negatives_from else "random",
        "num_negatives": data.num_negatives,
        "loss": data.loss,
    }
    task = PreparedTask(  # not yet a Task of its own: the pieces built above
        model=CrossEncoderForRanking(model, data.loss),
        tokenizer=tokenizer,
        train_dataset=groups,
        data_collator=GroupCollator(tokenizer, source.max_seq_length),
        job_facts=JobFacts.from_dict(card),
    )
    return run(task, config, accelerator=accelerator)


if __name__ == "__main__":
    main()
