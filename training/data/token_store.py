"""A prepared corpus on disk (its files are described in :mod:`training.data.corpus`): opened read-only and
memory-mapped, and checked before a cached one is reused."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from briskbert.files import MANIFEST_FILE, manifest_problem

META_FILE = "meta.json"
_CHECK_TOKENS = 1 << 24  # token ids read at a time when checking a cached store


@dataclass(frozen=True)
class CorpusStore:
    folder: Path
    meta: dict

    @classmethod
    def open(cls, folder: str | Path) -> CorpusStore:
        return cls(Path(folder), json.loads((Path(folder) / META_FILE).read_text()))

    @property
    def num_documents(self) -> int:
        return self.meta["num_documents"]

    @property
    def num_tokens(self) -> int:
        return self.meta["num_tokens"]

    def tokens(self) -> np.ndarray:
        return np.memmap(self.folder / "tokens.bin", dtype=self.meta["dtype"], mode="r")

    def document_offsets(self) -> np.ndarray:
        return np.load(self.folder / "documents.npy", mmap_mode="r")

    def segment_offsets(self) -> np.ndarray:
        return np.load(self.folder / "segments.npy", mmap_mode="r")

    def document_segment_offsets(self) -> np.ndarray:
        return np.load(self.folder / "doc_segments.npy", mmap_mode="r")


def verified_store(folder: Path, vocab_size: int, log) -> CorpusStore | None:
    """The cached store in ``folder`` if it proves itself (every file as its manifest recorded it, every token id
    below ``vocab_size``); otherwise None, with the folder removed and one line saying what was wrong."""
    problem = manifest_problem(folder)
    if problem is None and not (folder / MANIFEST_FILE).is_file():
        problem = f"{folder} has no {MANIFEST_FILE} (an interrupted preparation, or an older version's)"
    if problem is None:
        store = CorpusStore.open(folder)
        tokens = store.tokens()
        chunks = range(0, len(tokens), _CHECK_TOKENS)
        largest = max(int(tokens[i : i + _CHECK_TOKENS].max()) for i in chunks)
        if largest < vocab_size:
            log(
                f"Reusing the prepared corpus {folder} ({store.num_documents:,} documents, {store.num_tokens:,} "
                "tokens); delete that folder to prepare it again."
            )
            return store
        problem = f"{folder / 'tokens.bin'} holds token id {largest}, past the tokenizer's {vocab_size} ids"
    log(f"The prepared corpus cache is damaged: {problem}; preparing it again.")
    shutil.rmtree(folder)
    return None
