"""The corpus store (``training/data/corpus.py``), byte for byte, on small corpora and a word-level tokenizer,
against the ``tokenizers`` library's own encodings grouped by hand; the cache, several workers, the errors."""

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from briskbert.errors import SettingError, UserError
from briskbert.files import MANIFEST_FILE
from briskbert.training.data import corpus
from briskbert.training.data.corpus import (
    CorpusSource,
    PreparationSettings,
    TokenEncoder,
    check_corpus_file,
    default_cache_dir,
    file_builder,
    iter_documents,
    prepare_corpus,
    split_sentences,
)

WORDS = ["[UNK]", "[SEP]", "the", "cat", "sat", "dog", "ran", "a", "bird", "flew", "on", "mat", ".", "!", "?"]


class WordTokenizer:
    """What the store needs from a tokenizer: a tokenizers backend, a length and the separator id."""

    sep_token_id = 1

    def __init__(self, words=WORDS):
        backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
        # "~" is dropped: a line of it is text that gives no token ids
        backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace("~", "")])
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
        self.backend_tokenizer, self.words = backend, words

    def __len__(self):
        return len(self.words)


def ids(text: str) -> list[int]:
    return WordTokenizer().backend_tokenizer.encode(text, add_special_tokens=False).ids


TEXT = "The cat sat. The dog ran!\nA bird flew.\n\n\n  \nThe mat?\n\nthe cat sat on the mat.\n"
# documents (a blank line ends one; paragraphs are lines): [[p1, p2], [p3], [p4]]
DOCUMENTS = [["The cat sat. The dog ran!", "A bird flew."], ["The mat?"], ["the cat sat on the mat."]]


def prepare(tmp_path, text=TEXT, name="corpus.txt", tokenizer=None, log=None, **changes):
    """The store of ``tmp_path / name`` (written with ``text`` unless it exists), cached in ``tmp_path``."""
    path = tmp_path / name
    if not path.exists():
        path.write_text(text, encoding="utf-8")
    settings = PreparationSettings(cache_dir=str(tmp_path / "cache"), show_progress=False, **changes)
    source = CorpusSource(str(path))
    return prepare_corpus(source, tokenizer or WordTokenizer(), settings, log=log or [].append)


def expected_store(documents):
    tokens, doc_offsets, segments, doc_segments = [], [0], [], [0]
    for doc in documents:
        pieces = [ids(s) for s in doc if ids(s)]
        for piece in pieces:
            segments.append((len(tokens), len(tokens) + len(piece)))
            tokens += piece
        if pieces:
            tokens.append(1)
        doc_offsets.append(len(tokens))
        doc_segments.append(len(segments))
    return tokens, doc_offsets, segments, doc_segments


def assert_store(store, documents):
    tokens, doc_offsets, segments, doc_segments = expected_store(documents)
    assert store.tokens().tolist() == tokens
    assert store.document_offsets().tolist() == doc_offsets
    assert store.segment_offsets().tolist() == [list(s) for s in segments]
    assert store.document_segment_offsets().tolist() == doc_segments
    assert (store.num_tokens, store.num_documents) == (len(tokens), len(documents))


def test_paragraph_store_holds_each_documents_ids_then_a_separator(tmp_path):
    tokenizer = WordTokenizer()  # as a sentence-transformers tokenizer.json is saved: 128 tokens, padded
    tokenizer.backend_tokenizer.enable_truncation(3)
    tokenizer.backend_tokenizer.enable_padding(length=8, pad_id=0)
    store = prepare(tmp_path, tokenizer=tokenizer)
    assert_store(store, DOCUMENTS)  # neither padded nor truncated
    assert store.meta["dtype"] == "uint16" and store.meta["settings"] == {"sentences": False}
    assert os.path.getsize(store.folder / "tokens.bin") == 2 * store.num_tokens


