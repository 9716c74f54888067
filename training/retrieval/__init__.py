"""Training retrievers: dual-encoder embeddings and their losses, scored-pair similarity, cross-encoder
re-rankers (negatives mined with :mod:`briskbert.retrieval`), the jobs' tasks and the settings of the
retrieval commands."""
