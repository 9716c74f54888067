"""Pretraining sequences: the store and the streamed reader against ``pretraining_oracle.py`` in every packing
mode; sharding, exact resume and next-sentence pairs on documents whose ids say where they come from."""

import json
import shutil
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch.utils.data
from pretraining_oracle import mlm_sequences, read_documents, tokenize_documents

from briskbert.commands.pretrain import main as pretrain_main
from briskbert.tokenization import BriskBertTokenizer, train_wordpiece_tokenizer
from briskbert.training.data.corpus import PACKING_MODES, CorpusSource, PreparationSettings, prepare_corpus
from briskbert.training.data.pretraining_data import (
    StoredSequences,
    StreamingMLMDataset,
    iter_nsp_examples,
    split_document_indices,
    stored_nsp_examples,
)

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
    specials = tokenizer.cls_token_id, tokenizer.sep_token_id
    return StoredSequences(store, documents, max_seq_length, mode, *specials)


@pytest.mark.parametrize("mode", PACKING_MODES)
def test_store_gives_the_reference_sequences(store, tokenizer, documents, mode):
    """Two tokenizing workers and the memory-mapped store give the in-memory path's training sequences."""
    train, _ = split_document_indices(store.num_documents, 5, seed=42)
    assert store.num_documents == len(documents)
    train_documents = tokenize_documents([documents[i] for i in train], tokenizer)
    reference = mlm_sequences(train_documents, tokenizer, 64, mode)
    sequences = stored(store, tokenizer, mode, train)
    assert len(sequences) == len(reference)
    assert [sequences[i]["input_ids"] for i in range(len(sequences))] == reference
    assert [sequences[i]["idx"] for i in range(3)] == [0, 1, 2]


def test_nsp_pairs_from_the_store(tokenizer, documents, tmp_path):
    settings = PreparationSettings(sentences=True, cache_dir=str(tmp_path))
    store = prepare_corpus(CorpusSource(str(EXCERPT)), tokenizer, settings, log=lambda *_: None)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    tokenized = tokenize_documents(documents, tokenizer, sentences=True)
    reference = list(iter_nsp_examples(tokenized, cls, sep, 64, seed=7, short_seq_prob=0.1))
    examples = stored_nsp_examples(store, None, cls, sep, 64, seed=7)
    assert [examples[i] for i in range(len(examples))] == [{**e, "idx": i} for i, e in enumerate(reference)]
    # held as one int32 array: 4 bytes per token, where lists of Python ints take dozens
    assert examples.tokens.itemsize * len(examples.tokens) == 4 * sum(len(e["input_ids"]) for e in reference)


@pytest.mark.parametrize("mode", PACKING_MODES)
def test_streamed_sequences_are_the_reference_sequences(tokenizer, documents, mode):
    """Chunks of 16 documents, packed on the fly, give exactly the in-memory sequences."""
    reference = mlm_sequences(tokenize_documents(documents, tokenizer), tokenizer, 64, mode)
    streamed = list(StreamingMLMDataset(str(EXCERPT), tokenizer, 64, packing=mode, documents_per_chunk=16))
    assert [example["input_ids"] for example in streamed] == reference
    assert [example["idx"] for example in streamed] == list(range(len(reference)))


def test_dataloader_workers_stream_disjoint_and_complete_shards(tokenizer, monkeypatch):
    def tokens(workers=1, worker=0):
        dataset = StreamingMLMDataset(str(EXCERPT), tokenizer, 64, documents_per_chunk=16)
        info = SimpleNamespace(num_workers=workers, id=worker)
        # set after datasets read the columns
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
        examples = list(dataset)
        return sorted(t for e in examples for t in e["input_ids"][1:]), [e["idx"] for e in examples]

    whole, _ = tokens()
    (first, first_idx), (second, second_idx) = tokens(2, 0), tokens(2, 1)
    assert sorted(first + second) == whole  # every token once, in one worker or the other
    assert len(set(first_idx + second_idx)) == len(first_idx + second_idx)  # masking keys stay unique


# ---- next-sentence pairs, shards and splits against documents that say where they come from
CLS, SEP = 1, 2