def test_sentence_store_splits_paragraphs_into_sentences(tmp_path):
    store = prepare(tmp_path, sentences=True)
    sentences = [[s for p in doc for s in split_sentences(p)] for doc in DOCUMENTS]
    assert sentences[0] == ["The cat sat.", "The dog ran!", "A bird flew."]
    assert_store(store, sentences)
    # a sentence ends at end punctuation and a space before a sentence start
    sentences = ["One.", "Two!", "Three? four.", "(Five) 6 is.", "@me"]
    assert split_sentences("One. Two! Three? four. (Five) 6 is. @me") == sentences
    assert split_sentences("e.g. this") == ["e.g. this"] and split_sentences("  ") == []


def test_the_cache_is_reused_and_any_change_prepares_again(tmp_path, monkeypatch):
    messages, path = [], tmp_path / "corpus.txt"
    monkeypatch.setattr(corpus, "_FINGERPRINT_SAMPLE", 8)  # the file's first and last 8 bytes are sampled

    def run(**changes):
        return prepare(tmp_path, log=messages.append, **changes)

    first = run()
    n = len(expected_store(DOCUMENTS)[0])
    assert messages[-1].startswith(f"Prepared {path}: 3 documents, {n} tokens in ")
    assert messages[-1].endswith(f"with 1 worker(s); cached in {first.folder}")
    assert first.folder.parent == tmp_path / "cache" and first.folder.name.startswith("corpus.txt-")
    assert run().folder == first.folder
    assert messages[-1] == (
        f"Reusing the prepared corpus {first.folder} (3 documents, {n} tokens); delete that folder to prepare it again."
    )
    assert run(sentences=True).folder != first.folder
    assert run(tokenizer=WordTokenizer(words=[*WORDS, "fish"])).folder != first.folder
    stat = path.stat()
    path.write_text(TEXT.replace("the mat.", "the cat."))  # same size and modification time: the end's sample
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    edited = run()
    assert edited.folder != first.folder and edited.tokens().tolist() != first.tokens().tolist()
    edited_tokens = edited.tokens().tolist()
    fresh = run(overwrite=True)  # an intact store, prepared again on request
    assert messages[-1].startswith(f"Prepared {path}: 3 documents")
    assert fresh.folder == edited.folder and fresh.tokens().tolist() == edited_tokens
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]


def flip_bytes(path, offset, count=4):
    data = bytearray(path.read_bytes())
    data[offset : offset + count] = bytes(b ^ 0xFF for b in data[offset : offset + count])
    path.write_bytes(bytes(data))


def damage_and_prepare_again(tmp_path, damage):
    """Prepare, damage the cached store, prepare again: the messages and the two stores' tokens."""
    messages = []
    first = prepare(tmp_path, log=messages.append)
    expected = first.tokens().tolist()
    damage(first.folder)
    second = prepare(tmp_path, log=messages.append)
    assert second.folder == first.folder and second.tokens().tolist() == expected
    return messages[1:]


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda folder: flip_bytes(folder / "documents.npy", 10), "documents.npy does not match the sha256"),
        (lambda folder: (folder / "tokens.bin").write_bytes(b""), "tokens.bin has 0 bytes"),
        (lambda folder: (folder / MANIFEST_FILE).unlink(), f"has no {MANIFEST_FILE}"),
    ],
    ids=["changed", "truncated", "unlisted"],
)
def test_a_damaged_cache_is_prepared_again_saying_what_is_wrong(tmp_path, damage, problem):
    messages = damage_and_prepare_again(tmp_path, damage)
    assert messages[0].startswith("The prepared corpus cache is damaged: ") and problem in messages[0]
    assert messages[0].endswith("; preparing it again.") and "\n" not in messages[0]
    assert messages[1].startswith("Prepared ")


def test_several_workers_and_small_chunks_give_the_same_store(tmp_path, monkeypatch):
    text = "".join(f"the cat sat {'. '.join(['a bird flew'] * (i % 4 + 1))}.\n\n" for i in range(200))
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    single = prepare(tmp_path / "one", text=text)
    monkeypatch.setattr(corpus, "_CHUNK_CHARACTERS", 300)  # many chunks, more than the workers have in flight
    chunked = prepare(tmp_path / "two", text=text, num_workers=2)
    assert chunked.num_documents == single.num_documents == 200
    for read in ("tokens", "document_offsets", "segment_offsets", "document_segment_offsets"):
        assert getattr(chunked, read)().tolist() == getattr(single, read)().tolist()


