# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""What ``finetune-embeddings`` and ``finetune-reranker`` are asked to do, as plain checked data.

Imports nothing heavy: the commands build these (and refuse contradictions) before torch is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from briskbert.errors import UserError
from briskbert.training.retrieval.retrieval_arguments import EMBEDDING_LOSSES, RANKING_LOSSES


# ------------------------------------------------------------------------------------ sentence embeddings
@dataclass(frozen=True)
class EmbeddingData:
    train_file: str
    validation_file: str | None = None
    train_articles: tuple[int, int] | None = None
    validation_articles: tuple[int, int] | None = None
    max_train_samples: int | None = None
    max_query_length: int = 64
    mine_hard_negatives: bool = False

    def __post_init__(self):
        if self.max_train_samples is not None and self.max_train_samples < 1:
            raise UserError(f"--max_train_samples must be >= 1, got {self.max_train_samples}.")
        if self.max_query_length < 4:
            raise UserError(f"--max_query_length must be at least 4, got {self.max_query_length}.")


@dataclass(frozen=True)
class EmbeddingSettings:
    """The loss and the pooling. ``loss`` None: decided by the training file (see ``EmbeddingTask``);
    ``pooling`` None: the model folder's sentence-transformers files, else mean."""

    loss: str | None = None
    scale: float = 20.0
    symmetric: bool = False
    score_range: tuple[float, float] | None = None  # cosine_mse; None: the training scores' range
    mini_batch_size: int | None = None  # cached gradients
    pooling: str | None = None
    no_normalize: bool = False

    def __post_init__(self):
        if self.loss is not None and self.loss not in EMBEDDING_LOSSES:
            raise UserError(f"--loss {self.loss!r} is not one of {', '.join(EMBEDDING_LOSSES)}.")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise UserError(f"--mini_batch_size must be >= 1, got {self.mini_batch_size}.")
        if self.scale <= 0:
            raise UserError(f"--scale (1/temperature) must be > 0, got {self.scale}.")


# ------------------------------------------------------------------------------------------ re-ranking
@dataclass(frozen=True)
class PassageFile:
    """Passages, one per line, keeping lines of at least ``min_words`` words."""

    path: str
    min_words: int = 0


@dataclass(frozen=True)
class RerankerData:
    train_file: str
    train_articles: tuple[int, int] | None = None
    max_train_samples: int | None = None
    num_negatives: int = 3
    negative_pool_size: int | None = None  # default: 3 x num_negatives with a retriever, else num_negatives
    negatives_from: str | None = None
    negatives_corpus: PassageFile | None = None
    loss: str = "listwise"

    def __post_init__(self):
        if self.num_negatives < 1:
            raise UserError(f"--num_negatives must be >= 1, got {self.num_negatives}.")
        if self.negative_pool_size is not None and self.negative_pool_size < self.num_negatives:
            raise UserError(
                f"--negative_pool_size ({self.negative_pool_size}) must be at least --num_negatives "
                f"({self.num_negatives})."
            )
        if self.negatives_corpus is not None and self.negatives_from is None:
            raise UserError("--negatives_corpus_file is searched by --negatives_from; give a dual encoder.")
        if self.loss not in RANKING_LOSSES:
            raise UserError(f"--loss {self.loss!r} is not one of {', '.join(RANKING_LOSSES)}.")

    @property
    def pool_size(self) -> int:
        if self.negative_pool_size is not None:
            return self.negative_pool_size
        return 3 * self.num_negatives if self.negatives_from else self.num_negatives


@dataclass(frozen=True)
class RerankerValidation:
    """Held-out queries: scored during training and used to choose the fusion weight."""

    file: str
    articles: tuple[int, int] | None = None
    distractors: PassageFile | None = None
    fusion_retriever: str | None = None
    rerank_top_k: int = 20

    def __post_init__(self):
        if self.rerank_top_k < 1:
            raise UserError(f"--rerank_top_k must be >= 1, got {self.rerank_top_k}.")