def labelled_documents(count=60, sentences=12):
    """Documents of one-token sentences whose ids tell where they come from: 1000 * document + position."""
    return [[[1000 * (d + 1) + k] for k in range(sentences)] for d in range(count)]


def nsp_pairs():
    return list(iter_nsp_examples(labelled_documents(), CLS, SEP, 11, seed=3, short_seq_prob=0.0))


def split(example):
    ids = example["input_ids"]
    first_sep = ids.index(SEP)
    return ids[1:first_sep], ids[first_sep + 1 : -1], first_sep


def test_is_next_pairs_continue_their_document_and_random_ones_come_from_another():
    labels, own_sentences = [], []
    for example in nsp_pairs():
        a, b, first_sep = split(example)
        own_sentences += a + (b if example["next_sentence_label"] == 0 else [])
        assert example["input_ids"][0] == CLS and example["input_ids"][-1] == SEP
        assert example["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(b) + 1)
        assert len(example["input_ids"]) <= 11 and a and b
        document = a[0] // 1000
        assert all(token // 1000 == document for token in a)
        assert a == list(range(a[0], a[0] + len(a)))  # a run of consecutive sentences
        if example["next_sentence_label"] == 0:
            assert b[0] == a[-1] + 1 and all(token // 1000 == document for token in b)
        else:
            assert all(token // 1000 != document for token in b)
        labels.append(example["next_sentence_label"])
    assert 0.35 < sum(labels) / len(labels) < 0.65, sum(labels) / len(labels)  # half the pairs are random
    # every sentence is in one A or is-next B, once: a random B's unused segments are put back, none is dropped
    assert sorted(own_sentences) == sorted(s for document in labelled_documents() for (s,) in document)


def test_short_pairs_take_every_length_from_two_tokens_up_and_full_pairs_are_not_cut():
    def lengths(documents, max_seq_length, short_seq_prob, seed=5):
        pairs = iter_nsp_examples(documents, CLS, SEP, max_seq_length, seed, short_seq_prob)
        return [(split(e)[0][0] // 1000, len(e["input_ids"]) - 3, e["next_sentence_label"]) for e in pairs]

    short = lengths(labelled_documents(), 11, 1.0)
    # targets drawn from 2 .. max_seq_length - 3
    assert {length for _, length, _ in short} == set(range(2, 9))
    # a document that drew the shortest target: all its pairs hold 2 tokens
    assert any({n for d, n, _ in short if d == document} == {2} for document in range(1, 61))
    full_pairs = lengths(labelled_documents(), 11, 0.0)
    assert max(length for _, length, _ in full_pairs) == 8  # a full pair is not cut
    # Sentences of 3 tokens reach a target of 8 only by passing it: each document still gives several pairs.
    three_token = [[[1000 * (d + 1) + 10 * k + j for j in range(3)] for k in range(12)] for d in range(20)]
    full = lengths(three_token, 11, 0.0, seed=3)
    assert min(sum(d == document for d, _, _ in full) for document in range(1, 21)) >= 3
    # A pair over the limit loses tokens at either end of its longer side: A stays a run of its document.
    flat = {d + 1: [t for sentence in document for t in sentence] for d, document in enumerate(three_token)}
    for example in iter_nsp_examples(three_token, CLS, SEP, 11, 3, 0.0):
        a = split(example)[0]
        tokens = flat[a[0] // 1000]
        assert tokens[tokens.index(a[0]) :][: len(a)] == a
    # Short random next pairs stop filling B at their target: rarely the maximum 27 (here 1 in 67).
    random_next = [length for _, length, label in lengths(three_token, 30, 1.0, seed=3) if label]
    assert sum(length == 27 for length in random_next) < 0.15 * len(random_next)


def test_a_corpus_too_small_to_split_is_refused_before_it_is_prepared(tmp_path, monkeypatch):
    from briskbert.training.tasks import pretraining
    from briskbert.training.tasks.pretraining_settings import PretrainingData

    def prepare(*_args, **_kwargs):
        raise AssertionError("the corpus was prepared")

    monkeypatch.setattr(pretraining, "prepare_corpus", prepare)
    main_process = dict(is_local_main_process=True, local_main_process_first=nullcontext)
    accelerator = SimpleNamespace(**main_process, print=print)
    for text, holds in [
        (
            "one long line " * 1000 + "\n\n  \n",
            "has a single document, too little to carve a validation split",
        ),
        ("\n \n", "has no text"),
        ("one\n\ntwo\n", "was prepared"),  # two documents: on to preparation
    ]:
        (tmp_path / "corpus.txt").write_text(text)
        with pytest.raises((ValueError, AssertionError), match=holds):
            data = PretrainingData(train_file=str(tmp_path / "corpus.txt"))
            pretraining.build_datasets(data, None, accelerator, 0)


def _pretrain_args(tmp_path, *extra):
    overrides = "hidden_size=32,intermediate_size=64,num_hidden_layers=1,hidden_dropout_prob=0.0,"
    overrides += "attention_probs_dropout_prob=0.0"
    paths = ["--train_file", str(EXCERPT), "--data_cache_dir", str(tmp_path / "cache")]
    flags = "--config_name bert-tiny --vocab_size 500 --packing_mode doc-sentences --max_seq_length 64"
    flags += " --per_device_train_batch_size 4 --max_train_steps 4 --logging_steps 1 --checkpointing_steps 2"
    return [*paths, "--config_overrides", overrides, *flags.split(), *extra]


def test_resume_mid_epoch_is_exact_keeps_the_tokenizer_and_prepares_a_damaged_cache_again(tmp_path, capsys):
    """A resume from step 2 keeps losses and tokenizer; a damaged store is prepared again."""
    pretrain_main(_pretrain_args(tmp_path, "--output_dir", str(tmp_path / "full")))
    for name in ("step_2", "tokenizer"):  # what an interrupted run leaves behind
        shutil.copytree(tmp_path / "full" / name, tmp_path / "cut" / name)
    vocab = tmp_path / "cut" / "tokenizer" / "vocab.txt"
    before = vocab.stat().st_mtime_ns
    (tokens,) = (tmp_path / "cache").glob("*/tokens.bin")
    data = bytearray(tokens.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    tokens.write_bytes(bytes(data))
    capsys.readouterr()
    resumed = _pretrain_args(tmp_path, "--output_dir", str(tmp_path / "cut"), "--resume_from_checkpoint")
    pretrain_main([*resumed, str(tmp_path / "cut" / "step_2")])
    assert vocab.stat().st_mtime_ns == before
    damaged = [line for line in capsys.readouterr().out.splitlines() if "cache is damaged" in line]
    assert damaged == [
        f"The prepared corpus cache is damaged: {tokens} does not match the sha256 it was written with (its bytes "
        "changed since); preparing it again."
    ]

    def losses(name):
        lines = (tmp_path / name / "log_history.jsonl").read_text().splitlines()
        return {e["step"]: e["loss"] for e in map(json.loads, lines) if "loss" in e}

    full, cut = losses("full"), losses("cut")
    assert full[2] != full[3]
    np.testing.assert_allclose([cut[3], cut[4]], [full[3], full[4]], rtol=1e-5)


def test_pretraining_decodes_the_masked_positions_only_and_saves_the_default(tokenizer, tmp_path):
    """The job decodes sparsely; the saved model gives transformers' full logits and the same loss."""
    from transformers import AutoModelForMaskedLM

    from briskbert.training.tasks.pretraining import build_model
    from briskbert.training.tasks.pretraining_settings import PretrainingModel

    settings = PretrainingModel(config_name="bert-tiny", config_overrides="num_hidden_layers=1")
    model = build_model(settings, tokenizer, 64, nsp=False).eval()
    input_ids = torch.randint(5, len(tokenizer), (2, 12), generator=torch.Generator().manual_seed(0))
    labels = torch.full_like(input_ids, -100)
    labels[:, 2:5] = input_ids[:, 2:5]
    trained = model(input_ids, labels=labels)
    assert trained.logits.shape == (6, len(tokenizer))
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["sparse_prediction"] is False
    published = AutoModelForMaskedLM.from_pretrained(tmp_path, trust_remote_code=True).eval()
    loaded = published(input_ids, labels=labels)
    assert loaded.logits.shape == (2, 12, len(tokenizer))
    torch.testing.assert_close(loaded.loss, trained.loss)