def test_long_lines_are_read_and_tokenized_in_pieces_that_give_the_ids_of_the_whole(tmp_path, monkeypatch):
    # Lines many pieces long; "~" runs give no ids, so some pieces (and a document's last ones) have none.
    words = ["the", "cat", "sat.", "a", "bird", "flew!", "~~", "on", "mat?"]
    lines = [" ".join(words[(k * 7 + i) % len(words)] for i in range(k * 9)) for k in range(1, 9)]
    text = f"{lines[0]}\n  {lines[1]}  \n\n{lines[2]} ~~ ~~ ~~ ~~ ~~ ~~ ~~\n\n~~\n\n" + "\n\n".join(lines[3:])
    documents = [[lines[0], lines[1]], [lines[2]], ["~~"], *[[line] for line in lines[3:]]]
    tokens, doc_offsets, _, _ = expected_store(documents)
    monkeypatch.setattr(corpus, "_PIECE_CHARACTERS", 16)
    for chunk in range(10, 90, 7):
        monkeypatch.setattr(corpus, "_CHUNK_CHARACTERS", chunk)
        for workers in (1, 2) if chunk == 10 else (1,):
            (tmp_path / f"{chunk}-{workers}").mkdir()
            store = prepare(tmp_path / f"{chunk}-{workers}", text=text, num_workers=workers)
            assert store.tokens().tolist() == tokens
            assert store.document_offsets().tolist() == doc_offsets
    pieces = [p for p, _ in corpus.iter_paragraphs(CorpusSource(str(tmp_path / "10-1" / "corpus.txt")))]
    assert max(map(len, pieces)) <= 16 + 4
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "").replace("\n", "")


def test_pieces_are_cut_before_a_whitespace_so_byte_level_ids_are_those_of_the_whole(tmp_path, monkeypatch):
    from tokenizers import decoders, trainers

    draw = random.Random(0)
    words, spaces = ["the", "cat,", "sat", "on", "mat.", "a", "bird", "flew"], [" ", "  ", "\t", " \t "]
    line = "".join(draw.choice(words) + draw.choice(spaces) for _ in range(300))
    backend = Tokenizer(models.BPE())
    # a space belongs to the next word
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator([line], trainers.BpeTrainer(vocab_size=300, show_progress=False))
    (tmp_path / "line.txt").write_text(line.strip() + "\n")
    monkeypatch.setattr(corpus, "_PIECE_CHARACTERS", 40)
    pieces = [text for text, _ in corpus.iter_paragraphs(CorpusSource(str(tmp_path / "line.txt")))]
    assert len(pieces) > 30 and "".join(pieces) == line.strip()
    assert [i for piece in pieces for i in backend.encode(piece).ids] == backend.encode(line.strip()).ids


