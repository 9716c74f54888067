"""A tokenized corpus on disk: prepared once, in parallel, with bounded memory; memory-mapped afterwards.

:func:`prepare_corpus` reads a corpus file (or a ``datasets`` dataset) as a stream, groups its lines into
documents (:func:`iter_documents`), tokenizes chunks of documents in
``preprocessing_num_workers`` processes and appends the ids to a flat array on disk. Nothing
proportional to the corpus is kept in Python lists, so the memory used does not grow with the corpus.

A store is a folder::

    tokens.bin     the token ids of every document, one after the other (uint16 when the vocabulary
                   fits, else uint32); each document that has tokens is followed by the separator id
    documents.npy  int64 offsets into tokens.bin, one more than there are documents (empty documents,
                   whose text gives no tokens, have length 0 and no separator)
    segments.npy   int64 (start, end) in tokens.bin of every segment (paragraph, or sentence for NSP)
    doc_segments.npy  int64 offsets into segments.npy: document d has segments [o[d], o[d + 1])
    meta.json      what was prepared from what
    manifest.json  each file's size and sha256, written last (a folder without it is incomplete)

Stores are cached under ``cache_dir`` in a folder named after a fingerprint of the input (path, size,
modification time and sampled content of the file), the tokenizer (its full serialisation) and the
segmentation; any change gives a new fingerprint and a new preparation. Preparation writes into a
temporary folder that is renamed into place when complete: an interrupted run leaves nothing half-written.
A cached store is reused only when it proves itself (its manifest, and token ids within the vocabulary);
otherwise it is prepared again, with one line naming what was wrong.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import shutil
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from briskbert.errors import SettingError, UserError
from briskbert.files import write_manifest
from briskbert.training.data.token_store import META_FILE, CorpusStore, verified_store

BUILDERS = {
    ".txt": "text",
    ".text": "text",
    ".raw": "text",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
}
# How documents become sequences (see :mod:`training.data.pretraining_data`).
PACKING_MODES = ("none", "full-sentences", "doc-sentences")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9@])")
STORE_VERSION = 1
_CHUNK_CHARACTERS = 1 << 20  # text per tokenization job: large enough to amortise the hand-over
_FINGERPRINT_SAMPLE = 1 << 16


class CorpusError(UserError):
    """The corpus cannot be used as given (the message names the file and the fix)."""


def default_cache_dir() -> Path:
    """``$BRISKBERT_CACHE/pretraining_data``, else ``$XDG_CACHE_HOME`` (or ``~/.cache``)``/briskbert/...``."""
    root = os.environ.get("BRISKBERT_CACHE")
    if root:
        return Path(root) / "pretraining_data"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "briskbert" / "pretraining_data"


# ------------------------------------------------------------------------------------------------ source
def file_builder(path: str) -> tuple[str, dict]:
    """The ``datasets`` builder name for a corpus file and its keyword arguments."""
    suffix = Path(path).suffix.lower()
    if suffix not in BUILDERS:
        raise ValueError(
            f"{path}: unsupported file type {suffix!r}; use one of {', '.join(sorted(BUILDERS))}."
        )
    return BUILDERS[suffix], ({"delimiter": "\t"} if suffix == ".tsv" else {})


def check_corpus_file(path: str, name: str) -> None:
    """A readable, non-empty corpus file of a supported type, or a :class:`SettingError` naming ``name``."""
    file = Path(path)
    if not file.is_file():
        raise SettingError(name, f"{path}: no such file.")
    if file.stat().st_size == 0:
        raise SettingError(name, f"{path}: the file is empty.")
    try:
        file_builder(path)
    except ValueError as error:
        raise SettingError(name, str(error)) from None


def load_corpus(path: str, text_column: str | None = None, streaming: bool = False):
    """A ``datasets`` (Iterable)Dataset of the file and the name of its text column (checked)."""
    import datasets

    builder, kwargs = file_builder(path)
    ds = datasets.load_dataset(builder, data_files=str(path), split="train", streaming=streaming, **kwargs)
    columns = list(ds.features) if ds.features else []
    column = text_column or ("text" if "text" in columns or builder == "text" else None)
    if column is None or (columns and column not in columns):
        raise ValueError(
            f"{path}: no text column {column or '(none given)'!r}; the file has columns {columns}. "
            "Pass --text_column with one of them."
        )
    return ds, column


def split_sentences(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph) if s.strip()]


@dataclass(frozen=True)
class CorpusSource:
    """Where the text comes from: a file (``path``) or a ``datasets`` dataset (``dataset_name``)."""

    path: str | None = None
    text_column: str | None = None
    dataset_name: str | None = None
    dataset_config_name: str | None = None
    split: str = "train"

    def __post_init__(self):
        if (self.path is None) == (self.dataset_name is None):
            raise ValueError("A CorpusSource needs exactly one of `path` and `dataset_name`.")

    @property
    def label(self) -> str:
        return self.path or f"{self.dataset_name}[{self.split}]"

    @property
    def blank_line_separates(self) -> bool:
        """Plain text: a blank line ends a document; tabular rows are one document each."""
        if self.dataset_name:
            return True
        return file_builder(self.path)[0] == "text"

    def fingerprint(self) -> dict:
        if self.dataset_name:
            return {"dataset": self.dataset_name, "config": self.dataset_config_name, "split": self.split}
        path = Path(self.path).resolve()
        stat = path.stat()
        sample = hashlib.sha256()
        with open(path, "rb") as handle:  # first and last bytes: catches edits that keep size and mtime
            sample.update(handle.read(_FINGERPRINT_SAMPLE))
            handle.seek(max(0, stat.st_size - _FINGERPRINT_SAMPLE))
            sample.update(handle.read())
        return {
            "path": str(path),
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "sample": sample.hexdigest(),
            "column": self.text_column,
        }

    def rows(self) -> Iterator[str]:
        """The raw rows (lines of a text file, cells of the text column) in order."""
        if self.path and self.blank_line_separates:
            return _text_file_lines(self.path)
        return _dataset_rows(self)

    def size_hint(self) -> int | None:
        """Bytes of the file (for the progress bar), when known."""
        return Path(self.path).stat().st_size if self.path else None


def _text_file_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 text file (without the newline); a decoding error names the file and the line."""
    with open(path, encoding="utf-8") as handle:
        try:
            for line in handle:
                yield line.rstrip("\n")
        except UnicodeDecodeError:
            from briskbert.tokenization.training import utf8_error_message

            raise CorpusError(utf8_error_message(path)) from None


