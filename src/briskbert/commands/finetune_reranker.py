# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a cross-encoder re-ranker on (query, passage) pairs and choose how to fuse it with retrieval.

    briskbert finetune-reranker --model_name_or_path runs/qa/final \
        --train_file xquad-en.json --train_articles 0:20 --negatives_from runs/embed/final \
        --num_negatives 3 --num_train_epochs 2 \
        --validation_file xquad-en.json --validation_articles 20:24 \
        --validation_extra_corpus_file wikitext-2/test.txt --validation_extra_corpus_min_words 40 \
        --output_dir runs/reranker

Each query is read with its positive passage and ``--num_negatives`` negatives through
``BriskBertForSequenceClassification`` with one relevance logit. Data: JSON lines with ``query``,
``positive`` and optional ``negative``, or a SQuAD-format ``.json`` file whose other paragraphs supply
the negatives. Negatives: the pair's own, then passages drawn each epoch from the
``--negative_pool_size`` that the dual encoder ``--negatives_from`` ranks highest among the training
passages and ``--negatives_corpus_file`` (the mistakes the re-ranker has to fix), else random passages.
``--loss listwise`` is cross-entropy over each group (the positive must win); ``pointwise`` is binary
cross-entropy per pair. Any model the other jobs take can be the start, e.g. a reader from
``finetune-qa``, which already reads questions against passages.

With ``--validation_file`` (held-out queries: SQuAD articles or JSON lines pairs, plus optional
distractors), the validation groups are scored during training, and at the end the weight that fuses the
re-ranker's logit with the retriever's (``--negatives_from``, or ``--fusion_retriever``) similarity is
chosen on the validation queries' top ``--rerank_top_k`` and saved as ``final/fusion.json``;
``evaluate-retrieval`` and ``open-domain-qa`` apply it by default. A weight of 0 means the re-ranker did
not help on validation: the fused ranking is then retrieval's own.
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
class PassageFile:
    """Passages, one per line, keeping lines of at least ``min_words`` words."""

    path: str
    min_words: int = 0


@dataclass(frozen=True)
class RerankerData:
    train_file: str
    train_articles: tuple[int, int] | None = None
    max_train_samples: int | None = None
    num_negatives: int = 3
    negative_pool_size: int | None = None  # default: 3 x num_negatives with a retriever, else num_negatives
    negatives_from: str | None = None
    negatives_corpus: PassageFile | None = None
    loss: str = "listwise"

    def __post_init__(self):
        if self.num_negatives < 1:
            raise UserError(f"--num_negatives must be >= 1, got {self.num_negatives}.")
        if self.negative_pool_size is not None and self.negative_pool_size < self.num_negatives:
            raise UserError(
                f"--negative_pool_size ({self.negative_pool_size}) must be at least --num_negatives "
                f"({self.num_negatives})."
            )
        if self.negatives_corpus is not None and self.negatives_from is None:
            raise UserError("--negatives_corpus_file is searched by --negatives_from; give a dual encoder.")
        if self.loss not in RANKING_LOSSES:
            raise UserError(f"--loss {self.loss!r} is not one of {', '.join(RANKING_LOSSES)}.")

    @property
    def pool_size(self) -> int:
        if self.negative_pool_size is not None:
            return self.negative_pool_size
        return 3 * self.num_negatives if self.negatives_from else self.num_negatives