_PEAK_MEMORY = """
import resource, sys, tempfile
from test_corpus import WordTokenizer
from briskbert.training.data.corpus import CorpusSource, PreparationSettings, prepare_corpus

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
settings = PreparationSettings(cache_dir=tempfile.mkdtemp(), show_progress=False)
store = prepare_corpus(CorpusSource(sys.argv[1]), WordTokenizer(), settings, log=lambda *_: None)
print(store.num_documents, store.num_tokens, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_the_memory_preparation_takes_does_not_grow_with_the_longest_line(tmp_path):
    # One 6 MB line (1.5 M words) in a fresh process: tokenizing it whole took about 1 GB; in pieces it
    # takes a few MB (ru_maxrss is in KiB on Linux).
    import subprocess
    import sys

    (tmp_path / "line.txt").write_text("the cat " * 750_000 + "\n")
    script = tmp_path / "peak.py"
    script.write_text(_PEAK_MEMORY)
    tests = {"PYTHONPATH": str(Path(__file__).parent)}  # the script imports this module's WordTokenizer
    command = [sys.executable, str(script), str(tmp_path / "line.txt")]
    output = subprocess.run(command, capture_output=True, text=True, env=os.environ | tests)
    assert output.returncode == 0, output.stderr
    documents, tokens, growth_kib = map(int, output.stdout.split())
    assert (documents, tokens) == (1, 1_500_001)
    assert growth_kib * 1024 < 150e6, f"preparing a 6 MB line took {growth_kib / 1024:.0f} MiB more"


def test_a_large_vocabulary_is_stored_as_uint32(tmp_path):
    words = [*WORDS, *[f"w{i}" for i in range(65536 - len(WORDS))]]
    assert TokenEncoder(WordTokenizer(words)).dtype == np.uint16  # 65,536 ids fit
    store = prepare(tmp_path, text="the cat w70000\n", tokenizer=WordTokenizer([*words, "w70000"]))
    assert store.meta["dtype"] == "uint32" and store.tokens().tolist() == [2, 3, 65536, 1]


def test_a_corpus_without_text_is_refused_and_leaves_nothing(tmp_path):
    for number, text in enumerate(["\n\n   \n", "~~~\n\n~ ~\n"]):  # no lines; lines that give no ids
        (tmp_path / str(number)).mkdir()
        with pytest.raises(UserError, match=r"corpus.txt holds no text \(only empty lines or rows\)"):
            prepare(tmp_path / str(number), text=text)
        assert not list((tmp_path / str(number) / "cache").iterdir())  # no half-written folder


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("BRISKBERT_CACHE", str(tmp_path / "b"))
    assert default_cache_dir() == tmp_path / "b" / "pretraining_data"
    monkeypatch.delenv("BRISKBERT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "briskbert" / "pretraining_data"


def test_file_types_columns_and_rows(tmp_path):
    """A row of a table is one document (its lines its paragraphs); the text column must exist."""
    assert file_builder("a.TXT") == ("text", {}) and file_builder("x.tsv") == ("csv", {"delimiter": "\t"})
    (tmp_path / "x.xml").write_text("<text/>")
    with pytest.raises(SettingError, match=r"x.xml: unsupported file type '.xml'; use one of .csv, .json, "):
        check_corpus_file(str(tmp_path / "x.xml"), "train_file")
    rows = [{"text": "The cat sat.\n\nThe dog ran!"}, {"text": ""}, {"text": "a bird flew."}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = prepare(tmp_path, name="corpus.jsonl")
    assert_store(store, [["The cat sat.", "The dog ran!"], ["a bird flew."]])
    with pytest.raises(ValueError, match=r"no text column 'text2'; the file has columns \['text'\]"):
        list(iter_documents(CorpusSource(str(tmp_path / "corpus.jsonl"), text_column="text2")))
    (tmp_path / "corpus.tsv").write_text("id\tbody\n1\tthe mat\n2\ta cat\n")
    with pytest.raises(
        ValueError, match=r"no text column '\(none given\)'; the file has columns \['id', 'body'\]"
    ):
        list(iter_documents(CorpusSource(str(tmp_path / "corpus.tsv"))))
    body = CorpusSource(str(tmp_path / "corpus.tsv"), text_column="body")
    assert list(iter_documents(body)) == [["the mat"], ["a cat"]]


def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    (tmp_path / "latin.txt").write_bytes("the cat\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin.txt is not UTF-8 text \(byte 0xe9 on line 2\)"):
        list(iter_documents(CorpusSource(str(tmp_path / "latin.txt"))))


def test_a_hub_dataset_is_streamed_and_read_from_its_text_column(monkeypatch):
    import datasets

    asked = []

    def load_dataset(name, config, split, streaming):
        asked.append((name, config, split, streaming))
        return [{"text": "from text", "content": "from content"}, {"text": "a row", "content": ""}]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    named = CorpusSource(dataset_name="user/wiki", dataset_config_name="en", text_column="content")
    assert list(iter_documents(named)) == [["from content"]]
    assert list(iter_documents(CorpusSource(dataset_name="user/wiki"))) == [["from text", "a row"]]
    assert asked[0] == ("user/wiki", "en", "train", True)  # streamed: a large split is never held in memory