def _dataset_rows(source: CorpusSource) -> Iterator[str]:
    import datasets

    if source.path:
        dataset, column = load_corpus(source.path, source.text_column, streaming=True)
    else:
        dataset = datasets.load_dataset(
            source.dataset_name, source.dataset_config_name, split=source.split, streaming=True
        )
        column = source.text_column or "text"
    for row in dataset:
        yield row[column] or ""


def iter_documents(source: CorpusSource) -> Iterator[list[str]]:
    """Documents as lists of non-empty, stripped paragraphs, one at a time: in plain text a blank line
    ends a document, in tabular files each row is one (its newlines separate its paragraphs)."""
    blank_line_separates = source.blank_line_separates
    current: list[str] = []
    for text in source.rows():
        if blank_line_separates:
            if text.strip():
                current.append(text.strip())
            elif current:
                yield current
                current = []
        else:
            paragraphs = [p.strip() for p in text.split("\n") if p.strip()]
            if paragraphs:
                yield paragraphs
    if current:
        yield current


# ------------------------------------------------------------------------------------------------ encoder
class TokenEncoder:
    """Token ids of many texts, without special tokens; picklable, so worker processes get their own.

    A tokenizers-backed tokenizer is used through its Rust backend directly (``encode_batch_fast``: no
    offsets, no Python-side ``BatchEncoding``), which gives the same ids as ``tokenizer(texts,
    add_special_tokens=False)`` at a fraction of the cost. Other tokenizers are called as usual.
    """

    def __init__(self, tokenizer):
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.backend_json = backend.to_str() if backend is not None else None
        self.tokenizer = None if backend is not None else tokenizer
        self.vocab_size = len(tokenizer)
        self.separator_id = tokenizer.sep_token_id
        self._backend = None

    def __getstate__(self):
        return {**self.__dict__, "_backend": None}

    def fingerprint(self) -> str:
        if self.backend_json is not None:
            return hashlib.sha256(self.backend_json.encode()).hexdigest()
        vocab = sorted(self.tokenizer.get_vocab().items())
        return hashlib.sha256(json.dumps([type(self.tokenizer).__name__, vocab]).encode()).hexdigest()

    def __call__(self, texts: list[str]) -> list[list[int]]:
        if self.backend_json is None:
            return self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        if self._backend is None:
            from tokenizers import Tokenizer

            self._backend = Tokenizer.from_str(self.backend_json)
        encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
        return [encoding.ids for encoding in encode(texts, add_special_tokens=False)]

    @property
    def dtype(self):
        return np.uint16 if self.vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


