"""Pretraining data: read a corpus into documents, carve a validation split, tokenize, and build
fixed-length MLM sequences (optionally packed) or NSP segment pairs.

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

import random
import re
from pathlib import Path

import datasets
import torch

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
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9@])")


# ---------------------------------------------------------------------------------------------- reading
def _builder(path: str) -> tuple[str, dict]:
    suffix = Path(path).suffix.lower()
    if suffix not in BUILDERS:
        raise ValueError(
            f"{path}: unsupported file type {suffix!r}; use one of {', '.join(sorted(BUILDERS))}."
        )
    return BUILDERS[suffix], ({"delimiter": "\t"} if suffix == ".tsv" else {})


def check_file(path: str | None, flag: str) -> None:
    if path is None:
        return
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{flag} {path}: no such file.")
    if p.stat().st_size == 0:
        raise ValueError(f"{flag} {path}: the file is empty.")
    _builder(path)


def load_corpus(path: str, text_column: str | None = None, streaming: bool = False):
    """A ``datasets`` (Iterable)Dataset of the file and the name of its text column (checked)."""
    builder, kwargs = _builder(path)
    ds = datasets.load_dataset(builder, data_files=str(path), split="train", streaming=streaming, **kwargs)
    columns = list(ds.features) if ds.features else []
    column = text_column or ("text" if "text" in columns or builder == "text" else None)
    if column is None or (columns and column not in columns):
        raise ValueError(
            f"{path}: no text column {column or '(none given)'!r}; the file has columns {columns}. "
            "Pass --text_column with one of them."
        )
    return ds, column


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
    documents = documents_from_rows(ds[column], blank_line_separates=_builder(path)[0] == "text")
    if not documents:
        raise ValueError(f"{path}: no text found in column {column!r} (only empty lines or rows).")
    return documents


def split_validation(documents: list, percentage: float, seed: int) -> tuple[list, list]:
    """Hold out ``percentage`` % of the documents (at least one) for validation, chosen with ``seed``."""
    if not 0 < percentage < 100:
        raise ValueError(f"--validation_split_percentage must be in (0, 100), got {percentage}.")
    if len(documents) < 2:
        raise ValueError(
            "The training corpus has a single document, too little to carve a validation split "
            "from: give --validation_file or more documents (blank lines separate documents)."
        )
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    n_val = max(1, round(len(documents) * percentage / 100))
    held = set(order[:n_val])
    return (
        [d for i, d in enumerate(documents) if i not in held],
        [d for i, d in enumerate(documents) if i in held],
    )


def split_sentences(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph) if s.strip()]


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
def mlm_sequences(tokenized_documents, tokenizer, max_seq_length: int, packing: bool) -> list[list[int]]:
    """MLM input sequences.

    ``packing=False``: one document per sequence, ``[CLS] doc [SEP]``; a longer document continues in the
    next sequences. ``packing=True``: documents (each followed by ``[SEP]``) are concatenated and cut into
    ``[CLS] + (max_seq_length - 1)`` tokens; the last, shorter sequence is kept.
    """
    if max_seq_length < 8:
        raise ValueError(f"--max_seq_length must be at least 8, got {max_seq_length}.")
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    sequences = []
    if packing:
        stream = [t for doc in tokenized_documents for t in [*(i for s in doc for i in s), sep]]
        body = max_seq_length - 1
        sequences = [[cls] + stream[i : i + body] for i in range(0, len(stream), body)]
    else:
        body = max_seq_length - 2
        for doc in tokenized_documents:
            ids = [i for s in doc for i in s]
            sequences += [[cls] + ids[i : i + body] + [sep] for i in range(0, len(ids), body)]
    return sequences


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
    rng = random.Random(seed)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    max_tokens = max_seq_length - 3
    examples = []
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
                examples.append(
                    {
                        "input_ids": [cls, *a, sep, *b, sep],
                        "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
                        "next_sentence_label": label,
                    }
                )
                chunk, length = [], 0
            i += 1
    return examples


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


# ------------------------------------------------------------------------------------------- streaming
class StreamingMLMDataset(torch.utils.data.IterableDataset):
    """Corpora that do not fit in memory: read with ``datasets`` streaming, tokenize and pack on the fly.

    Deterministic order (the file order), so a resumed run skips exactly the batches already seen.
    """

    def __init__(
        self,
        path: str,
        tokenizer,
        max_seq_length: int,
        text_column: str | None = None,
        packing: bool = True,
        documents_per_chunk: int = 256,
    ):
        check_file(path, "--train_file")
        self.path, self.text_column, self.tokenizer = path, text_column, tokenizer
        self.max_seq_length, self.packing, self.documents_per_chunk = (
            max_seq_length,
            packing,
            documents_per_chunk,
        )
        load_corpus(path, text_column, streaming=True)  # column check up front

    def _documents(self):
        ds, column = load_corpus(self.path, self.text_column, streaming=True)
        blank = _builder(self.path)[0] == "text"
        lines = []
        for row in ds:
            lines.append(row[column])
            if len(lines) >= 4096 and not (lines[-1] or "").strip():
                yield from documents_from_rows(lines, blank)
                lines = []
        yield from documents_from_rows(lines, blank)

    def __iter__(self):
        idx, carry, batch = 0, [], []
        cls, sep, body = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id, self.max_seq_length - 1

        def flush(docs, final):
            nonlocal idx, carry
            tokenized = tokenize_documents(docs, self.tokenizer)
            if not self.packing:
                for seq in mlm_sequences(tokenized, self.tokenizer, self.max_seq_length, packing=False):
                    yield {"input_ids": seq, "idx": idx}
                    idx += 1
                return
            carry += [t for doc in tokenized for t in [*(i for s in doc for i in s), sep]]
            while len(carry) >= body or (final and carry):
                yield {"input_ids": [cls] + carry[:body], "idx": idx}
                idx += 1
                carry = carry[body:]

        for document in self._documents():
            batch.append(document)
            if len(batch) >= self.documents_per_chunk:
                yield from flush(batch, final=False)
                batch = []
        yield from flush(batch, final=True)
