"""Retrieval as a user runs it: embedding texts, search and its metrics (:mod:`.dense`), the on-disk vector index
(:mod:`.vector_index`), BM25 (:mod:`.lexical`), a cross-encoder re-ranker at query time (:mod:`.reranker`) and its
fusion with the retriever's score (:mod:`.fusion`), the retrieval evaluation and open-domain QA."""
