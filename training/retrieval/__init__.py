"""Dense retrieval: dual-encoder embeddings and their training, exact search and its metrics, cross-encoder
re-ranking, open-domain QA, and the sentence-transformers folder layout."""
