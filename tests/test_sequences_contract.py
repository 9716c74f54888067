"""Sequence building checked against the documents it was cut from.

Written to kill the mutants of ``training/data/pretraining_data.py`` (see docs/testing.md). Next-sentence
pairs: segment A and its [SEP] are type 0, segment B and its [SEP] type 1; an "is next" pair continues its
own document, a "random next" pair takes B from another document, about half the pairs are random, short
targets reach down to 2 tokens and a pair that fits is never cut. Streaming: chunks are dealt round-robin to
the shards. Splits: a corpus too small to split says what it holds.
"""

from types import SimpleNamespace

import pytest

from briskbert.tokenization import train_wordpiece_tokenizer
from briskbert.training.data.pretraining_data import (
    StreamingMLMDataset,
    iter_nsp_examples,
    split_document_indices,
)

CLS, SEP = 1, 2


def documents(count=60, sentences=12):
    """Documents of one-token sentences whose ids tell where they come from: 1000 * document + position."""
    return [[[1000 * (d + 1) + k] for k in range(sentences)] for d in range(count)]


def examples(max_seq_length=11):
    return list(iter_nsp_examples(documents(), CLS, SEP, max_seq_length, seed=3, short_seq_prob=0.0))


def split(example):
    ids = example["input_ids"]
    first_sep = ids.index(SEP)
    return ids[1:first_sep], ids[first_sep + 1 : -1], first_sep


def test_segment_a_and_its_sep_are_type_0_and_segment_b_and_its_sep_type_1():
    for example in examples():
        a, b, first_sep = split(example)
        assert example["input_ids"][0] == CLS and example["input_ids"][-1] == SEP
        assert example["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(b) + 1)
        assert len(example["input_ids"]) <= 11 and a and b


def test_is_next_pairs_continue_their_document_and_random_ones_come_from_another():
    labels = []
    for example in examples():
        a, b, _ = split(example)
        document = a[0] // 1000
        assert all(token // 1000 == document for token in a)
        assert a == list(range(a[0], a[0] + len(a)))  # a run of consecutive sentences
        if example["next_sentence_label"] == 0:
            assert b[0] == a[-1] + 1 and all(token // 1000 == document for token in b)
        else:
            assert all(token // 1000 != document for token in b)
        labels.append(example["next_sentence_label"])
    assert 0.35 < sum(labels) / len(labels) < 0.65, sum(labels) / len(labels)  # half the pairs are random


def test_short_pairs_take_every_length_from_two_tokens_up_and_full_pairs_are_not_cut():
    def lengths(short_seq_prob):
        pairs = iter_nsp_examples(documents(), CLS, SEP, 11, seed=5, short_seq_prob=short_seq_prob)
        return [len(example["input_ids"]) - 3 for example in pairs]  # tokens of A and B

    assert set(lengths(1.0)) == set(range(2, 9))  # targets drawn from 2 .. max_seq_length - 3
    by_document = {}
    for example in iter_nsp_examples(documents(), CLS, SEP, 11, seed=5, short_seq_prob=1.0):
        by_document.setdefault(split(example)[0][0] // 1000, set()).add(len(example["input_ids"]) - 3)
    assert {2} in by_document.values()  # a document drew the shortest target: all its pairs hold 2 tokens
    assert max(lengths(0.0)) == 8  # a pair that fills the sequence exactly keeps every token


def test_a_streamed_corpus_deals_its_chunks_round_robin_to_the_shards(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"document number {k} is here." for k in range(7)) + "\n")
    tokenizer = train_wordpiece_tokenizer(files=[str(corpus)], vocab_size=100, show_progress=False)
    for shard in range(3):
        dataset = StreamingMLMDataset(
            str(corpus), tokenizer, 32, documents_per_chunk=1, num_shards=3, shard_index=shard
        )
        chunks = list(dataset._own_chunks(3, shard))
        expected = [[f"document number {k} is here."] for k in range(shard, 7, 3)]
        assert [[" ".join(document).strip() for document in chunk] for chunk in chunks] == expected


def test_a_corpus_too_small_to_split_says_what_it_holds():
    for count, holds in [(0, "no text"), (1, "a single document")]:
        with pytest.raises(ValueError, match=f"corpus.txt has {holds}, too little"):
            split_document_indices(count, 10.0, seed=0, source="corpus.txt")


def test_random_next_segments_never_come_from_the_same_document():
    few_long = [
        [[1000 * (d + 1) + k] for k in range(60)] for d in range(10)
    ]  # ~1 in 9 draws would hit its own
    pairs = list(iter_nsp_examples(few_long, CLS, SEP, 11, seed=3, short_seq_prob=0.0))
    random_next = [split(example)[:2] for example in pairs if example["next_sentence_label"]]
    assert len(random_next) > 40
    assert all(token // 1000 != a[0] // 1000 for a, b in random_next for token in b)


def test_every_sentence_starts_out_in_a_pair_and_long_sentences_close_a_chunk_past_its_target():
    pairs = [split(example)[0] for example in examples()]
    assert {a[0] for a in pairs} >= {1000 * (d + 1) for d in range(60)}  # every document's first sentence
    # Sentences of 3 tokens reach a target of 8 only by passing it: each document still gives several pairs.
    three_token = [[[1000 * (d + 1) + 10 * k + j for j in range(3)] for k in range(12)] for d in range(20)]
    per_document = {}
    for example in iter_nsp_examples(three_token, CLS, SEP, 11, seed=3, short_seq_prob=0.0):
        document = split(example)[0][0] // 1000
        per_document[document] = per_document.get(document, 0) + 1
    assert min(per_document.values()) >= 3


def test_short_random_next_pairs_stop_filling_segment_b_at_their_target():
    three_token = [[[1000 * (d + 1) + 10 * k + j for j in range(3)] for k in range(12)] for d in range(20)]
    lengths = [
        len(example["input_ids"]) - 3
        for example in iter_nsp_examples(three_token, CLS, SEP, 30, seed=3, short_seq_prob=1.0)
        if example["next_sentence_label"]
    ]
    # Targets are drawn from 2 .. 27: filled to the maximum only when a target lands near it (here 1 in 67).
    assert sum(length == 27 for length in lengths) < 0.15 * len(lengths)


def test_each_dataloader_worker_streams_its_own_shard(tmp_path, monkeypatch):
    import torch.utils.data

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one document.\n\nanother one.\n")
    tokenizer = train_wordpiece_tokenizer(files=[str(corpus)], vocab_size=60, show_progress=False)
    dataset = StreamingMLMDataset(str(corpus), tokenizer, 32, num_shards=2, shard_index=1)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: SimpleNamespace(num_workers=3, id=2))
    assert dataset._shard() == (6, 5)  # 2 processes x 3 workers; process 1's worker 2
    assert isinstance(dataset._shard()[0], int)