@dataclass
class EncodedChunk:
    """A chunk of documents, tokenized: the flat ids and the lengths needed to find each piece again."""

    tokens: np.ndarray
    document_lengths: np.ndarray  # tokens per document, separator included (0: the document is empty)
    segment_lengths: np.ndarray  # tokens per non-empty segment, in order
    document_segments: np.ndarray  # non-empty segments per document


def encode_documents(encoder: TokenEncoder, documents: list[list[str]], sentences: bool) -> EncodedChunk:
    """Tokenize documents of text segments; empty segments are dropped, which loses no tokens."""
    if sentences:
        documents = [[s for p in doc for s in split_sentences(p)] for doc in documents]
    flat_ids = encoder([segment for doc in documents for segment in doc]) if documents else []
    pieces, doc_lengths, seg_lengths, doc_segments, k = [], [], [], [], 0
    for doc in documents:
        segments = [ids for ids in flat_ids[k : k + len(doc)] if ids]
        k += len(doc)
        for ids in segments:
            pieces.append(ids)
            seg_lengths.append(len(ids))
        if segments:
            pieces.append([encoder.separator_id])
        doc_lengths.append(sum(map(len, segments)) + (1 if segments else 0))
        doc_segments.append(len(segments))
    tokens = np.fromiter(chain.from_iterable(pieces), dtype=encoder.dtype, count=sum(doc_lengths))
    return EncodedChunk(
        tokens,
        np.asarray(doc_lengths, dtype=np.int64),
        np.asarray(seg_lengths, dtype=np.int64),
        np.asarray(doc_segments, dtype=np.int64),
    )


# -------------------------------------------------------------------------------------------------- store
@dataclass(frozen=True)
class PreparationSettings:
    """How a corpus is prepared: segmentation, parallelism and where the cache lives."""

    sentences: bool = False  # split paragraphs into sentences (next sentence prediction needs them)
    num_workers: int = 1
    cache_dir: str | None = None
    overwrite: bool = False  # prepare again even when the cache has the store
    show_progress: bool = True


