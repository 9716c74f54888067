"""Retrieval as a user runs it: embedding texts and exact search with its metrics (:mod:`.dense`), the
on-disk vector index (:mod:`.vector_index`), search over it or exactly (:mod:`.search`), BM25
(:mod:`.lexical`), a cross-encoder re-ranker at query time (:mod:`.reranker`) and its fusion with the
retriever's score (:mod:`.fusion`), the retrieval evaluation and open-domain QA."""
