# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Searching a collection with a dual encoder: exact search over the embeddings (:mod:`.dense`), or a faiss
index built over the same passages by ``briskbert build-index`` (:mod:`.vector_index`)."""

from __future__ import annotations

from dataclasses import dataclass

from briskbert.training.retrieval.dense import RetrievalTask, Retriever, encode_texts, exact_search


@dataclass
class Retrieved:
    """Each query's passages, best first, with the retriever's similarity scores (same order)."""

    rankings: dict[str, list[str]]
    scores: dict[str, list[float]]


def retrieve(
    corpus: dict[str, str], queries: dict[str, str], retriever: Retriever, top_k: int = 100
) -> Retrieved:
    """The ``top_k`` passages of ``corpus`` (``{id: text}``) for each of ``queries`` (``{id: text}``), by exact
    search over the embeddings, or by searching the faiss index ``retriever.index_dir`` built over them."""
    passage_ids = list(corpus)
    encode = lambda texts, what: encode_texts(  # noqa: E731
        retriever.encoder,
        retriever.tokenizer,
        texts,
        retriever.spec,
        retriever.batch_size,
        f"encoding {what}",
    )
    if retriever.index_dir is not None:
        from briskbert.training.retrieval.vector_index import search_index

        found, scores = search_index(retriever.index_dir, encode(list(queries.values()), "queries"), top_k)
        rankings = dict(zip(queries, found))
        return Retrieved(
            rankings=rankings, scores={q: s[: len(rankings[q])] for q, s in zip(queries, scores.tolist())}
        )
    scores, indices = exact_search(
        encode(list(queries.values()), "queries"), encode(list(corpus.values()), "passages"), top_k
    )
    return Retrieved(
        rankings={
            query_id: [passage_ids[index] for index in row]
            for query_id, row in zip(queries, indices.tolist())
        },
        scores=dict(zip(queries, scores.tolist())),
    )


def retrieve_task(task: RetrievalTask, retriever: Retriever, top_k: int = 100) -> Retrieved:
    return retrieve(
        dict(zip(task.corpus_ids, task.corpus_texts)),
        dict(zip(task.query_ids, task.query_texts)),
        retriever,
        top_k,
    )


# ------------------------------------------------------------------------------------------ evaluation