def store_key(source: CorpusSource, encoder: TokenEncoder, sentences: bool) -> str:
    """The fingerprint that names a store: input, tokenizer, segmentation and format version."""
    identity = {
        "version": STORE_VERSION,
        "source": source.fingerprint(),
        "tokenizer": encoder.fingerprint(),
        "sentences": sentences,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def prepare_corpus(source: CorpusSource, tokenizer, settings: PreparationSettings, log=print) -> CorpusStore:
    """The store of ``source`` tokenized with ``tokenizer``: reused from the cache when it is there,
    otherwise prepared (in ``settings.num_workers`` processes) and cached."""
    encoder = TokenEncoder(tokenizer)
    cache_dir = Path(settings.cache_dir) if settings.cache_dir else default_cache_dir()
    name = Path(source.path).name if source.path else source.dataset_name.replace("/", "--")
    folder = cache_dir / f"{name}-{store_key(source, encoder, settings.sentences)}"
    if settings.overwrite and folder.is_dir():
        shutil.rmtree(folder)
    if folder.is_dir():
        store = verified_store(folder, encoder.vocab_size, log)
        if store is not None:
            return store
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = cache_dir / f".{folder.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        start = time.perf_counter()
        meta = _write_store(source, encoder, settings, partial)
        meta.update(source=source.label, seconds=round(time.perf_counter() - start, 2))
        (partial / META_FILE).write_text(json.dumps(meta, indent=2))
        write_manifest(partial)
        try:
            partial.rename(folder)
        except OSError:  # another process finished the same store first: use theirs
            shutil.rmtree(partial, ignore_errors=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    store = CorpusStore.open(folder)
    log(
        f"Prepared {source.label}: {store.num_documents:,} documents, {store.num_tokens:,} tokens in "
        f"{store.meta['seconds']:.1f} s with {settings.num_workers} worker(s); cached in {folder}"
    )
    if store.num_tokens == 0:
        raise UserError(f"{source.label} holds no text (only empty lines or rows): give a file with text.")
    return store


def _document_chunks(source: CorpusSource, progress) -> Iterator[list[list[str]]]:
    chunk, characters = [], 0
    for document in iter_documents(source):
        chunk.append(document)
        characters += sum(map(len, document)) + len(document)
        if characters >= _CHUNK_CHARACTERS:
            progress.update(characters)
            yield chunk
            chunk, characters = [], 0
    if chunk:
        progress.update(characters)
        yield chunk


def _encoded_chunks(source, encoder, settings, progress) -> Iterator[EncodedChunk]:
    """Encoded chunks in corpus order; with several workers at most two jobs per worker are in flight,
    so neither text nor ids pile up in memory."""
    chunks = _document_chunks(source, progress)
    if settings.num_workers <= 1:
        for chunk in chunks:
            yield encode_documents(encoder, chunk, settings.sentences)
        return
    # Workers tokenize one chunk each, single-threaded (the Rust thread pool would oversubscribe).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Workers start from a clean forkserver, not a fork of this process: a fork copies the locks other
    # threads hold (progress bars, tokenizer and torch pools) and can hang a worker forever.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with context.Pool(settings.num_workers) as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.apply_async(encode_documents, (encoder, chunk, settings.sentences)))
            if len(pending) >= 2 * settings.num_workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _write_store(source, encoder, settings, folder: Path) -> dict:
    from tqdm.auto import tqdm

    progress = tqdm(
        total=source.size_hint(),
        unit="B",
        unit_scale=True,
        desc=f"preparing {Path(source.label).name}",
        disable=None if settings.show_progress else True,  # None: no bar into a file or a pipe
        mininterval=2,
    )
    counts = {"tokens": 0, "documents": 0, "segments": 0}
    names = ("tokens.bin", "doc_lengths.bin", "seg_lengths.bin", "doc_segments.bin")
    handles = [open(folder / name, "wb") for name in names]
    try:
        for encoded in _encoded_chunks(source, encoder, settings, progress):
            for handle, array in zip(handles, vars(encoded).values()):  # in the order of `names`
                handle.write(array.tobytes())
            counts["tokens"] += len(encoded.tokens)
            counts["documents"] += len(encoded.document_lengths)
            counts["segments"] += len(encoded.segment_lengths)
        progress.update(max(0, (progress.total or 0) - progress.n))  # the estimate counts characters
    finally:
        for handle in handles:
            handle.close()
        progress.close()
    if counts["documents"] == 0:
        raise CorpusError(
            f"{source.label}: no text found (only empty lines or rows); give a corpus with text."
        )
    _lengths_to_offsets(folder, "doc_lengths.bin", "documents.npy")
    _lengths_to_offsets(folder, "doc_segments.bin", "doc_segments.npy")
    _segment_offsets(folder)
    return {
        "version": STORE_VERSION,
        "num_documents": counts["documents"],
        "num_tokens": counts["tokens"],
        "num_segments": counts["segments"],
        "dtype": np.dtype(encoder.dtype).name,
        "separator_id": encoder.separator_id,
        "settings": {k: v for k, v in asdict(settings).items() if k == "sentences"},
    }


def _lengths_to_offsets(folder: Path, lengths_file: str, offsets_file: str) -> None:
    lengths = np.fromfile(folder / lengths_file, dtype=np.int64)
    np.save(folder / offsets_file, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    (folder / lengths_file).unlink()


def _segment_offsets(folder: Path) -> None:
    """(start, end) of every segment in tokens.bin: a document's segments are contiguous, and each
    non-empty document ends with one separator that belongs to no segment."""
    seg_lengths = np.fromfile(folder / "seg_lengths.bin", dtype=np.int64)
    doc_offsets = np.load(folder / "documents.npy")
    doc_segments = np.load(folder / "doc_segments.npy")
    doc_of_segment = np.repeat(np.arange(len(doc_segments) - 1), np.diff(doc_segments))
    before = np.cumsum(seg_lengths) - seg_lengths  # segment tokens before each segment, corpus-wide
    within_doc = before - before[doc_segments[:-1][doc_of_segment]] if len(seg_lengths) else before
    starts = doc_offsets[:-1][doc_of_segment] + within_doc
    np.save(folder / "segments.npy", np.stack([starts, starts + seg_lengths], axis=1).astype(np.int64))
    (folder / "seg_lengths.bin").unlink()
