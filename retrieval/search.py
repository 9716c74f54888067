# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Searching a collection with a dual encoder: exact search over the embeddings (:mod:`.dense`), or the faiss
index ``briskbert build-index`` built over the same passages (:mod:`.vector_index`)."""

from __future__ import annotations

from dataclasses import dataclass

from briskbert.retrieval.dense import Retriever, encode_texts, exact_search


@dataclass
class Retrieved:
    """Each query's passages, best first, with their scores (same order)."""

    rankings: dict[str, list[str]]
    scores: dict[str, list[float]]


def retrieve(
    corpus: dict[str, str], queries: dict[str, str], retriever: Retriever, top_k: int = 100
) -> Retrieved:
    """The ``top_k`` passages of ``corpus`` for each query, by exact search or in ``retriever.index``."""

    def encode(texts, what: str):
        return encode_texts(
            retriever.encoder, retriever.tokenizer, list(texts), retriever.spec, retriever.batch_size, what
        )

    query_vectors = encode(queries.values(), "encoding queries")
    if retriever.index is not None:
        from briskbert.retrieval.vector_index import search_index

        found, scores = search_index(retriever.index, query_vectors, top_k)
    else:
        scores, rows = exact_search(query_vectors, encode(corpus.values(), "encoding passages"), top_k)
        passage_ids = list(corpus)
        found = [[passage_ids[row] for row in hits] for hits in rows.tolist()]
    scores = [row[: len(hits)] for row, hits in zip(scores.tolist(), found)]
    return Retrieved(dict(zip(queries, found)), dict(zip(queries, scores)))
