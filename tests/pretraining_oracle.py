"""A plain in-memory implementation of the pretraining data rules (``training/data/pretraining_data.py``),
for the tests to check the corpus store and the streamed reader against."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9@])")


def read_documents(path) -> list[list[str]]:
    """The documents of a plain-text corpus as lists of stripped, non-empty paragraphs."""
    documents, current = [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                current.append(line.strip())
            elif current:
                documents.append(current)
                current = []
    if current:
        documents.append(current)
    return documents


def tokenize_documents(documents, tokenizer, sentences: bool = False) -> list[list[list[int]]]:
    """Documents of text -> documents of token-id segments, empty ones dropped."""
    if sentences:
        documents = [[s for p in doc for s in _SENTENCE_END.split(p) if s.strip()] for doc in documents]
    tokenized = []
    for doc in documents:
        segments = [ids for ids in tokenizer(doc, add_special_tokens=False)["input_ids"] if ids]
        if segments:
            tokenized.append(segments)
    return tokenized


def mlm_sequences(tokenized_documents, tokenizer, max_seq_length: int, packing: str) -> list[list[int]]:
    """The MLM sequences of the documents in packing mode ``packing``, the last shorter one kept."""
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    streams = [[token for segment in doc for token in segment] + [sep] for doc in tokenized_documents]
    if packing == "none":  # each document [CLS] ... [SEP], split into as many sequences as it needs
        body = max_seq_length - 2
        return [
            [cls, *stream[:-1][i : i + body], sep]
            for stream in streams
            for i in range(0, len(stream) - 1, body)
        ]
    if packing == "full-sentences":
        streams = [[token for stream in streams for token in stream]]
    body = max_seq_length - 1
    return [[cls, *stream[i : i + body]] for stream in streams for i in range(0, len(stream), body)]
