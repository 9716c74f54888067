# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The options of the retrieval jobs: the collection, the encoder, the re-ranker, the faiss index, and the training
of embeddings and re-rankers. Neither torch nor faiss is imported: a missing faiss is one line naming the extra."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from briskbert.errors import SettingError, UserError
from briskbert.inputs import read_json_object
from briskbert.training.tasks.settings import check_at_least, helped, parse_article_ranges

POOLING_CHOICES = ("mean", "cls")  # modeling's POOLING_MODES, without importing torch
INDEX_TYPES = ("flat", "hnsw", "ivfpq")
CONFIG_FILE = "index_config.json"  # written last: its presence means the index is complete
RANKING_LOSSES = ("listwise", "pointwise")
SCORED_PAIR_LOSSES = ("cosent", "cosine_mse")
EMBEDDING_LOSSES = ("multiple_negatives_ranking", *SCORED_PAIR_LOSSES)
SCORED_PAIR_COLUMNS = ("sentence1", "sentence2", "score")
SQUAD_ARTICLES_HELP = "SQuAD files: use only articles START:STOP."


def check_faiss() -> None:
    if importlib.util.find_spec("faiss") is None:
        raise UserError("faiss is not installed; install the extra: pip install 'briskbert[faiss]'.")


def check_model_path(settings, name: str) -> None:
    """A :class:`SettingError` when the field ``name`` is a local path (./, /) that is not there."""
    path = getattr(settings, name)
    if path and path.startswith((".", "/")) and not Path(path).exists():
        raise SettingError(name, f"{path} does not exist.")


def check_files(settings, *names: str) -> None:
    """A :class:`SettingError` for the first field of ``names`` that names a missing file."""
    for name in names:
        path = getattr(settings, name)
        if path is not None and not Path(path).is_file():
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
        check_files(self, "squad_file", "extra_corpus_file")
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


@dataclass(frozen=True)
class IndexSettings:
    _argument_group_name = "index (faiss; inner product, i.e. cosine for normalised embeddings)"

    index_type: str = helped(
        "flat: exact search; hnsw: graph, fast and accurate, full vectors in memory; ivfpq: inverted "
        "lists of product-quantised codes, smallest memory, approximate.",
        "hnsw",
        choices=INDEX_TYPES,
    )
    hnsw_m: int = helped("HNSW: neighbours per node.", 32)
    hnsw_ef_construction: int = helped("HNSW: search depth while building.", 200)
    hnsw_ef_search: int = helped("HNSW: search depth per query (at least k).", 128)
    ivf_nlist: int = helped("IVF-PQ: inverted lists (0: about 4 x sqrt(n)).", 0)
    ivf_nprobe: int = helped("IVF-PQ: lists searched per query.", 16)
    pq_m: int = helped("IVF-PQ: sub-quantizers per vector (0: dimension / 8).", 0)
    pq_bits: int = helped("IVF-PQ: bits per sub-quantizer code.", 8)
    max_train_vectors: int = helped("IVF-PQ: vectors to train on, at most.", 100_000)

    def __post_init__(self):
        if self.index_type not in INDEX_TYPES:
            raise SettingError("index_type", f"{self.index_type!r} is not one of {', '.join(INDEX_TYPES)}.")
        check_at_least(
            self, 1, "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search", "ivf_nprobe", "max_train_vectors"
        )
        check_at_least(self, 0, "ivf_nlist", "pq_m")  # 0: chosen from the collection
        if not 1 <= self.pq_bits <= 16:
            raise SettingError("pq_bits", f"must be between 1 and 16, got {self.pq_bits}.")

    def resolved(self, num_vectors: int, dimension: int) -> IndexSettings:
        """IVF-PQ's list count (about 4 x sqrt(n), with 39+ training vectors per list, as faiss advises) and
        sub-quantizer count (8 dimensions each, or the nearest divisor of the dimension), checked."""
        if self.index_type != "ivfpq":
            return self
        training = min(num_vectors, self.max_train_vectors)
        nlist = self.ivf_nlist or max(1, min(int(4 * num_vectors**0.5), training // 39))
        pq_m = self.pq_m or min(
            (m for m in range(1, dimension + 1) if dimension % m == 0), key=lambda m: abs(m - dimension / 8)
        )
        if dimension % pq_m:
            raise SettingError("pq_m", f"{pq_m} must divide the embedding dimension {dimension}.")
        if training < max(nlist, 2**self.pq_bits):
            raise SettingError(
                "ivf_nlist",
                f"{nlist} with pq_bits {self.pq_bits} (IVF-PQ) needs at least {max(nlist, 2**self.pq_bits)} "
                f"passages to train on, and there are {training}; use index_type flat or hnsw, or lower "
                "ivf_nlist / pq_bits.",
            )
        return IndexSettings(**{**self.__dict__, "ivf_nlist": nlist, "pq_m": pq_m})


@dataclass(frozen=True)
class IndexOutput:
    _argument_group_name = "output"

    output_dir: str = field(metadata={"help": "The index folder."})
    overwrite_output_dir: bool = helped("Replace an index (or unfinished build) there.", False)
    shard_size: int = helped("Passages embedded and saved at a time (bounds memory).", 10_000)
    keep_embeddings: bool = helped("Keep the embedding shards (float32 .npy) after indexing.", False)

    def __post_init__(self):
        check_at_least(self, 1, "shard_size")


@dataclass(frozen=True)
class IndexFolder:
    index: str | None = helped(
        "A build-index folder over this collection's passages to search (the [faiss] extra)."
    )

    def __post_init__(self):
        if self.index is None:
            return
        check_faiss()
        folder = Path(self.index)
        if not (folder / CONFIG_FILE).is_file():
            raise SettingError(
                "index",
                f"{self.index} is not a finished index (no {CONFIG_FILE}); run `briskbert build-index` into it "
                "(an interrupted build continues where it stopped).",
            )
        read_json_object(folder / CONFIG_FILE, "index", "build the index again")


@dataclass(frozen=True)
class PassageSource(SquadSource):
    _argument_group_name = "passages"

    passages_file: str | None = helped("One passage per line (id: line number), or JSON lines id/text.")

    def __post_init__(self):
        if (self.passages_file is None) == (self.squad_file is None):
            raise SettingError(
                "passages_file",
                "or squad_file (with articles, extra_corpus_file): give exactly one of the two.",
            )
        check_files(self, "passages_file")
        super().__post_init__()

    def fingerprint(self) -> dict:
        """What identifies the passages for a resumed build: the arguments and each file's size and time."""
        files = [path for path in (self.passages_file, self.squad_file, self.extra_corpus_file) if path]
        stats = {
            str(Path(path).resolve()): [os.path.getsize(path), int(os.path.getmtime(path))] for path in files
        }
        return {**asdict(self), "files": stats}


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
        default = 3 * self.num_negatives if self.negatives_from else self.num_negatives
        return default if self.negative_pool_size is None else self.negative_pool_size


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
