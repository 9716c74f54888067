"""Pretraining sequences from a prepared corpus (:class:`StoredSequences`, :func:`stored_nsp_examples`) or read on
the fly (:class:`StreamingMLMDataset`). Packing (RoBERTa, Liu et al. 2019, 4.2): ``full-sentences`` cuts the
concatenated documents every ``max_seq_length`` tokens, ``doc-sentences`` never crosses a document, ``none`` is
``[CLS] doc [SEP]``; every sequence starts with ``[CLS]``, a document ends with ``[SEP]``, nothing is dropped.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator, Sequence
from functools import partial
from itertools import islice

import numpy as np
import torch

from briskbert.errors import SettingError
from briskbert.training.data.corpus import (
    CorpusSource,
    CorpusStore,
    TokenEncoder,
    encode_documents,
    iter_documents,
    iter_paragraphs,
    load_corpus,
)


def split_document_indices(
    num_documents: int, percentage: float, seed: int, source: str = "The training corpus"
) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) document indices in corpus order, ``percentage`` % (at least one) held out."""
    if num_documents < 2:
        raise ValueError(
            f"{source} has {'no text' if num_documents == 0 else 'a single document'}, too little to carve a "
            "validation split from: give a validation_file or more documents (blank lines separate documents)."
        )
    order = list(range(num_documents))
    random.Random(seed).shuffle(order)
    held = np.zeros(num_documents, dtype=bool)
    held[order[: max(1, round(num_documents * percentage / 100))]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


def check_splittable(source: CorpusSource) -> None:
    """Refuses a corpus too small to split before anything is prepared (reads up to its second document)."""
    starts = (1 for _, starts_document in iter_paragraphs(source) if starts_document)
    split_document_indices(sum(islice(starts, 2)), 50, 0, source.label)


def sequence_spans(document_lengths, max_seq_length: int, packing: str) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` of the MLM sequence bodies in the stream of the documents' tokens, whose
    ``document_lengths`` include each document's closing ``[SEP]``. A sequence is ``[CLS]`` + its body
    (+ ``[SEP]`` in mode ``none``, whose bodies leave out the document's own)."""
    body = max_seq_length - (2 if packing == "none" else 1)  # besides [CLS] (and, unpacked, its own [SEP])
    lengths = np.asarray(document_lengths, dtype=np.int64)
    if packing == "full-sentences":  # one stream, cut every `body` tokens
        total = int(lengths.sum())
        starts = np.arange(0, total, body, dtype=np.int64)
        return starts, np.minimum(body, total - starts)
    offsets = np.cumsum(lengths) - lengths
    content = np.maximum(lengths - (1 if packing == "none" else 0), 0)  # "none" adds its own [SEP]
    counts = -(-content // body)  # sequences per document (0 for an empty one)
    document = np.repeat(np.arange(len(lengths)), counts)
    within = (np.arange(len(document)) - (np.cumsum(counts) - counts)[document]) * body
    return offsets[document] + within, np.minimum(body, content[document] - within)


def wrap_sequence(body: list[int], packing: str, cls_id: int, sep_id: int) -> list[int]:
    """A sequence body of :func:`sequence_spans` with its ``[CLS]`` (and, unpacked, its ``[SEP]``)."""
    return [cls_id, *body, sep_id] if packing == "none" else [cls_id, *body]


def iter_nsp_examples(
    tokenized_documents: Sequence, cls: int, sep: int, max_seq_length: int, seed: int, short_seq_prob: float
) -> Iterator[dict]:
    """BERT's next-sentence pairs, one at a time: ``[CLS] A [SEP] B [SEP]`` where B continues A (label 0) or
    comes from another document (label 1); ``tokenized_documents`` are lists of token-id segments."""
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
                while len(a) + len(b) > max_tokens:  # trim the longer side at a random end, as BERT does
                    longer = a if len(a) > len(b) else b
                    del longer[0 if rng.random() < 0.5 else -1]
                yield {
                    "input_ids": [cls, *a, sep, *b, sep],
                    "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
                    "next_sentence_label": label,
                }
                chunk, length = [], 0
            i += 1


def _chosen(store: CorpusStore, documents) -> np.ndarray:
    """The indices of the ``documents`` chosen from the store (e.g. the training split); ``None``: all."""
    return np.arange(store.num_documents) if documents is None else np.asarray(documents, dtype=np.int64)


class StoredSequences(torch.utils.data.Dataset):
    """The MLM sequences of the ``documents`` (``None``: all) of a prepared corpus, read from the memory-mapped
    tokens when asked for (only each sequence's start and length live in memory). Items are
    ``{"input_ids": [...], "idx": i}``; ``idx`` keys the example's masking draw."""

    def __init__(
        self, store: CorpusStore, documents, max_seq_length: int, packing: str, cls_id: int, sep_id: int
    ):
        self.store, self.mode, self.cls_id, self.sep_id = store, packing, cls_id, sep_id
        offsets = np.asarray(store.document_offsets())
        chosen = _chosen(store, documents)
        lengths = offsets[chosen + 1] - offsets[chosen]
        # Chosen documents in stream order: where each starts in the store, where it ends in the stream.
        self.doc_starts, self.doc_ends_in_stream = offsets[chosen], np.cumsum(lengths)
        starts, lengths = sequence_spans(lengths, max_seq_length, packing)
        self.seq_starts, self.seq_lengths = starts, lengths.astype(np.int32)
        self._tokens = None

    def __getstate__(self):  # dataloader workers map the file themselves
        return {**self.__dict__, "_tokens": None}

    def __len__(self) -> int:
        return len(self.seq_starts)

    def __getitem__(self, index: int) -> dict:
        if self._tokens is None:
            self._tokens = self.store.tokens()
        begin = int(self.seq_starts[index])
        body = self._stream_slice(begin, begin + int(self.seq_lengths[index]))
        return {"input_ids": wrap_sequence(body, self.mode, self.cls_id, self.sep_id), "idx": index}

    def _stream_slice(self, begin: int, end: int) -> list[int]:
        """Tokens at stream positions [begin, end), read from the documents they fall in."""
        ends = self.doc_ends_in_stream
        first, last = np.searchsorted(ends, [begin, end - 1], side="right")
        ids = []
        for doc in range(int(first), int(last) + 1):
            doc_begin = int(ends[doc - 1]) if doc else 0
            lo, hi = max(begin, doc_begin) - doc_begin, min(end, int(ends[doc])) - doc_begin
            start = int(self.doc_starts[doc])
            ids += self._tokens[start + lo : start + hi].tolist()
        return ids


class StoredDocuments(Sequence):
    """The documents with tokens of a prepared corpus as lists of token-id segments, read on access."""

    def __init__(self, store: CorpusStore, documents=None):
        doc_segments = np.asarray(store.document_segment_offsets())
        chosen = _chosen(store, documents)
        chosen = chosen[doc_segments[chosen + 1] > doc_segments[chosen]]  # a document without tokens has none
        self.first, self.stop = doc_segments[chosen], doc_segments[chosen + 1]
        self.segments, self.tokens = store.segment_offsets(), store.tokens()

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, index: int) -> list[list[int]]:
        spans = self.segments[int(self.first[index]) : int(self.stop[index])]
        return [self.tokens[start:end].tolist() for start, end in spans]


class NspExamples(torch.utils.data.Dataset):
    """NSP examples held as compact arrays (a few bytes per token, where lists of Python ints take dozens): the
    flat ids, each example's offset, the length of its ``[CLS] A [SEP]`` and its label."""

    def __init__(self, examples: Iterator[dict]):
        self.tokens, self.offsets = array("i"), array("q", [0])
        self.first_lengths, self.labels = array("i"), array("b")
        for example in examples:
            self.tokens.extend(example["input_ids"])
            self.offsets.append(len(self.tokens))
            self.first_lengths.append(example["token_type_ids"].count(0))
            self.labels.append(example["next_sentence_label"])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        ids = self.tokens[self.offsets[index] : self.offsets[index + 1]].tolist()
        first = self.first_lengths[index]
        return {
            "input_ids": ids,
            "token_type_ids": [0] * first + [1] * (len(ids) - first),
            "next_sentence_label": self.labels[index],
            "idx": index,
        }


def stored_nsp_examples(
    store: CorpusStore, documents, cls_id: int, sep_id: int, max_seq_length: int, seed: int
) -> NspExamples:
    """The NSP examples of the ``documents`` (``None``: all) of a prepared (sentence-segmented) corpus."""
    tokenized = StoredDocuments(store, documents)
    if len(tokenized) < 2:
        raise SettingError(
            "nsp",
            "needs a corpus with several documents (separated by blank lines in text files, "
            "one per row otherwise): random next segments must come from another document.",
        )
    return NspExamples(iter_nsp_examples(tokenized, cls_id, sep_id, max_seq_length, seed, 0.1))


class StreamingMLMDataset(torch.utils.data.IterableDataset):
    """Read, tokenize and pack a corpus on the fly, for runs that should start at once.

    Chunk ``c`` of ``documents_per_chunk`` documents belongs to dataloader worker ``c % workers``, which skips
    the others' chunks untokenized. The order is deterministic, so a resumed run skips exactly the batches
    already seen; ``idx`` is unique across workers (it keys the masking).
    """

    def __init__(
        self,
        path: str,
        tokenizer,
        max_seq_length: int,
        text_column: str | None = None,
        packing: str = "full-sentences",
        documents_per_chunk: int = 256,
    ):
        load_corpus(path, text_column)  # column check up front
        self.path, self.text_column, self.max_seq_length = path, text_column, max_seq_length
        self.mode, self.documents_per_chunk = packing, documents_per_chunk
        self.encoder = TokenEncoder(tokenizer)
        self.cls_id, self.sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        shards, shard = (info.num_workers, info.id) if info is not None else (1, 0)
        packed = self.mode == "full-sentences"
        wrap = partial(wrap_sequence, packing=self.mode, cls_id=self.cls_id, sep_id=self.sep_id)
        documents = iter_documents(CorpusSource(self.path, self.text_column))
        chunks = iter(lambda: list(islice(documents, self.documents_per_chunk)), [])
        carry, local = np.zeros(0, dtype=self.encoder.dtype), 0
        for chunk in islice(chunks, shard, None, shards):
            tokens, document_lengths = encode_documents(self.encoder, chunk)
            stream = np.concatenate([carry, tokens])
            lengths = np.concatenate([[len(carry)], document_lengths])
            starts, sizes = sequence_spans(lengths, self.max_seq_length, self.mode)
            carry = np.zeros(0, dtype=stream.dtype)
            if packed and len(starts) and sizes[-1] < sizes[0]:  # unfinished: the next chunk ends it
                carry, starts, sizes = stream[starts[-1] :], starts[:-1], sizes[:-1]
            for begin, size in zip(starts.tolist(), sizes.tolist()):
                body = stream[begin : begin + size].tolist()
                yield {"input_ids": wrap(body), "idx": local * shards + shard}
                local += 1
        if len(carry):
            yield {"input_ids": wrap(carry.tolist()), "idx": local * shards + shard}
