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
distractors), the validation groups are scored during training, and at the end the weights that fuse the
re-ranker's logit and the passage's BM25 score with the retriever's (``--negatives_from``, or
``--fusion_retriever``) similarity are chosen on the validation queries' top ``--rerank_top_k`` and saved as
``final/fusion.json``; ``evaluate-retrieval`` and ``open-domain-qa`` apply them by default. A weight of 0
means that signal did not help on validation; both 0, the fused ranking is retrieval's own.
The saved ``final/`` folder (``pipeline_tag: text-ranking``) loads with
``AutoModelForSequenceClassification`` and sentence-transformers' ``CrossEncoder`` (``trust_remote_code=True``).
"""

from __future__ import annotations

from briskbert.commands.task_flags import add_model_arguments, model_source_from_args
from briskbert.commands.training_flags import add_training_arguments, new_parser, training_config_from_args
from briskbert.errors import UserError
from briskbert.training.retrieval.job_settings import PassageFile, RerankerData, RerankerValidation
from briskbert.training.retrieval.retrieval_arguments import RANKING_LOSSES
from briskbert.training.tasks.settings import parse_article_range


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
    config = training_config_from_args(args)

    from briskbert.training.retrieval.reranker_task import RerankerTask

    task = RerankerTask(source, data, validation)

    from briskbert.training.engine.loop import run

    return run(task, config)


def _passage_file(path: str | None, min_words: int) -> PassageFile | None:
    return PassageFile(path, min_words) if path else None


if __name__ == "__main__":
    main()
