# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""BM25 (``bm25s``' Lucene variant) for the re-ranking stage's fusion: it keeps exact rare words (names, numbers,
dates) that one vector per passage loses. Words are lower-cased runs of letters, digits and _; none is stemmed."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def bm25_head_scores(
    queries: dict[str, str],
    rankings: dict[str, list[str]],
    corpus: dict[str, str],
    depth: int,
    k1: float = 1.2,
    b: float = 0.75,
) -> dict[str, list[float]]:
    """Per query, the BM25 scores (over ``corpus``) of its first ``depth`` ranked passages divided by the largest,
    so they lie in [0, 1] (all 0 when none shares a word with the query)."""
    import bm25s

    row = {passage_id: index for index, passage_id in enumerate(corpus)}
    tokens = [words(text) for text in corpus.values()]
    index = None
    if any(tokens):  # bm25s cannot index a collection without a word; no query could match one anyway
        index = bm25s.BM25(method="lucene", k1=k1, b=b, dtype="float64")
        index.index(tokens, show_progress=False)
    scores = {}
    for query_id, ranking in rankings.items():
        query = words(queries[query_id])
        if index is None or not query:
            scores[query_id] = [0.0] * len(ranking[:depth])
            continue
        collection = index.get_scores(query)
        raw = [float(collection[row[passage_id]]) for passage_id in ranking[:depth]]
        best = max(raw, default=0.0)
        scores[query_id] = [value / best if best > 0 else 0.0 for value in raw]
    return scores
