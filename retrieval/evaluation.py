# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""``briskbert evaluate-retrieval``'s measurement: retrieval alone, the re-ranker's order and the fused order,
with the standard metrics of :mod:`.dense`."""

from __future__ import annotations

import time

from briskbert.retrieval.dense import RECALL_DEPTHS, RetrievalTask, Retriever, retrieval_metrics
from briskbert.retrieval.search import retrieve


def evaluate_retrieval(task: RetrievalTask, retriever: Retriever, reranker=None) -> dict:
    """Metrics of retrieval alone and, with a re-ranker, those of :func:`~.fusion.rerank_report`, with the
    collection's size and the seconds each stage took."""
    start = time.perf_counter()
    depth = max(RECALL_DEPTHS[-1], reranker.top_k if reranker else 0)
    retrieved = retrieve(task.corpus, task.queries, retriever, depth)
    report = {
        "num_queries": len(task.query_ids),
        "num_passages": len(task.corpus_ids),
        "retrieval": retrieval_metrics(retrieved.rankings, task.qrels),
        "retrieval_s": round(time.perf_counter() - start, 2),
    }
    if reranker is not None:
        from briskbert.retrieval.fusion import rerank_report

        report.update(rerank_report(reranker, task, retrieved, retriever.scale))
    return report
