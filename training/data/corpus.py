"""A tokenized corpus on disk, prepared once in parallel with bounded memory (a long line is read in pieces cut
before a word's whitespace, which keeps the ids of the whole), then memory-mapped. A store folder holds
``tokens.bin`` (each non-empty document's ids, then the separator), ``documents.npy`` and ``segments.npy``
(int64 offsets of documents, and (start, end) of segments: paragraphs, or sentences for NSP), ``doc_segments.npy``,
``meta.json`` and ``manifest.json``. Stores are cached under a fingerprint of the input, the tokenizer and the
segmentation, and reused only when their files match the manifest and their ids are in range.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from briskbert.errors import SettingError, UserError
from briskbert.files import MANIFEST_FILE, manifest_problem, staged_folder, write_manifest
from briskbert.inputs import check_text_file

# The ``datasets`` builder of each corpus file type.
BUILDERS = dict.fromkeys((".txt", ".text", ".raw"), "text") | dict.fromkeys((".json", ".jsonl"), "json")
BUILDERS |= {".csv": "csv", ".tsv": "csv", ".parquet": "parquet"}
# How documents become sequences (see :mod:`training.data.pretraining_data`).
PACKING_MODES = ("none", "full-sentences", "doc-sentences")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9@])")
STORE_VERSION = 2  # part of a store's fingerprint: raise it when the same inputs would give other ids
_CHUNK_CHARACTERS = 1 << 20  # text per tokenization job: large enough to amortise the hand-over
_PIECE_CHARACTERS = 1 << 16  # the longest text read or tokenized at once
_FINGERPRINT_SAMPLE = 1 << 16
META_FILE = "meta.json"


def default_cache_dir() -> Path:
    """``$BRISKBERT_CACHE/pretraining_data``, else ``$XDG_CACHE_HOME`` (or ``~/.cache``)``/briskbert/...``."""
    root = os.environ.get("BRISKBERT_CACHE")
    if root:
        return Path(root) / "pretraining_data"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "briskbert" / "pretraining_data"


# ------------------------------------------------------------------------------------------------ source
def file_builder(path: str) -> tuple[str, dict]:
    """The ``datasets`` builder name for a corpus file (of a type :func:`check_corpus_file` accepted) and its
    keyword arguments."""
    suffix = Path(path).suffix.lower()
    return BUILDERS[suffix], ({"delimiter": "\t"} if suffix == ".tsv" else {})


def check_corpus_file(path: str, name: str) -> None:
    """A readable, non-empty corpus file of a supported type, or a :class:`SettingError` naming ``name``."""
    suffix = Path(path).suffix.lower()
    if not Path(path).is_file():
        raise SettingError(name, f"{path}: no such file.")
    if Path(path).stat().st_size == 0:
        raise SettingError(name, f"{path}: the file is empty.")
    if suffix not in BUILDERS:
        raise SettingError(
            name, f"{path}: unsupported file type {suffix!r}; use one of {', '.join(sorted(BUILDERS))}."
        )


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
                raise UserError(error.problem) from None


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
        self.separator_id = tokenizer.sep_token_id
        self.dtype = np.uint16 if len(tokenizer) <= np.iinfo(np.uint16).max + 1 else np.uint32

    def __call__(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.backend.encode_batch_fast(texts, add_special_tokens=False)]


def encode_paragraphs(encoder: TokenEncoder, paragraphs: list[str], sentences: bool):
    """``(ids, tokens per segment, segments per paragraph)`` of the paragraphs' non-empty segments (paragraphs,
    or their sentences with ``sentences``), the ids concatenated."""
    texts = [split_sentences(p) if sentences else [p] for p in paragraphs]
    flat = [text for split in texts for text in split]
    ids = encoder(flat) if flat else []
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    paragraph = np.repeat(np.arange(len(paragraphs)), [len(split) for split in texts])
    segments = np.bincount(paragraph[lengths > 0], minlength=len(paragraphs))
    tokens = np.fromiter(chain.from_iterable(ids), dtype=encoder.dtype, count=int(lengths.sum()))
    return tokens, lengths[lengths > 0], segments


def separate_documents(tokens, segment_lengths, segment_documents, previous: int, separator: int):
    """``tokens`` with a separator before each segment of another document than the segment before it
    (``previous``: the document of the segment before the first, -1 if none), and the segments' new starts."""
    before = np.concatenate([[previous], segment_documents])[:-1]
    closes = (segment_documents != before) & (before >= 0)
    starts = np.cumsum(segment_lengths) - segment_lengths
    return np.insert(tokens, starts[closes], separator), starts + np.cumsum(closes)


def document_lengths(segment_documents, segment_lengths, num_documents: int):
    """(tokens per document, its separator included when it has any; segments per document)."""
    segments = np.bincount(segment_documents, minlength=num_documents)
    tokens = np.bincount(segment_documents, weights=segment_lengths, minlength=num_documents)
    return tokens.astype(np.int64) + (segments > 0), segments


def encode_documents(encoder: TokenEncoder, documents: list[list[str]]):
    """The documents' ids, each non-empty one followed by the separator, and the tokens per document."""
    paragraphs = [paragraph for document in documents for paragraph in document]
    tokens, lengths, segments = encode_paragraphs(encoder, paragraphs, sentences=False)
    of_paragraph = np.repeat(np.arange(len(documents)), [len(document) for document in documents])
    docs = np.repeat(of_paragraph, segments)
    # an empty last segment of a document past the last closes the last document too
    ends = np.append(docs, len(documents))
    closed, _ = separate_documents(tokens, np.append(lengths, 0), ends, -1, encoder.separator_id)
    return closed, document_lengths(docs, lengths, len(documents))[0]


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


