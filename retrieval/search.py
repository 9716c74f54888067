# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Searching a collection with a dual encoder: exact search over the embeddings (:mod:`.dense`), or a faiss
index built over the same passages by ``briskbert build-index`` (:mod:`.vector_index`)."""

from __future__ import annotations

from dataclasses import dataclass

from briskbert.retrieval.dense import Retriever, encode_texts, exact_search


@dataclass
class Retrieved:
    """Each query's passages, best first, with the retriever's similarity scores (same order)."""

    rankings: dict[str, list[str]]
    scores: dict[str, list[float]]


def retrieve(
    corpus: dict[str, str], queries: dict[str, str], retriever: Retriever, top_k: int = 100
) -> Retrieved:
    """The ``top_k`` passages of ``corpus`` for each query, by exact search or in ``retriever.index_dir``."""

    def encode(texts, what: str):
        return encode_texts(
            retriever.encoder, retriever.tokenizer, list(texts), retriever.spec, retriever.batch_size, what
        )

    query_vectors = encode(queries.values(), "encoding queries")
    if retriever.index_dir is not None:
        from briskbert.retrieval.vector_index import search_index

        found, scores = search_index(retriever.index_dir, query_vectors, top_k)
        rankings = dict(zip(queries, found))
        return Retrieved(rankings, {q: s[: len(rankings[q])] for q, s in zip(queries, scores.tolist())})
    scores, indices = exact_search(query_vectors, encode(corpus.values(), "encoding passages"), top_k)
    passage_ids = list(corpus)
    return Retrieved(
        {query_id: [passage_ids[index] for index in row] for query_id, row in zip(queries, indices.tolist())},
        dict(zip(queries, scores.tolist())),
    )
