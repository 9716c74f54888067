# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Recall@k, MRR@10 and nDCG@10 of a dual encoder (+ re-ranker) on a passage collection.

    briskbert evaluate-retrieval --model_name_or_path runs/embeddings/final \
        --squad_file xquad-en.json --articles 24:36 \
        --extra_corpus_file wikitext-2/valid.txt --extra_corpus_min_words 40 \
        --reranker_model_name_or_path runs/reranker/final --rerank_top_k 20 --output_dir runs/retrieval-eval

The collection: a SQuAD-format file (every paragraph relevant to its own questions) with optional distractors, or
JSON lines corpus/queries/qrels; searched exactly, or in a ``build-index`` folder (``--index``). A re-ranker
re-orders the first ``--rerank_top_k`` by ``scale * ((1 - w - l) * similarity + l * bm25) + w * logit``, ``w``/``l``
from ``--fusion_weight`` / ``--lexical_weight``, else the re-ranker's ``fusion.json``, else 0. Writes ``metrics.json``
for retrieval, the re-ranker's order and the fused one, warning when the fused one scores below retrieval.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.files import write_atomic
from briskbert.retrieval.settings import (
    CollectionSource,
    EmbeddingArguments,
    EncoderArguments,
    IndexFolder,
    RerankerArguments,
)
from briskbert.training.tasks.settings import helped

# What evaluate-retrieval and open-domain-qa both read, after their models' arguments.
RETRIEVAL_ARGUMENTS = (RerankerArguments, EmbeddingArguments, CollectionSource, IndexFolder)


@dataclass(frozen=True)
class OutputArguments:
    output_dir: str | None = helped("Where metrics.json goes (default: printed only).")


def main(argv=None):
    models, reranking, embedding, source, index, output = parse(
        __doc__, EncoderArguments, *RETRIEVAL_ARGUMENTS, OutputArguments, argv=argv
    )
    from briskbert.retrieval.fusion import evaluate_retrieval

    encoder = models.model_name_or_path
    task, retriever, reranker = load_models(
        source, embedding, index, reranking, encoder, models.batch_size, models.max_seq_length
    )
    report = evaluate_retrieval(task, retriever, reranker)
    report |= {"model": encoder, "reranker": reranking.reranker_model_name_or_path, "index": index.index}
    print(format_report(report))
    write_outputs(output.output_dir, {"metrics.json": report})
    return report


def write_outputs(output_dir: str | None, files: dict[str, dict]) -> None:
    """The metrics' warning, if any, on stderr; each of ``files`` (name: JSON object) in ``output_dir``, if any."""
    if warning := files.get("metrics.json", {}).get("warning"):
        print(f"warning: {warning}", file=sys.stderr)
    if output_dir:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            write_atomic(Path(output_dir) / name, json.dumps(content, indent=2, ensure_ascii=False))


def load_models(source, embedding, index, reranking, encoder: str, batch_size: int, max_seq_length=None):
    """The collection, the retriever (searching ``index.index`` when given) and the re-ranker (a warning when its
    weights were never chosen)."""
    from briskbert.retrieval.dense import load_collection, load_retriever
    from briskbert.retrieval.fusion import load_reranker
    from briskbert.retrieval.vector_index import with_index

    task = load_collection(source)
    retriever = load_retriever(encoder, embedding, max_seq_length, batch_size)
    retriever = with_index(retriever, index.index, task.corpus_ids, encoder)
    reranker = load_reranker(reranking, batch_size)
    if reranker and not (reranker.fusion or reranker.fusion_weight or reranker.lexical_weight):
        print(
            "warning: the re-ranker has no fusion.json (its weights were never chosen): it is applied at weight "
            "0, retrieval's order unchanged; train it with finetune-reranker, or set fusion_weight.",
            file=sys.stderr,
        )
    return task, retriever, reranker


def format_report(report: dict) -> str:
    """One row per stage, metrics on 0-1."""
    bm25 = f", BM25 {report['lexical_weight']:g}" if report.get("lexical_weight") else ""
    labels = {
        "retrieval": "retrieval",
        "reranked": "re-ranker",
        "fused": f"fused ({report.get('fusion_weight', 0):g}{bm25})",
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
