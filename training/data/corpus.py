"""A tokenized corpus on disk: prepared once, in parallel, with bounded memory (a long line is read in pieces cut
before a word's whitespace, which keeps the ids of the whole); memory-mapped afterwards. A store folder:

    tokens.bin        every document's ids, each non-empty document followed by the separator id
    documents.npy     int64 offsets into tokens.bin, one more than there are documents
    segments.npy      int64 (start, end) of every segment (paragraph, or sentence for NSP)
    doc_segments.npy  int64 offsets into segments.npy per document
    meta.json, manifest.json (each file's size and sha256, written last)

Stores are cached under a fingerprint of the input, the tokenizer and the segmentation, and reused only when
their files match the manifest and their ids are in range.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import shutil
import time
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from briskbert.errors import SettingError, UserError
from briskbert.files import MANIFEST_FILE, manifest_problem, write_manifest
from briskbert.inputs import check_text_file

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
STORE_VERSION = 2  # part of a store's fingerprint: raise it when the same inputs would give other ids
_CHUNK_CHARACTERS = 1 << 20  # text per tokenization job: large enough to amortise the hand-over
_PIECE_CHARACTERS = 1 << 16  # the longest text read or tokenized at once
_FINGERPRINT_SAMPLE = 1 << 16
_CHECK_TOKENS = 1 << 24  # token ids read at a time when checking a cached store
META_FILE = "meta.json"


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
    if not Path(path).is_file():
        raise SettingError(name, f"{path}: no such file.")
    if Path(path).stat().st_size == 0:
        raise SettingError(name, f"{path}: the file is empty.")
    try:
        file_builder(path)
    except ValueError as error:
        raise SettingError(name, str(error)) from None


def load_corpus(path: str, text_column: str | None = None):
    """A streamed ``datasets`` IterableDataset of the file and the name of its text column (checked)."""
    import datasets

    builder, kwargs = file_builder(path)
    ds = datasets.load_dataset(builder, data_files=str(path), split="train", streaming=True, **kwargs)
    columns = list(ds.features or next(iter(ds), {}))  # a streamed table's columns are its first row's
    column = text_column or ("text" if "text" in columns else None)
    if column not in columns:
        raise ValueError(
            f"{path}: no text column {column or '(none given)'!r}; the file has columns {columns}. "
            "Give one of them as text_column."
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

    @property
    def label(self) -> str:
        return self.path or f"{self.dataset_name}[{self.split}]"

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

    def lines(self) -> Iterator[tuple[str, bool]]:
        """The text as ``(piece, whether it ends its line)``, pieces at most ``_PIECE_CHARACTERS`` long; a row of
        a tabular file is one document: its non-blank lines, then a blank one."""
        if self.path and file_builder(self.path)[0] == "text":
            return _text_file_pieces(self.path)
        return (
            (line[i : i + _PIECE_CHARACTERS], i + _PIECE_CHARACTERS >= len(line))
            for line in _dataset_lines(self)
            for i in range(0, max(len(line), 1), _PIECE_CHARACTERS)
        )


def _text_file_pieces(path: str) -> Iterator[tuple[str, bool]]:
    """A UTF-8 text file as :meth:`CorpusSource.lines`; a decoding error names the file and the line."""
    with open(path, encoding="utf-8") as handle:
        try:
            piece = handle.readline(_PIECE_CHARACTERS)
            while piece:
                following = handle.readline(_PIECE_CHARACTERS)
                yield piece.rstrip("\n"), piece.endswith("\n") or not following
                piece = following
        except UnicodeDecodeError:
            try:
                check_text_file(path, "corpus")  # names the byte and its line
            except SettingError as error:
                raise CorpusError(error.problem) from None


def _dataset_lines(source: CorpusSource) -> Iterator[str]:
    """A Hub dataset's rows (each a line); a tabular file's rows as their non-blank lines, then a blank one."""
    import datasets

    if source.path:
        dataset, column = load_corpus(source.path, source.text_column)
    else:
        dataset = datasets.load_dataset(
            source.dataset_name, source.dataset_config_name, split=source.split, streaming=True
        )
        column = source.text_column or "text"
    for row in dataset:
        text = row[column] or ""
        if source.dataset_name:
            yield text
        else:
            yield from (line for line in text.split("\n") if line.strip())
            yield ""


def _whole_words(pieces: Iterator[tuple[str, bool]]) -> Iterator[tuple[str, bool]]:
    """The pieces of each line cut again just before their last word's whitespace, so that neither a word nor
    a run of whitespace is split (a run without whitespace longer than a quarter piece is cut where it is)."""
    carry = ""
    for piece, ends_line in pieces:
        piece, carry = carry + piece, ""
        words = piece.rstrip()
        cut = len(words) - len(words.rsplit(maxsplit=1)[-1]) - 1 if words else -1
        if not ends_line and cut >= 0 and len(piece) - cut <= _PIECE_CHARACTERS // 4:
            # The next piece starts with the whitespace just before the last word: whitespace runs stay whole.
            piece, carry = piece[:cut], piece[cut:]
        yield piece, ends_line


def iter_paragraphs(source: CorpusSource) -> Iterator[tuple[str, bool]]:
    """The non-blank lines, stripped, as ``(paragraph, whether it starts a document)``: in plain text a blank
    line ends a document. A line longer than ``_PIECE_CHARACTERS`` comes as several paragraphs."""
    in_document = line_has_text = False
    for piece, ends_line in _whole_words(source.lines()):
        text = piece if line_has_text else piece.lstrip()
        text = text.rstrip() if ends_line else text
        if text.strip():
            yield text, not in_document
            in_document = line_has_text = True
        if ends_line:
            in_document, line_has_text = in_document and line_has_text, False


def iter_documents(source: CorpusSource) -> Iterator[list[str]]:
    """Documents as lists of the paragraphs of :func:`iter_paragraphs`, one at a time."""
    document: list[str] = []
    for text, starts in iter_paragraphs(source):
        if starts and document:
            yield document
            document = []
        document.append(text)
    if document:
        yield document


# ------------------------------------------------------------------------------------------------ encoder
class TokenEncoder:
    """The ids of ``tokenizer(texts, add_special_tokens=False)`` from the Rust backend directly, at a fraction of
    the cost; picklable, so worker processes get their own."""

    def __init__(self, tokenizer):
        from tokenizers import Tokenizer

        backend_json = tokenizer.backend_tokenizer.to_str()
        self.fingerprint = hashlib.sha256(backend_json.encode()).hexdigest()
        self.backend = Tokenizer.from_str(backend_json)
        # A tokenizer.json saved for a model may pad and truncate every text: corpus text is neither.
        self.backend.no_truncation()
        self.backend.no_padding()
        self.vocab_size = len(tokenizer)
        self.separator_id = tokenizer.sep_token_id
        self.dtype = np.uint16 if self.vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32

    def __call__(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.backend.encode_batch_fast(texts, add_special_tokens=False)]


def encode_documents(
    encoder: TokenEncoder, documents: list[list[str]], sentences: bool, open_last: bool = False
):
    """Tokenize documents of text segments, dropping empty segments: ``(tokens, tokens per document with its
    separator, tokens per segment, segments per document)``. With ``open_last`` the last document (which may go
    on in the next chunk) gets no separator."""
    if sentences:
        documents = [[s for p in doc for s in split_sentences(p)] for doc in documents]
    flat_ids = encoder([segment for doc in documents for segment in doc]) if documents else []
    pieces, doc_lengths, seg_lengths, doc_segments, k = [], [], [], [], 0
    for number, doc in enumerate(documents):
        segments = [ids for ids in flat_ids[k : k + len(doc)] if ids]
        k += len(doc)
        closed = bool(segments) and not (open_last and number == len(documents) - 1)
        pieces += [*segments, [encoder.separator_id]] if closed else segments
        seg_lengths += map(len, segments)
        doc_lengths.append(sum(map(len, segments)) + closed)
        doc_segments.append(len(segments))
    tokens = np.fromiter(chain.from_iterable(pieces), dtype=encoder.dtype, count=sum(doc_lengths))
    return tokens, *(np.asarray(x, dtype=np.int64) for x in (doc_lengths, seg_lengths, doc_segments))


# -------------------------------------------------------------------------------------------------- store
class CorpusStore:
    """A prepared store, read-only and memory-mapped."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.meta = json.loads((self.folder / META_FILE).read_text())
        self.num_documents, self.num_tokens = self.meta["num_documents"], self.meta["num_tokens"]

    def tokens(self) -> np.ndarray:
        return np.memmap(self.folder / "tokens.bin", dtype=self.meta["dtype"], mode="r")

    def document_offsets(self) -> np.ndarray:
        return np.load(self.folder / "documents.npy", mmap_mode="r")

    def segment_offsets(self) -> np.ndarray:
        return np.load(self.folder / "segments.npy", mmap_mode="r")

    def document_segment_offsets(self) -> np.ndarray:
        return np.load(self.folder / "doc_segments.npy", mmap_mode="r")


