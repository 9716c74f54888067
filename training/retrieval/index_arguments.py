# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Flags and checks for vector indexes (``briskbert build-index``, ``--index`` of the retrieval commands).

Imports nothing heavy, faiss included: ``--help`` and the checks of a command's inputs run before torch or
faiss is loaded, and a missing faiss is one line naming the extra to install.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from briskbert.errors import UserError

INDEX_TYPES = ("flat", "hnsw", "ivfpq")
CONFIG_FILE = "index_config.json"  # written last: its presence means the index is complete
FAISS_MISSING = "faiss is not installed; install the extra: pip install 'briskbert[faiss]'"


def check_faiss() -> None:
    if importlib.util.find_spec("faiss") is None:
        raise UserError(FAISS_MISSING + ".")


@dataclass(frozen=True)
class IndexSettings:
    """Which faiss index to build and how it searches. ``ivf_nlist``/``pq_m`` left at 0 are chosen from the
    collection (:meth:`resolved`)."""

    index_type: str = "hnsw"
    hnsw_m: int = 32
    hnsw_ef_construction: int = 200
    hnsw_ef_search: int = 128
    ivf_nlist: int = 0
    ivf_nprobe: int = 16
    pq_m: int = 0
    pq_bits: int = 8
    max_train_vectors: int = 100_000

    def __post_init__(self):
        if self.index_type not in INDEX_TYPES:
            raise UserError(f"--index_type {self.index_type!r} is not one of {', '.join(INDEX_TYPES)}.")
        for name in ("hnsw_m", "hnsw_ef_construction", "hnsw_ef_search", "ivf_nprobe", "max_train_vectors"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name} must be >= 1, got {getattr(self, name)}.")
        if self.ivf_nlist < 0 or self.pq_m < 0:
            raise UserError("--ivf_nlist and --pq_m must be >= 1 (or 0: chosen from the collection).")
        if not 1 <= self.pq_bits <= 16:
            raise UserError(f"--pq_bits must be between 1 and 16, got {self.pq_bits}.")

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
            raise UserError(f"--pq_m {pq_m} must divide the embedding dimension {dimension}.")
        if training < max(nlist, 2**self.pq_bits):
            raise UserError(
                f"IVF-PQ with --ivf_nlist {nlist} and --pq_bits {self.pq_bits} needs at least "
                f"{max(nlist, 2**self.pq_bits)} passages to train on, and there are {training}; use "
                "--index_type flat or hnsw, or lower --ivf_nlist / --pq_bits."
            )
        return IndexSettings(**{**self.__dict__, "ivf_nlist": nlist, "pq_m": pq_m})


def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("index (faiss; inner product, i.e. cosine for normalised embeddings)")
    group.add_argument(
        "--index_type",
        choices=INDEX_TYPES,
        default="hnsw",
        help="flat: exact search; hnsw: graph, fast and accurate, full vectors in memory; ivfpq: inverted "
        "lists of product-quantised codes, smallest memory, approximate.",
    )
    group.add_argument("--hnsw_m", type=int, default=32, help="HNSW: neighbours per node.")
    group.add_argument(
        "--hnsw_ef_construction", type=int, default=200, help="HNSW: search depth while building."
    )
    group.add_argument(
        "--hnsw_ef_search", type=int, default=128, help="HNSW: search depth per query (at least k)."
    )
    group.add_argument(
        "--ivf_nlist", type=int, default=0, help="IVF-PQ: inverted lists (0: about 4 x sqrt(n))."
    )
    group.add_argument("--ivf_nprobe", type=int, default=16, help="IVF-PQ: lists searched per query.")
    group.add_argument(
        "--pq_m", type=int, default=0, help="IVF-PQ: sub-quantizers per vector (0: dimension / 8)."
    )
    group.add_argument("--pq_bits", type=int, default=8, help="IVF-PQ: bits per sub-quantizer code.")
    group.add_argument(
        "--max_train_vectors",
        type=int,
        default=100_000,
        help="IVF-PQ: train the quantizers on a random sample of at most this many vectors.",
    )


def index_settings_from_args(args) -> IndexSettings:
    return IndexSettings(
        index_type=args.index_type,
        hnsw_m=args.hnsw_m,
        hnsw_ef_construction=args.hnsw_ef_construction,
        hnsw_ef_search=args.hnsw_ef_search,
        ivf_nlist=args.ivf_nlist,
        ivf_nprobe=args.ivf_nprobe,
        pq_m=args.pq_m,
        pq_bits=args.pq_bits,
        max_train_vectors=args.max_train_vectors,
    )


def add_index_search_argument(parser: argparse.ArgumentParser) -> None:
    """``--index DIR`` for the commands that retrieve."""
    parser.add_argument(
        "--index",
        default=None,
        help="A folder from `briskbert build-index` over this collection's passages: search it instead of "
        "embedding every passage (needs the [faiss] extra).",
    )


def check_index_dir(path: str | None, flag: str = "--index") -> None:
    """A :class:`UserError` unless ``path`` (when given) is a finished index folder and faiss is importable."""
    if path is None:
        return
    check_faiss()
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"{flag} {path} does not exist; build one with `briskbert build-index`.")
    if not (folder / CONFIG_FILE).is_file():
        raise UserError(
            f"{flag} {path} is not a finished index (no {CONFIG_FILE}); run `briskbert build-index` into it "
            "(an interrupted build continues where it stopped)."
        )
    try:
        json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UserError(
            f"{flag} {path}: {CONFIG_FILE} is not valid JSON ({error}); build the index again."
        ) from None