@dataclass(frozen=True)
class RerankerValidation:
    """Held-out queries: scored during training and used to choose the fusion weight."""

    file: str
    articles: tuple[int, int] | None = None
    distractors: PassageFile | None = None
    fusion_retriever: str | None = None
    rerank_top_k: int = 20

    def __post_init__(self):
        if self.rerank_top_k < 1:
            raise UserError(f"--rerank_top_k must be >= 1, got {self.rerank_top_k}.")


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
        "--negative_pool_size",
        type=int,
        default=None,
        help="Negatives per query to draw --num_negatives from each epoch (default: 3 x --num_negatives "
        "with --negatives_from, else --num_negatives).",
    )
    data.add_argument(
        "--negatives_from",
        default=None,
        help="A dual encoder (e.g. from finetune-embeddings) whose top-ranked wrong passages are the negatives; "
        "default: random passages.",
    )
    data.add_argument(
        "--negatives_corpus_file",
        default=None,
        help="More passages (one per line) for --negatives_from to find negatives among, e.g. distractors.",
    )
    data.add_argument("--negatives_corpus_min_words", type=int, default=0)
    data.add_argument(
        "--loss", choices=RANKING_LOSSES, default="listwise", help="Ranking loss over each group."
    )
    _add_validation_arguments(parser)
    add_training_arguments(
        parser,
        learning_rate=3e-5,
        num_train_epochs=1.0,
        per_device_train_batch_size=8,
        warmup_ratio=0.1,
        max_seq_length=256,
    )
    return parser.parse_args(argv)


def _add_validation_arguments(parser) -> None:
    group = parser.add_argument_group("validation and fusion")
    group.add_argument(
        "--validation_file",
        default=None,
        help="Held-out queries (SQuAD .json or JSON lines pairs): scored during training; the fusion weight "
        "is chosen on them.",
    )
    group.add_argument("--validation_articles", default=None, help="SQuAD files: articles START:STOP.")
    group.add_argument(
        "--validation_extra_corpus_file",
        default=None,
        help="Distractor passages (one per line) added to the validation collection.",
    )
    group.add_argument("--validation_extra_corpus_min_words", type=int, default=0)
    group.add_argument(
        "--fusion_retriever",
        default=None,
        help="The dual encoder the re-ranker will sit behind (default: --negatives_from).",
    )
    group.add_argument(
        "--rerank_top_k", type=int, default=20, help="Retrieved passages re-ranked when choosing the weight."
    )


def main(argv=None):
    args = parse_args(argv)
    source = model_source_from_args(args)
    data = RerankerData(
        train_file=args.train_file,
        train_articles=parse_article_range(args.train_articles, "--train_articles"),
        max_train_samples=args.max_train_samples,
        num_negatives=args.num_negatives,
        negative_pool_size=args.negative_pool_size,
        negatives_from=args.negatives_from,
        negatives_corpus=_passage_file(args.negatives_corpus_file, args.negatives_corpus_min_words),
        loss=args.loss,
    )
    validation = None
    if args.validation_file:
        validation = RerankerValidation(
            file=args.validation_file,
            articles=parse_article_range(args.validation_articles, "--validation_articles"),
            distractors=_passage_file(
                args.validation_extra_corpus_file, args.validation_extra_corpus_min_words
            ),
            fusion_retriever=args.fusion_retriever or args.negatives_from,
            rerank_top_k=args.rerank_top_k,
        )
    elif args.validation_articles or args.validation_extra_corpus_file or args.fusion_retriever:
        raise UserError(
            "--validation_articles, --validation_extra_corpus_file and --fusion_retriever need --validation_file."
        )
    return _train(args, source, data, validation)


def _passage_file(path: str | None, min_words: int) -> PassageFile | None:
    return PassageFile(path, min_words) if path else None


