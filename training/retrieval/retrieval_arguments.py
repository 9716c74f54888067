# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Command-line flags shared by the embedding, re-ranking, retrieval and open-domain QA commands.

Imports nothing heavy: the commands build their parsers (and answer ``--help``) before torch is loaded.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from briskbert.errors import UserError
from briskbert.training.tasks.settings import parse_article_range

POOLING_CHOICES = ("mean", "cls")
RANKING_LOSSES = ("listwise", "pointwise")
SCORED_PAIR_LOSSES = ("cosent", "cosine_mse")
EMBEDDING_LOSSES = ("multiple_negatives_ranking", *SCORED_PAIR_LOSSES)


def fusion_weight(text: str) -> float:
    """argparse type of ``--fusion_weight``: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1] (0 = retrieval order), got {value:g}")
    return value


def add_reranker_arguments(parser: argparse.ArgumentParser) -> None:
    """The re-ranker a retrieval command applies: folder, depth, length and fusion weight."""
    group = parser.add_argument_group("re-ranking")
    group.add_argument(
        "--reranker_model_name_or_path",
        default=None,
        help="A cross-encoder (finetune-reranker) that re-orders the first --rerank_top_k passages.",
    )
    group.add_argument("--rerank_top_k", type=int, default=20, help="Retrieved passages the re-ranker reads.")
    group.add_argument(
        "--reranker_max_seq_length", type=int, default=256, help="Tokens per (query, passage)."
    )
    group.add_argument(
        "--fusion_weight",
        type=fusion_weight,
        default=None,
        help="Weight of the re-ranker's logit against the retriever's scaled similarity: 0 keeps retrieval's "
        "order, 1 is the re-ranker's own. Default: the weight in the re-ranker folder's fusion.json "
        "(chosen on validation queries by finetune-reranker), else 1.",
    )
    group.add_argument(
        "--lexical_weight",
        type=fusion_weight,
        default=None,
        help="Weight of the passage's BM25 score (over the collection, scaled to the query's best) in the "
        "fusion; the retriever's similarity gets 1 minus both weights. Default: the weight in fusion.json, "
        "else 0.",
    )


def add_embedding_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--pooling`` / ``--no_normalize``: how token states become a sentence embedding."""
    group = parser.add_argument_group("sentence embeddings")
    group.add_argument(
        f"--{prefix}pooling",
        choices=POOLING_CHOICES,
        default=None,
        help="Token summary. Default: what the model folder's sentence-transformers files say, else mean.",
    )
    group.add_argument(
        f"--{prefix}no_normalize",
        action="store_true",
        help="Keep raw embeddings (dot-product scores) instead of unit length (cosine). Default: the folder's "
        "sentence-transformers files, else normalised.",
    )


def parse_score_range(value: str | None, flag: str = "--score_range") -> tuple[float, float] | None:
    """``"LOW:HIGH"`` -> ``(low, high)`` with low < high; None stays None."""
    if value is None:
        return None
    try:
        low, high = (float(part) for part in value.split(":"))
    except ValueError:
        raise UserError(f"{flag} {value!r} is not LOW:HIGH, e.g. 0:5.") from None
    if not low < high:
        raise UserError(f"{flag} {value!r}: LOW must be below HIGH, e.g. 0:5.")
    return low, high


def add_collection_arguments(parser: argparse.ArgumentParser) -> None:
    """A passage collection with questions and their relevant passages: SQuAD or JSON lines."""
    group = parser.add_argument_group("collection (a SQuAD file, or JSON lines corpus + queries + qrels)")
    group.add_argument(
        "--squad_file",
        default=None,
        help="SQuAD-format JSON: every paragraph is a passage, each question's own paragraph its relevant one.",
    )
    group.add_argument(
        "--articles", default=None, help="Use only articles START:STOP of --squad_file, e.g. 24:36."
    )
    group.add_argument(
        "--extra_corpus_file",
        default=None,
        help="Distractor passages, one per line, added to the collection.",
    )
    group.add_argument(
        "--extra_corpus_min_words",
        type=int,
        default=0,
        help="Keep only distractor lines of at least this many words (headings and short lines go).",
    )
    group.add_argument(
        "--corpus_file", default=None, help="JSON lines with 'id' and 'text' (instead of --squad_file)."
    )
    group.add_argument("--queries_file", default=None, help="JSON lines with 'id' and 'text'.")
    group.add_argument(
        "--qrels_file",
        default=None,
        help="JSON lines with 'query_id', 'passage_id' and optional 'relevance'.",
    )


@dataclass(frozen=True)
class CollectionSource:
    """Where a retrieval collection comes from, checked once."""

    squad_file: str | None = None
    articles: tuple[int, int] | None = None
    extra_corpus_file: str | None = None
    extra_corpus_min_words: int = 0
    corpus_file: str | None = None
    queries_file: str | None = None
    qrels_file: str | None = None

    def __post_init__(self):
        jsonl = (self.corpus_file, self.queries_file, self.qrels_file)
        if (self.squad_file is None) == all(path is None for path in jsonl):
            raise UserError(
                "give either --squad_file or all three of --corpus_file, --queries_file and --qrels_file."
            )
        if self.squad_file is None and any(path is None for path in jsonl):
            raise UserError("JSON lines collections need --corpus_file, --queries_file and --qrels_file.")
        if self.squad_file is None and self.articles is not None:
            raise UserError("--articles selects articles of --squad_file; it needs --squad_file.")

    @classmethod
    def from_args(cls, args) -> CollectionSource:
        return cls(
            squad_file=args.squad_file,
            articles=parse_article_range(args.articles, "--articles"),
            extra_corpus_file=args.extra_corpus_file,
            extra_corpus_min_words=args.extra_corpus_min_words,
            corpus_file=args.corpus_file,
            queries_file=args.queries_file,
            qrels_file=args.qrels_file,
        )


def load_collection(source: CollectionSource):
    """The :class:`~briskbert.training.retrieval.dense.RetrievalTask` a :class:`CollectionSource` describes."""
    from briskbert.training.retrieval.dense import load_jsonl_retrieval, load_squad_retrieval, read_passages

    if source.squad_file is None:
        return load_jsonl_retrieval(source.corpus_file, source.queries_file, source.qrels_file)
    extra = (
        read_passages(source.extra_corpus_file, source.extra_corpus_min_words)
        if source.extra_corpus_file
        else []
    )
    return load_squad_retrieval(source.squad_file, source.articles, extra)