def verified_store(folder: Path, vocab_size: int, log) -> CorpusStore | None:
    """The cached store in ``folder`` if its files match its manifest and its ids are below ``vocab_size``;
    otherwise None, with the folder removed and one line saying what was wrong."""
    problem = manifest_problem(folder)
    if problem is None and not (folder / MANIFEST_FILE).is_file():
        problem = f"{folder} has no {MANIFEST_FILE} (an interrupted preparation, or an older version's)"
    if problem is None:
        store = CorpusStore(folder)
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


@dataclass(frozen=True)
class PreparationSettings:
    sentences: bool = False  # split paragraphs into sentences (next sentence prediction needs them)
    num_workers: int = 1
    cache_dir: str | None = None
    overwrite: bool = False  # prepare again even when the cache has the store
    show_progress: bool = True


def prepare_corpus(source: CorpusSource, tokenizer, settings: PreparationSettings, log=print) -> CorpusStore:
    """The store of ``source`` tokenized with ``tokenizer``, from the cache or prepared and cached."""
    encoder = TokenEncoder(tokenizer)
    cache_dir = Path(settings.cache_dir) if settings.cache_dir else default_cache_dir()
    name = Path(source.path).name if source.path else source.dataset_name.replace("/", "--")
    identity = dict(version=STORE_VERSION, source=source.fingerprint(), sentences=settings.sentences)
    identity["tokenizer"] = encoder.fingerprint
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
    folder = cache_dir / f"{name}-{key}"
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
    store = CorpusStore(folder)
    log(
        f"Prepared {source.label}: {store.num_documents:,} documents, {store.num_tokens:,} tokens in "
        f"{store.meta['seconds']:.1f} s with {settings.num_workers} worker(s); cached in {folder}"
    )
    return store


