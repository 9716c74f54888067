# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Recall@k, MRR@10 and nDCG@10 of a dual encoder (+ re-ranker) on a passage collection.

    briskbert evaluate-retrieval --model_name_or_path runs/embeddings/final \
        --squad_file xquad-en.json --articles 24:36 \
        --extra_corpus_file wikitext-2/valid.txt --extra_corpus_min_words 40 \
        --reranker_model_name_or_path runs/reranker/final --rerank_top_k 20 --output_dir runs/retrieval-eval

The collection: a SQuAD-format file (every paragraph a passage, each question's own paragraph its relevant
passage) with optional distractors (one passage per line), or JSON lines corpus/queries/qrels. Passages
and queries are embedded by ``--model_name_or_path`` (any encoder AutoModel loads; pooling and
normalisation from its sentence-transformers files unless given) and searched exactly in torch, or, with
``--index DIR``, only the queries are embedded and the faiss index ``briskbert build-index`` built over the
same passages (with the same encoder: another is refused) is searched. With a
re-ranker, the first ``--rerank_top_k`` passages of each list are scored by it and ordered by the fused
score ``scale * ((1 - w - l) * similarity + l * bm25) + w * logit``, ``w`` and ``l`` being ``--fusion_weight``
and ``--lexical_weight`` or the weights ``finetune-reranker`` chose on validation queries (``fusion.json`` in
the re-ranker's folder; ``bm25`` is the passage's BM25 over the collection, divided by the query's best). Prints and
writes ``metrics.json``: Recall@1/5/10/100, MRR@10, nDCG@10 for retrieval alone, the re-ranker's own order
and the fused order, with a one-line warning when what re-ranking hands on scores below retrieval alone.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from briskbert.commands.training_flags import new_parser
from briskbert.errors import UserError
from briskbert.training.retrieval.index_arguments import add_index_search_argument, check_index_dir
from briskbert.training.retrieval.retrieval_arguments import (
    CollectionSource,
    add_collection_arguments,
    add_embedding_arguments,
    add_reranker_arguments,
)


def parse_args(argv=None):
    parser = new_parser(__doc__)
    models = parser.add_argument_group("models")
    models.add_argument("--model_name_or_path", required=True, help="The dual encoder (a folder or repo id).")
    models.add_argument(
        "--max_seq_length", type=int, default=None, help="Default: the encoder's own (else 256)."
    )
    models.add_argument("--batch_size", type=int, default=64, help="Texts per forward pass.")
    add_reranker_arguments(parser)
    add_embedding_arguments(parser)
    add_collection_arguments(parser)
    add_index_search_argument(parser)
    parser.add_argument("--output_dir", default=None, help="Where metrics.json goes (default: printed only).")
    args = parser.parse_args(argv)
    for flag in ("rerank_top_k", "batch_size", "reranker_max_seq_length"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1, got {getattr(args, flag)}.")
    for flag in ("fusion_weight", "lexical_weight"):
        if getattr(args, flag) is not None and not args.reranker_model_name_or_path:
            parser.error(f"--{flag} weighs a re-ranking stage; give --reranker_model_name_or_path.")
    return args


def main(argv=None):
    args = parse_args(argv)
    source = CollectionSource.from_args(args)
    check_index_dir(args.index)
    _check_model_path(args.model_name_or_path, "--model_name_or_path")
    if args.reranker_model_name_or_path:
        _check_model_path(args.reranker_model_name_or_path, "--reranker_model_name_or_path")
    from briskbert.training.retrieval.dense import load_retriever
    from briskbert.training.retrieval.evaluation import evaluate_retrieval
    from briskbert.training.retrieval.retrieval_arguments import load_collection

    task = load_collection(source)
    retriever = load_retriever(
        args.model_name_or_path,
        args.pooling,
        False if args.no_normalize else None,
        args.max_seq_length,
        args.batch_size,
    )
    if args.index:
        from briskbert.training.retrieval.vector_index import check_index

        check_index(
            args.index, task.corpus_ids, retriever.encoder, retriever.tokenizer, retriever.spec,
            args.model_name_or_path,
        )  # fmt: skip
        retriever = replace(retriever, index_dir=args.index)
    reranker = None
    if args.reranker_model_name_or_path:
        from briskbert.training.retrieval.reranking import load_reranker

        reranker = load_reranker(
            args.reranker_model_name_or_path,
            args.rerank_top_k,
            args.reranker_max_seq_length,
            args.batch_size,
            args.fusion_weight,
            args.lexical_weight,
        )
    report = evaluate_retrieval(task, retriever, reranker)
    report["model"], report["reranker"] = args.model_name_or_path, args.reranker_model_name_or_path
    report["index"] = args.index
    print(format_report(report))
    if "warning" in report:
        print(f"warning: {report['warning']}", file=sys.stderr)
    if args.output_dir:
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.output_dir) / "metrics.json").write_text(json.dumps(report, indent=2))
    return report


def _check_model_path(name: str, flag: str) -> None:
    if not Path(name).exists() and name.startswith((".", "/")):
        raise UserError(f"{flag} {name} does not exist.")


def format_report(report: dict) -> str:
    """A small table: one row per stage, metrics in percent."""
    labels = {
        "retrieval": "retrieval",
        "reranked": "re-ranker",
        "fused": f"fused ({report.get('fusion_weight', 0):g}"
        + (f", BM25 {report['lexical_weight']:g})" if report.get("lexical_weight") else ")"),
    }
    stages = [name for name in labels if name in report]
    names = list(report["retrieval"])
    width = max(len(labels[stage]) for stage in stages) + 2
    lines = [
        f"{report['num_queries']} queries, {report['num_passages']} passages",
        f"{'':<{width}}" + "".join(f"{name:>11}" for name in names),
    ]
    for stage in stages:
        lines.append(
            f"{labels[stage]:<{width}}" + "".join(f"{100 * report[stage][name]:>11.1f}" for name in names)
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
