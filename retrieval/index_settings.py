# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The options of vector indexes (``build-index``, the retrieval commands' ``index``), importing neither torch nor
faiss: a missing faiss is one line naming the extra to install."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from briskbert.errors import SettingError, UserError
from briskbert.inputs import read_json_object
from briskbert.retrieval.settings import SquadSource
from briskbert.training.tasks.settings import check_at_least, helped

INDEX_TYPES = ("flat", "hnsw", "ivfpq")
CONFIG_FILE = "index_config.json"  # written last: its presence means the index is complete
FAISS_MISSING = "faiss is not installed; install the extra: pip install 'briskbert[faiss]'"


def check_faiss() -> None:
    if importlib.util.find_spec("faiss") is None:
        raise UserError(FAISS_MISSING + ".")


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
        for name in ("ivf_nlist", "pq_m"):
            if getattr(self, name) < 0:
                raise SettingError(
                    name, f"must be >= 1 (or 0: chosen from the collection), got {getattr(self, name)}."
                )
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
        if self.passages_file is not None and not Path(self.passages_file).is_file():
            raise SettingError("passages_file", f"{self.passages_file} does not exist.")
        super().__post_init__()

    def fingerprint(self) -> dict:
        """What identifies the passages for a resumed build: the arguments and each file's size and time."""
        files = [path for path in (self.passages_file, self.squad_file, self.extra_corpus_file) if path]
        stats = {
            str(Path(path).resolve()): [os.path.getsize(path), int(os.path.getmtime(path))] for path in files
        }
        return {**asdict(self), "files": stats}