def _document_chunks(source: CorpusSource, progress) -> Iterator[tuple[list[list[str]], bool]]:
    """Documents in chunks of about ``_CHUNK_CHARACTERS``, each with whether its first document goes on from
    the chunk before."""
    chunk, characters, continues = [], 0, False
    for text, starts in iter_paragraphs(source):
        if not chunk:
            continues = not starts
        if starts or not chunk:
            chunk.append([])
        chunk[-1].append(text)
        characters += len(text) + 1
        if characters >= _CHUNK_CHARACTERS:
            progress.update(characters)
            yield chunk, continues
            chunk, characters = [], 0
    if chunk:
        progress.update(characters)
        yield chunk, continues


def _encoded_chunks(source, encoder, settings, progress) -> Iterator[tuple[tuple, bool]]:
    """Encoded chunks in corpus order; at most two jobs per worker are in flight, so nothing piles up."""
    chunks = _document_chunks(source, progress)
    if settings.num_workers <= 1:
        for chunk, continues in chunks:
            yield encode_documents(encoder, chunk, settings.sentences, open_last=True), continues
        return
    # Workers tokenize one chunk each, single-threaded (the Rust thread pool would oversubscribe).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Workers start from a clean forkserver, not a fork of this process: a fork copies the locks other
    # threads hold (progress bars, tokenizer and torch pools) and can hang a worker forever.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with context.Pool(settings.num_workers) as pool:
        pending: deque = deque()
        for chunk, continues in chunks:
            job = pool.apply_async(encode_documents, (encoder, chunk, settings.sentences, True))
            pending.append((job, continues))
            if len(pending) >= 2 * settings.num_workers:
                job, continues = pending.popleft()
                yield job.get(), continues
        while pending:
            job, continues = pending.popleft()
            yield job.get(), continues


