"""BriskBertTokenizer: parity with transformers' BertTokenizer on the bundled excerpts (so padding, truncation
and windows are not re-tested), bad input, training, AutoTokenizer remote code."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pytest
from fresh_process import run_without_project

from briskbert.errors import SettingError
from briskbert.processes import briskbert_argv
from briskbert.tokenization import (
    SPECIAL_TOKENS,
    BriskBertTokenizer,
    EmptyCorpusError,
    TokenizerInputError,
    train_tokenizer,
    train_wordpiece_tokenizer,
)
from briskbert.tokenization.training import sample_lines

ROOT = Path(__file__).resolve().parents[1]
EXCERPTS = ROOT / "data"
FEATURES = ("input_ids", "token_type_ids", "attention_mask", "offset_mapping")
ENC_KW = dict(return_offsets_mapping=True, return_token_type_ids=True, return_attention_mask=True)


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def read_sst(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        return [row[0] for row in reader]


def assert_parity(ours_tok, ref_tok, texts: list[str], max_length: int = 64):
    """Ids, token types, masks and offsets agree, single and as pairs (each text with the next), truncated."""
    pairs = (texts[:-1], texts[1:])
    for args, truncation in (((texts,), False), (pairs, False), (pairs, "longest_first")):
        options = dict(truncation=truncation, max_length=max_length if truncation else None, **ENC_KW)
        ours, ref = ours_tok(*args, **options), ref_tok(*args, **options)
        assert all(ours[feature] == ref[feature] for feature in FEATURES), (truncation, len(args))


@pytest.fixture(scope="module")
def bert_ref(minilm_path):
    from transformers import BertTokenizer

    return BertTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="module")
def trained_excerpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok_excerpt")
    tok = train_wordpiece_tokenizer(
        files=[EXCERPTS / "wikitext2_excerpt.txt"], vocab_size=1000, output_dir=out, show_progress=False
    )
    return tok, out


# ------------------------------------------------------------------------------------- BERT parity
def test_loads_a_bert_folder_and_builds_bert_pipeline(tokenizer, bert_ref):
    assert isinstance(tokenizer, BriskBertTokenizer)
    assert len(tokenizer) == len(bert_ref) == 30522
    assert tokenizer.do_lower_case is True
    # the whole tokenizers pipeline (normaliser, pre-tokeniser, vocab, template, decoder) is identical
    assert json.loads(tokenizer.backend_tokenizer.to_str()) == json.loads(bert_ref.backend_tokenizer.to_str())


def test_parity_on_bundled_excerpts(tokenizer, bert_ref):
    texts = read_lines(EXCERPTS / "wikitext2_excerpt.txt") + read_sst(EXCERPTS / "sst2_train_excerpt.tsv")
    assert_parity(tokenizer, bert_ref, texts)


# ---------------------------------------------------------------------------------------- bad input
def test_text_that_is_not_strings_is_refused(tokenizer):
    tok = tokenizer
    for bad in (None, 5, [1, 2], ["ok", 3], [["ok", None]], b"bytes"):
        for call in (tok, tok.encode, tok.tokenize):
            with pytest.raises(TokenizerInputError, match="string"):
                call(bad)
    with pytest.raises(TypeError, match="`text` is None"):
        tok(None)
    with pytest.raises(ValueError, match=r"text_pair\[1\]"):
        tok(["a", "b"], ["c", 4])
    # pre-tokenised input and pairs of word lists are accepted
    enc = tok([["Hello", "world"]], [["a", "pair"]], is_split_into_words=True)
    assert enc.word_ids(0) == [None, 0, 1, None, 0, 1, None]


# ---------------------------------------------------------------------------------------- training
def test_trained_tokenizer_on_excerpt(trained_excerpt):
    tok, out = trained_excerpt
    assert len(tok) == 1024  # 1000 rounded up to a multiple of 64
    special_ids = [tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id]
    assert tok.convert_ids_to_tokens(special_ids) == list(SPECIAL_TOKENS)
    files = {"tokenization_briskbert.py", "tokenizer.json", "tokenizer_config.json", "vocab.txt"}
    assert {p.name for p in out.iterdir()} == files
    vocab_lines = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert vocab_lines == tok.convert_ids_to_tokens(list(range(1024)))
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BriskBertTokenizer"
    assert config["auto_map"]["AutoTokenizer"][0] == "tokenization_briskbert.BriskBertTokenizer"
    assert config["do_lower_case"] is True and config["model_max_length"] == 512
    reloaded = BriskBertTokenizer.from_pretrained(out)
    text = "The European lobster lives in the Atlantic Ocean ."
    assert reloaded(text) == tok(text)
    # a folder with only vocab.txt loads too
    only_vocab = out.parent / "only_vocab"
    only_vocab.mkdir()
    (only_vocab / "vocab.txt").write_text((out / "vocab.txt").read_text(encoding="utf-8"), encoding="utf-8")
    assert BriskBertTokenizer.from_pretrained(only_vocab)(text)["input_ids"] == tok(text)["input_ids"]


def test_training_sizes_options_and_a_dataset(tmp_path):
    # too small a corpus for the request: filled with [unusedN] up to the exact size
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("a tiny corpus\n" * 5, encoding="utf-8")
    small = train_wordpiece_tokenizer(files=[tiny], vocab_size=100, min_frequency=1, show_progress=False)
    assert len(small) == 128 and "[unused0]" in small.get_vocab()
    assert small.tokenize("[unused0]") != ["[unused0]"]
    import datasets

    rows = read_sst(EXCERPTS / "sst2_train_excerpt.tsv")
    ds = datasets.Dataset.from_dict({"sentence": rows + [None], "label": [0] * (len(rows) + 1)})
    tok = train_wordpiece_tokenizer(dataset=ds, text_column="sentence", vocab_size=512, show_progress=False)
    assert len(tok) == 512 and "[unused0]" not in tok.get_vocab()  # learned from the column's texts
    with pytest.raises(ValueError, match="text_column"):
        train_wordpiece_tokenizer(dataset=ds, text_column="text", vocab_size=512, show_progress=False)


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


def test_autotokenizer_remote_code_in_fresh_process(tmp_path, trained_excerpt):
    """A tokenizer folder, and model folders with a config transformers knows or does not, load alone."""
    from transformers import BertConfig

    trained, trained_dir = trained_excerpt
    # a model folder: a saved config next to the tokenizer files
    model_dir = tmp_path / "model"
    BertConfig(vocab_size=len(trained)).save_pretrained(model_dir)
    trained.save_pretrained(model_dir)
    # a model folder whose config has a model_type transformers does not know
    unknown = tmp_path / "unknown_type"
    trained.save_pretrained(unknown)
    (unknown / "config.json").write_text(json.dumps({"model_type": "briskbert", "vocab_size": len(trained)}))

    text = "The European lobster, Homarus gammarus, lives in the Atlantic Ocean."
    results = run_fresh(tmp_path, text, [trained_dir, model_dir, unknown])
    enc = trained(text, "a pair", return_offsets_mapping=True)
    for folder in (trained_dir, model_dir, unknown):
        got = results[str(folder)]
        assert got["cls"] == "BriskBertTokenizer" and got["module"].startswith("transformers_modules"), got
        assert got["size"] == len(trained)
        assert got["ids"] == enc["input_ids"] and got["types"] == enc["token_type_ids"]
        assert got["offsets"] == [list(o) for o in enc["offset_mapping"]]


def test_cli_says_its_result_once_and_draws_no_bar_into_a_pipe(tmp_path):
    """Piped, the trainer's bar once printed six blank lines and the result three times."""
    out = tmp_path / "tok"
    argv = ["train-tokenizer", "--files", str(EXCERPTS / "wikitext2_excerpt.txt"), "--vocab_size", "500"]
    argv += ["--no-lowercase", "--min_frequency", "3", "--output_dir", str(out)]
    proc = subprocess.run(briskbert_argv(*argv), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    (line,) = proc.stdout.splitlines()  # nothing else, not even a blank line
    assert re.fullmatch(
        rf"Trained a wordpiece tokenizer in [\d.]+ s: vocabulary size 512; saved to {out}", line
    )
    tok = BriskBertTokenizer.from_pretrained(out)
    assert len(tok) == 512 and tok.do_lower_case is False and tok.tokenize("The")[0] == "The"


def test_wordpiece_training_is_deterministic(tmp_path):
    """The trainer breaks ties in hash-map order; the saved vocabulary must not depend on it."""
    for name in ("a", "b"):
        options = dict(round_to_multiple_of=None, output_dir=tmp_path / name, show_progress=False)
        exact = train_wordpiece_tokenizer(str(EXCERPTS / "wikitext2_excerpt.txt"), vocab_size=900, **options)
        assert len(exact) == 900
    assert (tmp_path / "a" / "vocab.txt").read_bytes() == (tmp_path / "b" / "vocab.txt").read_bytes()


def test_training_refuses_empty_and_non_utf8_files_by_name(tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    with pytest.raises(EmptyCorpusError, match="blank.txt: no text"):
        train_wordpiece_tokenizer(files=[blank], vocab_size=100, show_progress=False)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("first line\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(SettingError, match=r"latin.txt is not UTF-8 text \(byte 0xe9 on line 2\)"):
        train_wordpiece_tokenizer(files=[latin], vocab_size=100, show_progress=False)


def test_sampled_training_keeps_at_most_max_lines():
    lines = [f"line {i}" for i in range(1000)]
    sample = sample_lines(iter(lines), 50, seed=1)
    assert len(sample) == 50 and sample == sorted(sample, key=lines.index) == sample_lines(lines, 50, 1)
    assert sample_lines(iter(lines), 50, seed=2) != sample
    # five lines of the excerpt cannot fill 1,024 tokens; all of them do
    excerpt = [EXCERPTS / "wikitext2_excerpt.txt"]
    few = train_wordpiece_tokenizer(files=excerpt, vocab_size=1000, max_lines=5, show_progress=False)
    assert "[unused0]" in few.get_vocab()


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_bpe_and_unigram_load_with_autotokenizer_without_remote_code(tmp_path, model):
    from transformers import AutoTokenizer

    excerpt = [EXCERPTS / "wikitext2_excerpt.txt"]
    train_tokenizer(model, excerpt, vocab_size=700, output_dir=tmp_path, show_progress=False)
    tok = AutoTokenizer.from_pretrained(tmp_path)  # no trust_remote_code
    enc = tok("The lobster lives in the sea.", "A pair")
    first, last = tok.convert_ids_to_tokens(enc["input_ids"])[:: len(enc["input_ids"]) - 1]
    if model == "bpe":  # RoBERTa's template; bytes cover any text, so nothing is unknown
        assert (first, last) == ("<s>", "</s>") and tok.mask_token == "<mask>"
        assert tok.unk_token_id not in tok("日本語 ☃")["input_ids"]
        ids = tok("The lobster lives.")["input_ids"]
        assert tok.decode(ids, skip_special_tokens=True) == "The lobster lives."
    else:
        assert (first, last) == ("[CLS]", "[SEP]") and tok.mask_token == "[MASK]"
    assert len(tok) == 700
