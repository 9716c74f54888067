# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The options of ``finetune-embeddings`` and ``finetune-reranker`` (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

from briskbert.errors import SettingError
from briskbert.retrieval.settings import EmbeddingArguments
from briskbert.training.tasks.settings import check_at_least, helped, parse_article_ranges

RANKING_LOSSES = ("listwise", "pointwise")
SCORED_PAIR_LOSSES = ("cosent", "cosine_mse")
EMBEDDING_LOSSES = ("multiple_negatives_ranking", *SCORED_PAIR_LOSSES)
SCORED_PAIR_COLUMNS = ("sentence1", "sentence2", "score")
SQUAD_ARTICLES_HELP = "SQuAD files: use only articles START:STOP."


@dataclass(frozen=True)
class EmbeddingData:
    _argument_group_name = "data"

    train_file: str = field(
        metadata={
            "help": "TSV/CSV/JSON lines of query|anchor/positive[/negative] or sentence1/sentence2/score; "
            "or SQuAD .json."
        }
    )
    validation_file: str | None = helped(
        "As train_file: retrieval metrics, or Spearman/Pearson for scored pairs."
    )
    train_articles: tuple[int, int] | str | None = helped(SQUAD_ARTICLES_HELP)
    validation_articles: tuple[int, int] | str | None = helped(SQUAD_ARTICLES_HELP)
    max_train_samples: int | None = helped("Keep only the first N pairs.")
    max_query_length: int = helped("Tokens per query after truncation.", 64)
    mine_hard_negatives: bool = helped(
        "Add the starting model's best-ranked wrong training passage as negative.", False
    )

    def __post_init__(self):
        parse_article_ranges(self, "train_articles", "validation_articles")
        check_at_least(self, 1, "max_train_samples")
        check_at_least(self, 4, "max_query_length")


@dataclass(frozen=True)
class EmbeddingSettings(EmbeddingArguments):
    _argument_group_name = "sentence embeddings and loss"

    loss: str | None = helped(
        "Default: multiple_negatives_ranking for pairs, cosent for scored pairs.",
        None,
        choices=EMBEDDING_LOSSES,
    )
    scale: float = helped("Similarity scale, 1/temperature.", 20.0)
    symmetric: bool = helped("Also rank the queries for each positive.", False)
    score_range: tuple[float, float] | str | None = helped(
        "cosine_mse: LOW:HIGH scores for cosine 0 and 1 (default: the data's)."
    )
    mini_batch_size: int | None = helped(
        "Cached gradients: encode this many texts at a time (batch negatives kept)."
    )

    def __post_init__(self):
        if self.loss is not None and self.loss not in EMBEDDING_LOSSES:
            raise SettingError("loss", f"{self.loss!r} is not one of {', '.join(EMBEDDING_LOSSES)}.")
        check_at_least(self, 1, "mini_batch_size")
        if self.scale <= 0:
            raise SettingError("scale", f"(1/temperature) must be > 0, got {self.scale}.")
        if isinstance(self.score_range, str):
            try:
                low, high = (float(part) for part in self.score_range.split(":"))
            except ValueError:
                raise SettingError(
                    "score_range", f"{self.score_range!r} is not LOW:HIGH, e.g. 0:5."
                ) from None
            if not low < high:
                raise SettingError("score_range", f"{self.score_range!r}: LOW must be below HIGH, e.g. 0:5.")
            object.__setattr__(self, "score_range", (low, high))

    @property
    def on_scored_pairs(self) -> bool:
        return self.loss in SCORED_PAIR_LOSSES


@dataclass(frozen=True)
class RerankerData:
    _argument_group_name = "data and negatives"

    train_file: str = field(metadata={"help": "JSON lines (query/positive[/negative]) or SQuAD .json."})
    train_articles: tuple[int, int] | str | None = helped(SQUAD_ARTICLES_HELP)
    max_train_samples: int | None = helped("Keep only the first N queries.")
    num_negatives: int = helped("Negatives read with each positive.", 3)
    negative_pool_size: int | None = helped(
        "Negatives per query drawn from each epoch (default: 3 x num_negatives with "
        "negatives_from, else num_negatives)."
    )
    negatives_from: str | None = helped("A dual encoder whose top-ranked wrong passages are the negatives.")
    negatives_corpus_file: str | None = helped("More passages (one per line) for negatives_from to search.")
    negatives_corpus_min_words: int = 0
    loss: str = helped("Ranking loss per group.", "listwise", choices=RANKING_LOSSES)

    def __post_init__(self):
        parse_article_ranges(self, "train_articles")
        check_at_least(self, 1, "max_train_samples", "num_negatives")
        if self.negative_pool_size is not None and self.negative_pool_size < self.num_negatives:
            raise SettingError(
                "negative_pool_size",
                f"({self.negative_pool_size}) must be at least num_negatives ({self.num_negatives}).",
            )
        if self.negatives_corpus_file is not None and self.negatives_from is None:
            raise SettingError(
                "negatives_corpus_file", "is searched by negatives_from; give a dual encoder there."
            )
        if self.loss not in RANKING_LOSSES:
            raise SettingError("loss", f"{self.loss!r} is not one of {', '.join(RANKING_LOSSES)}.")

    @property
    def pool_size(self) -> int:
        if self.negative_pool_size is not None:
            return self.negative_pool_size
        return 3 * self.num_negatives if self.negatives_from else self.num_negatives


@dataclass(frozen=True)
class RerankerValidation:
    _argument_group_name = "validation and fusion"

    validation_file: str | None = helped(
        "Held-out queries (as train_file): scored, and the fusion chosen on them."
    )
    validation_split_percentage: float = helped(
        "Without validation_file: %% of the training documents (SQuAD articles, or groups of "
        "pairs sharing a passage) held out whole to choose the fusion on.",
        10,
    )
    validation_articles: tuple[int, int] | str | None = helped(SQUAD_ARTICLES_HELP)
    validation_extra_corpus_file: str | None = helped(
        "Distractor passages (one per line) added to the validation collection."
    )
    validation_extra_corpus_min_words: int = 0
    fusion_retriever: str | None = helped(
        "The dual encoder the re-ranker sits behind (default: negatives_from, else the model)."
    )
    rerank_top_k: int = helped("Retrieved passages re-ranked to choose the fusion.", 20)

    def __post_init__(self):
        parse_article_ranges(self, "validation_articles")
        check_at_least(self, 1, "rerank_top_k")
        if self.validation_file is None and self.validation_articles:
            raise SettingError("validation_articles", "needs validation_file.")
        if not 0 < self.validation_split_percentage < 100:
            raise SettingError(
                "validation_split_percentage",
                f"must be in (0, 100), got {self.validation_split_percentage:g}.",
            )
