"""The prepared corpus store and the streamed reader: the same sequences as an independent in-memory
implementation (``pretraining_oracle.py``), packing modes, the cache, sharding across processes and
workers, and exact resume of a pretraining run that reads it.

Data: the bundled WikiText-2 excerpt and a small WordPiece vocabulary trained on it once per module."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from accelerate.data_loader import prepare_data_loader
from pretraining_oracle import mlm_sequences, nsp_examples, read_documents, tokenize_documents
from torch.utils.data import DataLoader

from briskbert.commands.pretrain import main as pretrain_main
from briskbert.tokenization import BriskBertTokenizer, train_wordpiece_tokenizer
from briskbert.training.data.corpus import PACKING_MODES, CorpusSource, PreparationSettings, prepare_corpus
from briskbert.training.data.pretraining_data import (
    StoredSequences,
    StreamingMLMDataset,
    split_document_indices,
    stored_nsp_examples,
)
from briskbert.training.engine.loop import EpochShuffleSampler

ROOT = Path(__file__).resolve().parents[1]
EXCERPT = ROOT / "data" / "wikitext2_excerpt.txt"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    train_wordpiece_tokenizer(files=[str(EXCERPT)], vocab_size=600, output_dir=folder, show_progress=False)
    return BriskBertTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def store(tokenizer, tmp_path_factory):
    settings = PreparationSettings(num_workers=2, cache_dir=str(tmp_path_factory.mktemp("cache")))
    return prepare_corpus(CorpusSource(str(EXCERPT)), tokenizer, settings, log=lambda *_: None)


@pytest.fixture(scope="module")
def documents():
    return read_documents(str(EXCERPT))


def stored(store, tokenizer, mode, documents=None, max_seq_length=64):
    return StoredSequences(
        store, documents, max_seq_length, mode, tokenizer.cls_token_id, tokenizer.sep_token_id
    )


@pytest.mark.parametrize("mode", PACKING_MODES)
def test_store_gives_the_reference_sequences(store, tokenizer, documents, mode):
    """Two tokenizing workers and the memory-mapped store give exactly the in-memory path's sequences,
    on the training split of the documents."""
    train, _ = split_document_indices(store.num_documents, 5, seed=42)
    assert store.num_documents == len(documents)
    reference = mlm_sequences(
        tokenize_documents([documents[i] for i in train], tokenizer), tokenizer, 64, mode
    )
    sequences = stored(store, tokenizer, mode, train)
    assert len(sequences) == len(reference)
    assert [sequences[i]["input_ids"] for i in range(len(sequences))] == reference
    assert [sequences[i]["idx"] for i in range(3)] == [0, 1, 2]


def test_nsp_pairs_from_the_store(tokenizer, documents, tmp_path):
    settings = PreparationSettings(sentences=True, cache_dir=str(tmp_path))
    store = prepare_corpus(CorpusSource(str(EXCERPT)), tokenizer, settings, log=lambda *_: None)
    reference = nsp_examples(tokenize_documents(documents, tokenizer, sentences=True), tokenizer, 64, seed=7)
    examples = stored_nsp_examples(store, None, tokenizer.cls_token_id, tokenizer.sep_token_id, 64, seed=7)
    assert [examples[i] for i in range(len(examples))] == [{**e, "idx": i} for i, e in enumerate(reference)]


def test_doc_sentences_never_cross_a_document_boundary(store, tokenizer, documents):
    tokenized = tokenize_documents(documents, tokenizer)
    streams = [[t for seg in doc for t in seg] + [tokenizer.sep_token_id] for doc in tokenized]
    sequences = stored(store, tokenizer, "doc-sentences")
    doc, offset = 0, 0
    for i in range(len(sequences)):
        body = sequences[i]["input_ids"][1:]
        if offset == len(streams[doc]):  # the previous sequence ended its document
            doc, offset = doc + 1, 0
        assert body == streams[doc][offset : offset + len(body)]  # a piece of one document, in order
        offset += len(body)
    assert (doc, offset) == (len(streams) - 1, len(streams[-1]))  # every document, whole
    full = stored(store, tokenizer, "full-sentences")
    assert all(len(full[i]["input_ids"]) == 64 for i in range(len(full) - 1))  # crosses documents instead


def test_cache_is_reused_and_invalidated(tokenizer, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(EXCERPT.read_text(encoding="utf-8"), encoding="utf-8")
    messages = []
    settings = PreparationSettings(cache_dir=str(tmp_path / "cache"), show_progress=False)
    first = prepare_corpus(CorpusSource(str(corpus)), tokenizer, settings, log=messages.append)
    again = prepare_corpus(CorpusSource(str(corpus)), tokenizer, settings, log=messages.append)
    assert again.folder == first.folder and messages[1].startswith("Reusing the prepared corpus")
    with open(corpus, "a", encoding="utf-8") as handle:
        handle.write("\nA new document at the end.\n")
    edited = prepare_corpus(CorpusSource(str(corpus)), tokenizer, settings, log=messages.append)
    assert edited.folder != first.folder and edited.num_documents == first.num_documents + 1
    assert messages[2].startswith("Prepared")
    other_tokenizer = BriskBertTokenizer(vocab={**tokenizer.get_vocab(), "zzz": len(tokenizer)})
    retokenized = prepare_corpus(CorpusSource(str(corpus)), other_tokenizer, settings, log=messages.append)
    assert retokenized.folder not in (first.folder, edited.folder)
    assert not list((tmp_path / "cache").glob(".*partial*"))  # nothing half-written left behind


def test_two_processes_read_disjoint_shares_that_cover_the_corpus(store, tokenizer):
    """The loop's sampler, sharded by Accelerate as for 2 processes: each process reads only its own
    sequences from the store; together they read them all."""
    sequences = stored(store, tokenizer, "full-sentences")
    seen = []
    for process in range(2):
        loader = DataLoader(
            sequences,
            batch_size=8,
            sampler=EpochShuffleSampler(len(sequences), seed=3),
            collate_fn=lambda batch: [example["idx"] for example in batch],
        )
        shard = prepare_data_loader(loader, num_processes=2, process_index=process, put_on_device=False)
        seen.append([i for batch in shard for i in batch])
    first, second = set(seen[0]), set(seen[1])
    assert first | second == set(range(len(sequences)))
    assert len(first & second) <= 16  # only the last global batch is evened out with repeats


@pytest.mark.parametrize("mode", PACKING_MODES)
def test_streamed_sequences_are_the_reference_sequences(tokenizer, documents, mode):
    """Chunks of 16 documents, tokenized and packed on the fly, give exactly the in-memory sequences (a
    full-sentences sequence continues across chunks)."""
    reference = mlm_sequences(tokenize_documents(documents, tokenizer), tokenizer, 64, mode)
    streamed = list(StreamingMLMDataset(str(EXCERPT), tokenizer, 64, packing=mode, documents_per_chunk=16))
    assert [example["input_ids"] for example in streamed] == reference
    assert [example["idx"] for example in streamed] == list(range(len(reference)))


def test_streaming_shards_are_disjoint_and_complete(tokenizer):
    def tokens(dataset):
        return sorted(t for example in dataset for t in example["input_ids"][1:]), [e["idx"] for e in dataset]

    whole, _ = tokens(StreamingMLMDataset(str(EXCERPT), tokenizer, 64, documents_per_chunk=16))
    parts = [
        StreamingMLMDataset(str(EXCERPT), tokenizer, 64, documents_per_chunk=16, num_shards=2, shard_index=i)
        for i in range(2)
    ]
    (first, first_idx), (second, second_idx) = tokens(parts[0]), tokens(parts[1])
    assert sorted(first + second) == whole  # every token once, in one shard or the other
    assert not set(first_idx) & set(second_idx)  # masking keys stay unique


def _pretrain_args(tmp_path, *extra):
    return [
        "--train_file",
        str(EXCERPT),
        "--config_name",
        "bert-tiny",
        "--config_overrides",
        "hidden_size=32,intermediate_size=64,num_hidden_layers=1,hidden_dropout_prob=0.0,"
        "attention_probs_dropout_prob=0.0",
        "--vocab_size",
        "500",
        "--packing_mode",
        "doc-sentences",
        "--max_seq_length",
        "64",
        "--per_device_train_batch_size",
        "4",
        "--max_train_steps",
        "4",
        "--logging_steps",
        "1",
        "--checkpointing_steps",
        "2",
        "--data_cache_dir",
        str(tmp_path / "cache"),
        *extra,
    ]


def test_resume_mid_epoch_is_exact_and_keeps_the_tokenizer(tmp_path):
    """A run resumed from its step-2 checkpoint (mid-epoch) continues with the same losses as the
    uninterrupted run, reading the cached store, and reuses the tokenizer the run trained."""
    pretrain_main(_pretrain_args(tmp_path, "--output_dir", str(tmp_path / "full")))
    for name in ("step_2", "tokenizer"):  # what an interrupted run leaves behind
        shutil.copytree(tmp_path / "full" / name, tmp_path / "cut" / name)
    vocab = tmp_path / "cut" / "tokenizer" / "vocab.txt"
    before = vocab.stat().st_mtime_ns
    resumed = _pretrain_args(tmp_path, "--output_dir", str(tmp_path / "cut"), "--resume_from_checkpoint")
    pretrain_main([*resumed, str(tmp_path / "cut" / "step_2")])
    assert vocab.stat().st_mtime_ns == before

    def losses(name):
        lines = (tmp_path / name / "log_history.jsonl").read_text().splitlines()
        return {e["step"]: e["loss"] for e in map(json.loads, lines) if "loss" in e}

    full, cut = losses("full"), losses("cut")
    assert full[2] != full[3]
    np.testing.assert_allclose([cut[3], cut[4]], [full[3], full[4]], rtol=1e-5)
