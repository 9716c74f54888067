# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""BM25 over a passage collection: the lexical score the re-ranking stage can fuse with the dual encoder's
similarity and the cross-encoder's logit (``training.retrieval.reranking``).

A dual encoder squeezes a passage into one vector and loses exact rare words (names, numbers, dates) that a
question often shares with the one passage that answers it; BM25 scores exactly those. The variant is
Lucene's (the default of Elasticsearch and of ``bm25s``), which the tests check against ``bm25s``::

    score(q, p) = sum over the words w of q:  idf(w) * tf(w, p) / (tf(w, p) + k1 * (1 - b + b * |p| / avg|p|))
    idf(w) = ln(1 + (N - df(w) + 0.5) / (df(w) + 0.5))

Words are lower-cased runs of letters, digits and underscores (Unicode-aware); nothing is stemmed or dropped.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class BM25:
    """Document frequencies and the mean length of ``passages``, read once; :meth:`score` then scores any
    (query, passage) pair against those statistics."""

    def __init__(self, passages: Iterable[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.document_frequency: Counter = Counter()
        self.num_passages, total_words = 0, 0
        for passage in passages:
            tokens = words(passage)
            self.document_frequency.update(set(tokens))
            self.num_passages += 1
            total_words += len(tokens)
        self.mean_length = total_words / max(self.num_passages, 1) or 1.0

    def idf(self, word: str) -> float:
        frequency = self.document_frequency.get(word, 0)
        return math.log(1 + (self.num_passages - frequency + 0.5) / (frequency + 0.5))

    def score(self, query: str, passage: str) -> float:
        counts = Counter(words(passage))
        length_norm = self.k1 * (1 - self.b + self.b * sum(counts.values()) / self.mean_length)
        return sum(
            self.idf(word) * counts[word] / (counts[word] + length_norm)
            for word in words(query)
            if word in counts
        )

    def head_scores(
        self, queries: dict[str, str], rankings: dict[str, list[str]], corpus: dict[str, str], depth: int
    ) -> dict[str, list[float]]:
        """For each query, the BM25 score of its first ``depth`` ranked passages divided by the largest of them,
        so every query's scores lie in [0, 1] (all 0 when no passage shares a word with it)."""
        scores = {}
        for query_id, ranking in rankings.items():
            raw = [self.score(queries[query_id], corpus[passage_id]) for passage_id in ranking[:depth]]
            best = max(raw, default=0.0)
            scores[query_id] = [value / best if best > 0 else 0.0 for value in raw]
        return scores