def verified_store(folder: Path, log) -> CorpusStore | None:
    """The cached store in ``folder`` if its files match its manifest; otherwise None, saying what was wrong."""
    problem = manifest_problem(folder)
    if problem is None and not (folder / MANIFEST_FILE).is_file():
        problem = f"{folder} has no {MANIFEST_FILE} (an interrupted preparation, or an older version's)"
    if problem is not None:
        log(f"The prepared corpus cache is damaged: {problem}; preparing it again.")
        return None
    store = CorpusStore(folder)
    log(
        f"Reusing the prepared corpus {folder} ({store.num_documents:,} documents, {store.num_tokens:,} tokens); "
        "delete that folder to prepare it again."
    )
    return store


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
    if folder.is_dir() and not settings.overwrite:
        store = verified_store(folder, log)
        if store is not None:
            return store
    with staged_folder(folder) as staged:  # replaces a damaged or overwritten store when complete
        start = time.perf_counter()
        meta = _write_store(source, encoder, settings, staged)
        meta.update(source=source.label, seconds=round(time.perf_counter() - start, 2))
        (staged / META_FILE).write_text(json.dumps(meta, indent=2))
        write_manifest(staged)
    store = CorpusStore(folder)
    log(
        f"Prepared {source.label}: {store.num_documents:,} documents, {store.num_tokens:,} tokens in "
        f"{store.meta['seconds']:.1f} s with {settings.num_workers} worker(s); cached in {folder}"
    )
    return store


def _paragraph_chunks(source: CorpusSource, progress) -> Iterator[tuple[list[str], list[bool]]]:
    """The paragraphs in chunks of about ``_CHUNK_CHARACTERS``: (texts, whether each starts a document)."""
    texts, starts, characters = [], [], 0
    for text, start in iter_paragraphs(source):
        texts.append(text)
        starts.append(start)
        characters += len(text) + 1
        if characters >= _CHUNK_CHARACTERS:
            progress.update(characters)
            yield texts, starts
            texts, starts, characters = [], [], 0
    if texts:
        progress.update(characters)
        yield texts, starts


def _encoded_chunks(source, encoder, settings, progress) -> Iterator[tuple[tuple, list[bool]]]:
    """Encoded chunks in corpus order; at most two jobs per worker are in flight, so nothing piles up."""
    chunks = _paragraph_chunks(source, progress)
    if settings.num_workers <= 1:
        for texts, starts in chunks:
            yield encode_paragraphs(encoder, texts, settings.sentences), starts
        return
    # Workers tokenize one chunk each, single-threaded (the Rust thread pool would oversubscribe).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Workers start from a clean forkserver, not a fork of this process: a fork copies the locks other
    # threads hold (progress bars, tokenizer and torch pools) and can hang a worker forever.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with context.Pool(settings.num_workers) as pool:
        pending: deque = deque()
        for texts, starts in chunks:
            pending.append(
                (pool.apply_async(encode_paragraphs, (encoder, texts, settings.sentences)), starts)
            )
            if len(pending) >= 2 * settings.num_workers:
                job, starts = pending.popleft()
                yield job.get(), starts
        while pending:
            job, starts = pending.popleft()
            yield job.get(), starts


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
    # Per segment: its start in tokens.bin, its length and its document (documents are numbered from 0).
    spans = {"starts": [np.zeros(0, np.int64)], "lengths": [np.zeros(0, np.int64)], "documents": []}
    document, last, written = -1, -1, 0  # the current document, the last segment's, tokens written
    with progress, open(folder / "tokens.bin", "wb") as handle:
        for (tokens, lengths, segments), starts in _encoded_chunks(source, encoder, settings, progress):
            of_paragraph = document + np.cumsum(starts)
            document = int(of_paragraph[-1])
            docs = np.repeat(of_paragraph, segments)
            tokens, offsets = separate_documents(tokens, lengths, docs, last, encoder.separator_id)
            handle.write(tokens.tobytes())
            for key, values in zip(spans, (written + offsets, lengths, docs)):
                spans[key].append(values)
            written, last = written + len(tokens), int(docs[-1]) if len(docs) else last
        if last < 0:
            raise UserError(
                f"{source.label} holds no text (only empty lines or rows): give a file with text."
            )
        handle.write(np.asarray([encoder.separator_id], dtype=encoder.dtype).tobytes())
        progress.update(max(0, (progress.total or 0) - progress.n))  # the estimate counts characters
    starts, lengths, docs = (np.concatenate(values) for values in spans.values())
    doc_lengths, doc_segments = document_lengths(docs, lengths, document + 1)
    doc_offsets = np.concatenate([[0], np.cumsum(doc_lengths)])
    np.save(folder / "documents.npy", doc_offsets)
    np.save(folder / "doc_segments.npy", np.concatenate([[0], np.cumsum(doc_segments)]))
    np.save(folder / "segments.npy", np.stack([starts, starts + lengths], axis=1))
    return {
        "version": STORE_VERSION,
        "num_documents": document + 1,
        "num_tokens": int(doc_offsets[-1]),
        "num_segments": len(lengths),
        "dtype": np.dtype(encoder.dtype).name,
        "separator_id": encoder.separator_id,
        "settings": {"sentences": settings.sentences},
    }
