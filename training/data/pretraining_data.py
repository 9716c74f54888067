"""Pretraining data: read a corpus into documents, carve a validation split, tokenize, and build
fixed-length MLM sequences (packed or not) or NSP segment pairs.

Two implementations of the same sequences:

* :class:`StoredSequences` / :func:`stored_nsp_examples` read a corpus prepared on disk by
  :mod:`training.corpus` (memory-mapped, bounded memory whatever the corpus size): the default path.
* :func:`mlm_sequences` / :func:`nsp_examples` work on documents held in Python lists: the reference the
  stored path is tested against, and handy for small in-memory corpora.

Packing modes are named after RoBERTa's study (Liu et al. 2019, section 4.2); every sequence starts with
``[CLS]`` and a document is followed by ``[SEP]``:

* ``full-sentences``: documents are concatenated and cut into sequences of exactly ``max_seq_length``
  tokens (the last one shorter); a sequence may cross document boundaries.
* ``doc-sentences``: the same, but a sequence never crosses a document boundary (the last sequence of a
  document is shorter).
* ``none``: one document per sequence, ``[CLS] doc [SEP]``; a longer document continues in the next
  sequences, each with its own ``[CLS] ... [SEP]``.

A cut happens at a token, not at a sentence end, as in transformers' ``run_mlm`` ``group_texts``.

Corpus format (read through ``datasets``): plain text (``.txt``), JSON lines (``.json``/``.jsonl``), CSV
(``.csv``/``.tsv``) or Parquet (``.parquet``).

* Plain text: one paragraph per line; a blank line separates documents.
* Tabular formats: one document per row in ``--text_column`` (newlines inside a row separate its
  paragraphs).

A document is a list of segments (paragraphs; for NSP, sentences). Nothing is silently dropped:
unpacked documents longer than ``max_seq_length`` are split into several sequences, and with packing the
last, shorter sequence is kept (padded by the collator).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets
import numpy as np
import torch

from briskbert.training.data.corpus import BUILDERS, CorpusStore, file_builder, load_corpus, split_sentences  # noqa: F401

PACKING_MODES = ("none", "full-sentences", "doc-sentences")


# ---------------------------------------------------------------------------------------------- reading
def check_file(path: str | None, flag: str) -> None:
    if path is None:
        return
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{flag} {path}: no such file.")
    if p.stat().st_size == 0:
        raise ValueError(f"{flag} {path}: the file is empty.")
    file_builder(path)


def documents_from_rows(texts, blank_line_separates: bool) -> list[list[str]]:
    """Texts (lines or rows) -> documents as lists of non-empty paragraphs."""
    documents, current = [], []
    for text in texts:
        text = text or ""
        if blank_line_separates:
            if text.strip():
                current.append(text.strip())
            elif current:
                documents.append(current)
                current = []
        else:
            paragraphs = [p.strip() for p in text.split("\n") if p.strip()]
            if paragraphs:
                documents.append(paragraphs)
    if current:
        documents.append(current)
    return documents


def read_documents(path: str, text_column: str | None = None) -> list[list[str]]:
    """Read a corpus file into documents (see the module docstring); clear errors for unusable files."""
    check_file(path, "file")
    ds, column = load_corpus(path, text_column)
    documents = documents_from_rows(ds[column], blank_line_separates=file_builder(path)[0] == "text")
    if not documents:
        raise ValueError(f"{path}: no text found in column {column!r} (only empty lines or rows).")
    return documents


def split_document_indices(
    num_documents: int, percentage: float, seed: int, source: str = "The training corpus"
) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) document indices, in corpus order: ``percentage`` % of the documents (at
    least one) held out, chosen with ``seed``. ``source`` names the corpus in errors."""
    if not 0 < percentage < 100:
        raise ValueError(f"--validation_split_percentage must be in (0, 100), got {percentage}.")
    if num_documents < 2:
        raise ValueError(
            f"{source} has {'no text' if num_documents == 0 else 'a single document'}, too little to carve a "
            "validation split from: give --validation_file or more documents (blank lines separate documents)."
        )
    order = list(range(num_documents))
    random.Random(seed).shuffle(order)
    held = np.zeros(num_documents, dtype=bool)
    held[order[: max(1, round(num_documents * percentage / 100))]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


def split_validation(documents: list, percentage: float, seed: int) -> tuple[list, list]:
    """Hold out ``percentage`` % of the documents (at least one) for validation, chosen with ``seed``."""
    train, held = split_document_indices(len(documents), percentage, seed)
    return [documents[i] for i in train], [documents[i] for i in held]


# ------------------------------------------------------------------------------------------- tokenizing
def tokenize_documents(
    documents: list[list[str]], tokenizer, sentences: bool = False
) -> list[list[list[int]]]:
    """Documents of text segments -> documents of token-id segments (no special tokens; empty ones dropped,
    which loses no tokens). ``sentences=True`` splits paragraphs into sentences first (for NSP)."""
    if sentences:
        documents = [[s for p in doc for s in split_sentences(p)] for doc in documents]
    flat = [segment for doc in documents for segment in doc]
    ids = tokenizer(flat, add_special_tokens=False, verbose=False)["input_ids"] if flat else []
    out, k = [], 0
    for doc in documents:
        segs = [s for s in ids[k : k + len(doc)] if s]
        k += len(doc)
        if segs:
            out.append(segs)
    return out


# ------------------------------------------------------------------------------------------- sequences
def packing_mode(packing: bool | str) -> str:
    """``True``/``False`` (the old ``--packing`` switch) or a mode name -> a checked mode name."""
    mode = {True: "full-sentences", False: "none"}.get(packing, packing)
    if mode not in PACKING_MODES:
        raise ValueError(f"--packing_mode must be one of {', '.join(PACKING_MODES)}, got {packing!r}.")
    return mode


def mlm_sequences(
    tokenized_documents, tokenizer, max_seq_length: int, packing: bool | str
) -> list[list[int]]:
    """MLM input sequences of in-memory documents (see the module docstring for the packing modes;
    ``True`` means ``full-sentences``, ``False`` means ``none``). The last, shorter sequence is kept."""
    if max_seq_length < 8:
        raise ValueError(f"--max_seq_length must be at least 8, got {max_seq_length}.")
    mode = packing_mode(packing)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    streams = [[*(i for s in doc for i in s), sep] for doc in tokenized_documents]
    if mode == "full-sentences":
        streams = [[t for stream in streams for t in stream]]
    if mode == "none":
        body = max_seq_length - 2
        return [[cls, *ids[i : i + body], sep] for *ids, _ in streams for i in range(0, len(ids), body)]
    body = max_seq_length - 1
    return [[cls, *stream[i : i + body]] for stream in streams for i in range(0, len(stream), body)]


def nsp_examples(
    tokenized_documents, tokenizer, max_seq_length: int, seed: int, short_seq_prob: float = 0.1
) -> list[dict]:
    """Segment pairs for next sentence prediction, as in google-research/bert ``create_pretraining_data``.

    Consecutive segments of a document are gathered up to a target length and cut at a random point into
    A and B. Half the time B is the true continuation (``next_sentence_label`` 0); otherwise B is taken
    from another, random document (label 1) and the unused segments are put back. Pairs are truncated to
    fit ``[CLS] A [SEP] B [SEP]``; ``token_type_ids`` are 0 for A and 1 for B.
    """
    if len(tokenized_documents) < 2:
        raise ValueError(
            "--nsp needs a corpus with several documents (separated by blank lines in text files, "
            "one per row otherwise): random next segments must come from another document."
        )
    return list(
        iter_nsp_examples(
            tokenized_documents,
            tokenizer.cls_token_id,
            tokenizer.sep_token_id,
            max_seq_length,
            seed,
            short_seq_prob,
        )
    )


def iter_nsp_examples(
    tokenized_documents: Sequence, cls: int, sep: int, max_seq_length: int, seed: int, short_seq_prob: float
) -> Iterator[dict]:
    """The examples of :func:`nsp_examples`, one at a time (``tokenized_documents`` may be lazy)."""
    rng = random.Random(seed)
    max_tokens = max_seq_length - 3
    for d, document in enumerate(tokenized_documents):
        target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
        chunk, length, i = [], 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a = [t for s in chunk[:a_end] for t in s]
                if len(chunk) == 1 or rng.random() < 0.5:
                    label = 1
                    other = rng.randrange(len(tokenized_documents) - 1)
                    other += other >= d
                    random_doc = tokenized_documents[other]
                    start = rng.randrange(len(random_doc))
                    b = []
                    for s in random_doc[start:]:
                        b += s
                        if len(b) >= target - len(a):
                            break
                    i -= len(chunk) - a_end  # put the unused segments back
                else:
                    label = 0
                    b = [t for s in chunk[a_end:] for t in s]
                _truncate_pair(a, b, max_tokens, rng)
                yield {
                    "input_ids": [cls, *a, sep, *b, sep],
                    "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
                    "next_sentence_label": label,
                }
                chunk, length = [], 0
            i += 1


def _truncate_pair(a: list, b: list, max_tokens: int, rng: random.Random) -> None:
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def to_dataset(sequences_or_examples: list) -> datasets.Dataset:
    """A ``datasets.Dataset`` with an ``idx`` column (the key of each example's masking draw)."""
    rows = [s if isinstance(s, dict) else {"input_ids": s} for s in sequences_or_examples]
    columns = {key: [r[key] for r in rows] for key in rows[0]} if rows else {"input_ids": []}
    columns["idx"] = list(range(len(rows)))
    return datasets.Dataset.from_dict(columns)


# ------------------------------------------------------------------------------------- stored corpus
def _chunk_index(lengths: np.ndarray, body: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut pieces of ``lengths`` tokens into chunks of at most ``body``: (piece of each chunk, its offset
    in that piece)."""
    counts = -(-lengths // body)
    piece = np.repeat(np.arange(len(lengths)), counts)
    first_chunk = np.cumsum(counts) - counts
    return piece, (np.arange(len(piece)) - first_chunk[piece]) * body


class StoredSequences(torch.utils.data.Dataset):
    """The MLM sequences of a prepared corpus (:class:`~training.corpus.CorpusStore`), read from the
    memory-mapped token array when asked for: only an index of (start, length) per sequence lives in
    memory (12 bytes a sequence), never the tokens.

    ``documents`` selects and orders the documents (e.g. the training split); ``None`` takes all. The
    sequences equal those of :func:`mlm_sequences` on the same documents and packing mode. Items are
    ``{"input_ids": [...], "idx": i}``; ``idx`` keys the example's masking draw.
    """

    def __init__(
        self, store: CorpusStore, documents, max_seq_length: int, packing: str, cls_id: int, sep_id: int
    ):
        if max_seq_length < 8:
            raise ValueError(f"--max_seq_length must be at least 8, got {max_seq_length}.")
        self.store, self.mode, self.cls_id, self.sep_id = store, packing_mode(packing), cls_id, sep_id
        offsets = np.asarray(store.document_offsets())
        chosen = (
            np.arange(store.num_documents) if documents is None else np.asarray(documents, dtype=np.int64)
        )
        starts, lengths = offsets[chosen], offsets[chosen + 1] - offsets[chosen]
        keep = lengths > 0  # documents without tokens add nothing, not even a separator
        starts, lengths = starts[keep], lengths[keep]
        self.body = max_seq_length - (2 if self.mode == "none" else 1)
        if self.mode == "full-sentences":
            # One stream of the chosen documents: sequence i covers stream positions [i * body, ...).
            self.doc_starts, self.doc_ends_in_stream = starts, np.cumsum(lengths)
            total = int(self.doc_ends_in_stream[-1]) if len(lengths) else 0
            self.num_sequences = -(-total // self.body)
        else:
            content = lengths - (1 if self.mode == "none" else 0)  # "none" adds its own [SEP] per chunk
            piece, offset = _chunk_index(content, self.body)
            self.seq_starts = starts[piece] + offset
            self.seq_lengths = np.minimum(self.body, content[piece] - offset).astype(np.int32)
            self.num_sequences = len(piece)
        self._tokens = None

    def __getstate__(self):  # dataloader workers map the file themselves
        return {**self.__dict__, "_tokens": None}

    def __len__(self) -> int:
        return self.num_sequences

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.num_sequences:
            raise IndexError(index)
        if self._tokens is None:
            self._tokens = self.store.tokens()
        if self.mode == "full-sentences":
            ids = self._stream_slice(index * self.body, (index + 1) * self.body)
        else:
            start = int(self.seq_starts[index])
            ids = self._tokens[start : start + int(self.seq_lengths[index])].tolist()
        tail = [self.sep_id] if self.mode == "none" else []
        return {"input_ids": [self.cls_id, *ids, *tail], "idx": index}

    def _stream_slice(self, begin: int, end: int) -> list[int]:
        ends = self.doc_ends_in_stream
        end = min(end, int(ends[-1]))
        first, last = np.searchsorted(ends, [begin, end - 1], side="right")
        ids = []
        for doc in range(int(first), int(last) + 1):
            doc_begin = int(ends[doc - 1]) if doc else 0
            lo, hi = max(begin, doc_begin) - doc_begin, min(end, int(ends[doc])) - doc_begin
            start = int(self.doc_starts[doc])
            ids += self._tokens[start + lo : start + hi].tolist()
        return ids


class StoredDocuments(Sequence):
    """Documents of a prepared corpus as lists of token-id segments (separators excluded), read lazily;
    only documents with tokens, as :func:`tokenize_documents` gives them."""

    def __init__(self, store: CorpusStore, documents=None):
        self.store = store
        doc_segments = np.asarray(store.document_segment_offsets())
        chosen = (
            np.arange(store.num_documents) if documents is None else np.asarray(documents, dtype=np.int64)
        )
        chosen = chosen[doc_segments[chosen + 1] > doc_segments[chosen]]
        self.first, self.stop = doc_segments[chosen], doc_segments[chosen + 1]
        self.segments = store.segment_offsets()
        self.tokens = store.tokens()

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, index: int) -> list[list[int]]:
        spans = self.segments[int(self.first[index]) : int(self.stop[index])]
        return [self.tokens[start:end].tolist() for start, end in spans]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class StoredExamples(torch.utils.data.Dataset):
    """NSP examples written by :func:`stored_nsp_examples`: flat ids, per-example offsets, the length of
    ``[CLS] A [SEP]`` and the label, memory-mapped."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.offsets = np.load(self.folder / "offsets.npy")
        self.first_lengths = np.load(self.folder / "first_lengths.npy")
        self.labels = np.load(self.folder / "labels.npy")
        self._tokens = None

    def __getstate__(self):
        return {**self.__dict__, "_tokens": None}

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < len(self):
            raise IndexError(index)
        if self._tokens is None:
            self._tokens = np.memmap(self.folder / "tokens.bin", dtype=np.int32, mode="r")
        ids = self._tokens[int(self.offsets[index]) : int(self.offsets[index + 1])].tolist()
        first = int(self.first_lengths[index])
        return {
            "input_ids": ids,
            "token_type_ids": [0] * first + [1] * (len(ids) - first),
            "next_sentence_label": int(self.labels[index]),
            "idx": index,
        }


def stored_nsp_examples(
    store: CorpusStore, documents, cls_id: int, sep_id: int, max_seq_length: int, seed: int
) -> StoredExamples:
    """NSP examples of a prepared (sentence-segmented) corpus, built once and cached next to it."""
    chosen = np.arange(store.num_documents) if documents is None else np.asarray(documents, dtype=np.int64)
    key = hashlib.sha256(json.dumps([max_seq_length, seed, cls_id, sep_id]).encode() + chosen.tobytes())
    folder = store.folder / f"nsp-{key.hexdigest()[:16]}"
    if (folder / "labels.npy").is_file():
        return StoredExamples(folder)
    partial = store.folder / f".{folder.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        tokenized = StoredDocuments(store, chosen)
        if len(tokenized) < 2:
            raise ValueError(
                "--nsp needs a corpus with several documents (separated by blank lines in text files, "
                "one per row otherwise): random next segments must come from another document."
            )
        # Compact arrays, not lists of Python ints: a few bytes per example.
        offsets, first_lengths, labels = array("q", [0]), array("i"), array("b")
        with open(partial / "tokens.bin", "wb") as handle:
            for example in iter_nsp_examples(tokenized, cls_id, sep_id, max_seq_length, seed, 0.1):
                handle.write(np.asarray(example["input_ids"], dtype=np.int32).tobytes())
                offsets.append(offsets[-1] + len(example["input_ids"]))
                first_lengths.append(example["token_type_ids"].count(0))
                labels.append(example["next_sentence_label"])
        np.save(partial / "offsets.npy", np.asarray(offsets, dtype=np.int64))
        np.save(partial / "first_lengths.npy", np.asarray(first_lengths, dtype=np.int32))
        np.save(partial / "labels.npy", np.asarray(labels, dtype=np.int8))  # written last: complete
        if folder.exists():  # another process built the same examples first
            shutil.rmtree(partial)
        else:
            partial.rename(folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return StoredExamples(folder)


# ------------------------------------------------------------------------------------------- streaming
class StreamingMLMDataset(torch.utils.data.IterableDataset):
    """Read, tokenize and pack a corpus on the fly, for runs that should start at once.

    The documents are read in chunks of ``documents_per_chunk``. Chunk ``c`` belongs to shard
    ``c % shards``, where the shards are ``num_shards`` (e.g. processes that each read their own share)
    times the dataloader workers; a shard reads past the other shards' chunks without tokenizing them,
    and packs its own chunks into sequences. The order is deterministic for a given number of shards, so
    a resumed run (same processes and workers) skips exactly the batches already seen. ``idx`` is unique
    across shards (it keys the masking draw).
    """

    def __init__(
        self,
        path: str,
        tokenizer,
        max_seq_length: int,
        text_column: str | None = None,
        packing: bool | str = "full-sentences",
        documents_per_chunk: int = 256,
        num_shards: int = 1,
        shard_index: int = 0,
    ):
        from briskbert.training.data.corpus import TokenEncoder

        check_file(path, "--train_file")
        load_corpus(path, text_column, streaming=True)  # column check up front
        if not 0 <= shard_index < num_shards:
            raise ValueError(f"shard_index {shard_index} is not in [0, num_shards={num_shards}).")
        self.path, self.text_column, self.max_seq_length = path, text_column, max_seq_length
        self.mode, self.documents_per_chunk = packing_mode(packing), documents_per_chunk
        self.num_shards, self.shard_index = num_shards, shard_index
        self.encoder = TokenEncoder(tokenizer)
        self.cls_id, self.sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id

    def _shard(self) -> tuple[int, int]:
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        return self.num_shards * workers, self.shard_index * workers + worker

    def _own_chunks(self, shards: int, shard: int) -> Iterator[list[list[str]]]:
        from briskbert.training.data.corpus import CorpusSource, iter_documents

        chunk, number = [], 0
        for document in iter_documents(CorpusSource(self.path, self.text_column)):
            chunk.append(document)
            if len(chunk) == self.documents_per_chunk:
                if number % shards == shard:
                    yield chunk
                chunk, number = [], number + 1
        if chunk and number % shards == shard:
            yield chunk

    def __iter__(self):
        from briskbert.training.data.corpus import encode_documents

        shards, shard = self._shard()
        body = self.max_seq_length - (2 if self.mode == "none" else 1)
        tail = [self.sep_id] if self.mode == "none" else []
        carry, local = np.zeros(0, dtype=self.encoder.dtype), 0
        for chunk in self._own_chunks(shards, shard):
            encoded = encode_documents(self.encoder, chunk, sentences=False)
            if self.mode == "full-sentences":
                stream = np.concatenate([carry, encoded.tokens])
                usable = len(stream) // body * body
                pieces = [stream[i : i + body] for i in range(0, usable, body)]
                carry = stream[usable:]
            else:
                offsets = np.concatenate([[0], np.cumsum(encoded.document_lengths)])
                documents = [encoded.tokens[a:b] for a, b in zip(offsets[:-1], offsets[1:]) if b > a]
                documents = [doc[:-1] if self.mode == "none" else doc for doc in documents]
                pieces = [doc[i : i + body] for doc in documents for i in range(0, len(doc), body)]
            for piece in pieces:
                yield {"input_ids": [self.cls_id, *piece.tolist(), *tail], "idx": local * shards + shard}
                local += 1
        if len(carry):
            yield {"input_ids": [self.cls_id, *carry.tolist()], "idx": local * shards + shard}
