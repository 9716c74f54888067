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
the re-ranker's folder; without one, 0: retrieval's order, with a warning; ``bm25`` is the passage's BM25 over the
collection, divided by the query's best). Prints and
writes ``metrics.json``: Recall@1/5/10/100, MRR@10, nDCG@10 for retrieval alone, the re-ranker's own order
and the fused order, with a one-line warning when what re-ranking hands on scores below retrieval alone.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.files import write_atomic
from briskbert.retrieval.index_settings import IndexFolder
from briskbert.retrieval.settings import (
    CollectionSource,
    EmbeddingArguments,
    RerankerArguments,
    check_model_path,
)
from briskbert.training.tasks.settings import check_at_least


@dataclass(frozen=True)
class ModelArguments:
    _argument_group_name = "models"

    model_name_or_path: str = field(metadata={"help": "The dual encoder (a folder or repo id)."})
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Default: the encoder's own (else 256)."}
    )
    batch_size: int = field(default=64, metadata={"help": "Texts per forward pass."})

    def __post_init__(self):
        check_at_least(self, 1, "batch_size")
        check_model_path(self, "model_name_or_path")


@dataclass(frozen=True)
class OutputArguments:
    output_dir: str | None = field(
        default=None, metadata={"help": "Where metrics.json goes (default: printed only)."}
    )


def main(argv=None):
    models, reranking, embedding, source, index, output = parse(
        __doc__, ModelArguments, RerankerArguments, EmbeddingArguments, CollectionSource, IndexFolder,
        OutputArguments, argv=argv,
    )  # fmt: skip
    from briskbert.retrieval.dense import load_collection, load_retriever
    from briskbert.retrieval.evaluation import evaluate_retrieval
    from briskbert.retrieval.fusion import validation_warning
    from briskbert.retrieval.reranker import load_reranker_of
    from briskbert.retrieval.vector_index import with_index

    task = load_collection(source)
    retriever = load_retriever(
        models.model_name_or_path,
        embedding.pooling,
        embedding.normalize,
        models.max_seq_length,
        models.batch_size,
    )
    retriever = with_index(retriever, index.index, task.corpus_ids, models.model_name_or_path)
    reranker = load_reranker_of(reranking, models.batch_size)
    warning = validation_warning(reranker) if reranker else None
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    report = evaluate_retrieval(task, retriever, reranker)
    report["model"], report["reranker"] = models.model_name_or_path, reranking.reranker_model_name_or_path
    report["index"] = index.index
    print(format_report(report))
    if "warning" in report:
        print(f"warning: {report['warning']}", file=sys.stderr)
    if output.output_dir:
        Path(output.output_dir).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(output.output_dir) / "metrics.json", json.dumps(report, indent=2))
    return report


def format_report(report: dict) -> str:
    """A small table: one row per stage, metrics on 0-1 (as recorded)."""
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
        lines.append(f"{labels[stage]:<{width}}" + "".join(f"{report[stage][name]:>11.4f}" for name in names))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
