# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The retrieval commands' options on the collection, the encoder and the re-ranker (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from briskbert.errors import SettingError
from briskbert.training.tasks.settings import check_at_least, helped, parse_article_ranges

POOLING_CHOICES = ("mean", "cls")  # modeling's POOLING_MODES, without importing torch


def check_model_path(settings, name: str) -> None:
    """A :class:`SettingError` when the field ``name`` is a local path (./, /) that is not there."""
    path = getattr(settings, name)
    if path and path.startswith((".", "/")) and not Path(path).exists():
        raise SettingError(name, f"{path} does not exist.")


@dataclass(frozen=True)
class EncoderArguments:
    _argument_group_name = "encoder"

    model_name_or_path: str = field(metadata={"help": "The dual encoder (a folder or repo id)."})
    max_seq_length: int | None = helped("Default: the encoder's own (else 256).")
    batch_size: int = helped("Texts per forward pass.", 64)

    def __post_init__(self):
        check_at_least(self, 1, "batch_size")
        check_at_least(self, 2, "max_seq_length")
        check_model_path(self, "model_name_or_path")


@dataclass(frozen=True)
class RerankerArguments:
    _argument_group_name = "re-ranking"

    reranker_model_name_or_path: str | None = helped(
        "A cross-encoder (finetune-reranker) that re-orders the first rerank_top_k passages."
    )
    rerank_top_k: int = helped("Retrieved passages the re-ranker reads.", 20)
    reranker_max_seq_length: int = helped("Tokens per (query, passage).", 256)
    fusion_weight: float | None = helped(
        "Weight of the re-ranker's logit against the retriever's scaled similarity: 0 keeps "
        "retrieval's order, 1 is the re-ranker's own. Default: the re-ranker folder's fusion.json, else 0."
    )
    lexical_weight: float | None = helped(
        "Weight of the passage's BM25 score (scaled to the query's best); the retriever gets 1 minus "
        "both weights. Default: fusion.json's, else 0."
    )

    def __post_init__(self):
        check_at_least(self, 1, "rerank_top_k", "reranker_max_seq_length")
        check_model_path(self, "reranker_model_name_or_path")
        for name in ("fusion_weight", "lexical_weight"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise SettingError(name, f"expected a number in [0, 1] (0 = retrieval order), got {value:g}.")
            if value is not None and not self.reranker_model_name_or_path:
                raise SettingError(name, "weighs a re-ranking stage; give reranker_model_name_or_path.")


@dataclass(frozen=True)
class EmbeddingArguments:
    _argument_group_name = "sentence embeddings"

    pooling: str | None = helped(
        "Token summary. Default: what the model folder's sentence-transformers files say, else mean.",
        None,
        choices=POOLING_CHOICES,
    )
    no_normalize: bool = helped(
        "Keep raw embeddings (dot-product scores) instead of unit length (cosine).", False
    )

    @property
    def normalize(self) -> bool | None:
        """False with ``no_normalize``, else None: the model folder decides."""
        return False if self.no_normalize else None


@dataclass(frozen=True)
class SquadSource:
    """A SQuAD-format collection with optional distractor passages (the retrieval commands and build-index)."""

    squad_file: str | None = helped(
        "SQuAD-format JSON: every paragraph a passage, relevant to its own questions."
    )
    articles: tuple[int, int] | str | None = helped("Use only articles START:STOP of squad_file, e.g. 24:36.")
    extra_corpus_file: str | None = helped("Distractor passages, one per line, added to the collection.")
    extra_corpus_min_words: int = helped("Keep only distractor lines of at least this many words.", 0)

    def __post_init__(self):
        for name in ("squad_file", "extra_corpus_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise SettingError(name, f"{path} does not exist.")
        if self.squad_file is None and (self.articles is not None or self.extra_corpus_file):
            name = "articles" if self.articles is not None else "extra_corpus_file"
            raise SettingError(name, "goes with squad_file; give squad_file.")
        parse_article_ranges(self, "articles")


@dataclass(frozen=True)
class CollectionSource(SquadSource):
    """A passage collection with questions and their relevant passages: SQuAD or JSON lines."""

    _argument_group_name = "collection (a SQuAD file, or JSON lines corpus + queries + qrels)"

    corpus_file: str | None = helped("JSON lines with 'id' and 'text' (instead of squad_file).")
    queries_file: str | None = helped("JSON lines with 'id' and 'text'.")
    qrels_file: str | None = helped("JSON lines with 'query_id', 'passage_id' and optional 'relevance'.")

    def __post_init__(self):
        jsonl = ("corpus_file", "queries_file", "qrels_file")
        missing = [name for name in jsonl if getattr(self, name) is None]
        if (self.squad_file is None) == (len(missing) == len(jsonl)):
            raise SettingError(
                "squad_file", "or all three of corpus_file, queries_file and qrels_file: give one collection."
            )
        if self.squad_file is None and missing:
            raise SettingError(
                missing[0],
                "is missing: JSON lines collections need corpus_file, queries_file and qrels_file.",
            )
        super().__post_init__()