def _train(args, source, data: RerankerData, validation: RerankerValidation | None):
    from briskbert.hub_cards.facts import JobFacts
    from briskbert.modeling import BriskBertForSequenceClassification
    from briskbert.training.engine.loop import run, seed_everything
    from briskbert.training.engine.task import PreparedTask
    from briskbert.training.retrieval.reranking import (
        CrossEncoderForRanking,
        GroupCollator,
        choose_and_save_fusion,
        group_ranking_metrics,
    )
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
    prepared = _training_sets(
        data, validation, config.seed, config.per_device_eval_batch_size, accelerator.device
    )
    base = resolve_base_model(location, config.output_dir, source.trust_remote_code) if location else None
    tokenizer = load_tokenizer(source.tokenizer_name or base)
    # One relevance logit; problem_type regression keeps the head's own (unused) loss well defined.
    model = load_model(
        BriskBertForSequenceClassification, source, base, tokenizer, num_labels=1, problem_type="regression"
    )
    accelerator.print(
        f"Groups: {len(prepared.train)} queries x (1 positive + {data.num_negatives} negatives drawn from "
        f"{data.pool_size})"
        + (f"; {len(prepared.validation_groups)} validation queries" if validation else "")
    )
    card = {
        **card_source_facts(source),
        "task": "text-ranking",
        "pipeline_tag": "text-ranking",
        "datasets": [data.train_file],
        "negatives": f"top {data.pool_size} ranked by {data.negatives_from}"
        if data.negatives_from
        else "random",
        "num_negatives": data.num_negatives,
        "loss": data.loss,
    }
    task = PreparedTask(  # not yet a Task of its own: the pieces built above
        model=CrossEncoderForRanking(model, data.loss),
        tokenizer=tokenizer,
        train_dataset=prepared.train,
        data_collator=GroupCollator(tokenizer, source.max_seq_length),
        eval_dataset=prepared.validation_groups,
        evaluate_fn=group_ranking_metrics if validation else None,
        job_facts=JobFacts.from_dict(card),
    )
    result = run(task, config, accelerator=accelerator)
    if prepared.fusion_retrieved is not None and accelerator.is_main_process:
        fusion = choose_and_save_fusion(
            result.final_dir,
            prepared,
            validation.rerank_top_k,
            source.max_seq_length,
            config.per_device_eval_batch_size,
            accelerator.device,
        )
        accelerator.print(fusion.summary())
    elif validation is not None and accelerator.is_main_process:
        accelerator.print(
            "No fusion weight chosen: give --negatives_from or --fusion_retriever (the dual encoder "
            "the re-ranker sits behind)."
        )
    accelerator.wait_for_everyone()
    return result


def _training_sets(
    data: RerankerData, validation: RerankerValidation | None, seed: int, batch_size: int, device
):
    """Training groups with negative pools, and the validation collection searched by the fusion retriever."""
    from briskbert.training.retrieval.dense import load_retriever, read_passages
    from briskbert.training.retrieval.embeddings import load_pairs
    from briskbert.training.retrieval.reranking import (
        RerankGroups,
        TrainingSets,
        random_negative_pools,
        retrieved_negative_pools,
        validation_sets,
    )

    pairs = load_pairs(data.train_file, data.train_articles)[: data.max_train_samples]
    retrievers = {}

    def retriever(name):
        if name not in retrievers:
            retrievers[name] = load_retriever(name, batch_size=batch_size)
            retrievers[name].encoder.to(device)
        return retrievers[name]

    if data.negatives_from is None:
        pools = random_negative_pools(pairs, data.pool_size, seed)
    else:
        extra = (
            read_passages(data.negatives_corpus.path, data.negatives_corpus.min_words)
            if data.negatives_corpus
            else []
        )
        pools = retrieved_negative_pools(pairs, data.pool_size, retriever(data.negatives_from), extra)
    own_negative = any(pair.negative for pair in pairs)
    train = RerankGroups(pools, data.num_negatives, seed, own_negative=own_negative)
    if validation is None:
        return TrainingSets(train)
    validation_pairs = load_pairs(validation.file, validation.articles)
    distractors = (
        read_passages(validation.distractors.path, validation.distractors.min_words)
        if validation.distractors
        else []
    )
    fusion_retriever = retriever(validation.fusion_retriever) if validation.fusion_retriever else None
    return validation_sets(
        train,
        validation_pairs,
        distractors,
        fusion_retriever,
        validation.fusion_retriever,
        depth=max(validation.rerank_top_k, data.num_negatives + 1),
    )


if __name__ == "__main__":
    main()