class _StoreWriter:
    """Appends encoded chunks to tokens.bin and keeps the lengths. A chunk's last document stays open until
    another starts: its length, segment count and separator (when it has tokens) are written once it ends."""

    def __init__(self, handle, encoder: TokenEncoder):
        self.handle = handle
        self.separator = np.asarray([encoder.separator_id], dtype=encoder.dtype)
        self.open: tuple[int, int] | None = None  # tokens and segments of the open document so far
        self.doc_lengths, self.seg_lengths, self.doc_segments = array("q"), array("q"), array("q")

    def add(self, encoded: tuple, continues: bool) -> None:
        tokens, lengths, segment_lengths, segments = encoded
        if continues:
            length, count = self.open
            if length and not lengths[0] and len(lengths) > 1:  # it ends here without tokens of its own
                tokens, lengths[0] = np.concatenate([self.separator, tokens]), 1
            lengths[0] += length
            segments[0] += count
        else:
            self.end_document()
        self.open = int(lengths[-1]), int(segments[-1])
        self._write(tokens, lengths[:-1], segment_lengths, segments[:-1])

    def end_document(self) -> None:
        if self.open is not None:
            (length, count), self.open = self.open, None
            tokens = self.separator[: 1 if length else 0]
            self._write(tokens, [length + len(tokens)], [], [count])

    def _write(self, tokens, doc_lengths, seg_lengths, doc_segments) -> None:
        self.handle.write(tokens.tobytes())
        for kept, lengths in zip(
            (self.doc_lengths, self.seg_lengths, self.doc_segments), (doc_lengths, seg_lengths, doc_segments)
        ):
            kept.frombytes(np.asarray(lengths, dtype=np.int64).tobytes())


def _write_store(source, encoder, settings, folder: Path) -> dict:
    from tqdm.auto import tqdm

    progress = tqdm(
        total=Path(source.path).stat().st_size if source.path else None,
        unit="B",
        unit_scale=True,
        desc=f"preparing {Path(source.label).name}",
        disable=None if settings.show_progress else True,  # None: no bar into a file or a pipe
        mininterval=2,
    )
    with progress, open(folder / "tokens.bin", "wb") as handle:
        writer = _StoreWriter(handle, encoder)
        for encoded, continues in _encoded_chunks(source, encoder, settings, progress):
            writer.add(encoded, continues)
        writer.end_document()
        progress.update(max(0, (progress.total or 0) - progress.n))  # the estimate counts characters
    doc_offsets = np.concatenate([[0], np.cumsum(writer.doc_lengths, dtype=np.int64)])
    if doc_offsets[-1] == 0:
        raise CorpusError(f"{source.label} holds no text (only empty lines or rows): give a file with text.")
    doc_segments = np.concatenate([[0], np.cumsum(writer.doc_segments, dtype=np.int64)])
    seg_lengths = np.asarray(writer.seg_lengths, dtype=np.int64)
    np.save(folder / "documents.npy", doc_offsets)
    np.save(folder / "doc_segments.npy", doc_segments)
    np.save(folder / "segments.npy", _segment_spans(seg_lengths, doc_offsets, doc_segments))
    return {
        "version": STORE_VERSION,
        "num_documents": len(doc_offsets) - 1,
        "num_tokens": int(doc_offsets[-1]),
        "num_segments": len(seg_lengths),
        "dtype": np.dtype(encoder.dtype).name,
        "separator_id": encoder.separator_id,
        "settings": {"sentences": settings.sentences},
    }


def _segment_spans(seg_lengths: np.ndarray, doc_offsets: np.ndarray, doc_segments: np.ndarray) -> np.ndarray:
    """(start, end) of every segment in tokens.bin (a non-empty document ends with a separator of no segment)."""
    doc_of_segment = np.repeat(np.arange(len(doc_segments) - 1), np.diff(doc_segments))
    before = np.cumsum(seg_lengths) - seg_lengths  # segment tokens before each segment, corpus-wide
    starts = doc_offsets[:-1][doc_of_segment] + before - before[doc_segments[:-1][doc_of_segment]]
    return np.stack([starts, starts + seg_lengths], axis=1).astype(np.int64)
