"""Every expected user mistake ends in one ``error: ...`` line naming the file or flag and the fix, exit 2, no
traceback and no output folder; a check several jobs share runs once per kind of damage and once per job."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from briskbert.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"


# {out} is a fresh output folder per case; the other fields are the paths built by ``inputs``. Each prefix
# ends with the flag whose value the case changes: the starting model (_FROM) or the training file (_ON).
PREFIXES = {
    "CLASSIFY_FROM": "finetune-classification --output_dir {out} --train_file {sst2} --model_name_or_path",
    "CLASSIFY_ON": "finetune-classification --output_dir {out} --model_name_or_path {model} --train_file",
    "NER_ON": "finetune-ner --output_dir {out} --model_name_or_path {model} --train_file",
    "QA_ON": "finetune-qa --output_dir {out} --model_name_or_path {model} --train_file",
    "DISTILL_FROM": "distill --output_dir {out} --train_file {sst2} --teacher_model",
    "PRETRAIN_ON": "pretrain --output_dir {out} --config_name bert-tiny --train_file",
    "TOKENIZER_ON": "train-tokenizer --output_dir {out} --vocab_size 100 --files",
}

# One case a line: its id | the arguments of `briskbert` (a leading capitalised word is its prefix above) |
# what the one error line must name.
CASES = """
# the starting model folder (one check, check_model_folder, for every job that loads one)
no-tokenizer-files | CLASSIFY_FROM {no_tokenizer} | {no_tokenizer}
missing-folder | CLASSIFY_FROM {tmp}/runs/final | {tmp}/runs/final
missing-relative-folder | CLASSIFY_FROM no/such/model | does not exist
truncated-safetensors | CLASSIFY_FROM {truncated} | truncated
garbage-safetensors | CLASSIFY_FROM {garbage_weights} | safetensors
safetensors-entry-without-shape | CLASSIFY_FROM {shapeless} | model.safetensors is truncated or damaged
bad-config-json | CLASSIFY_FROM {bad_config} | config.json is not valid
config-without-model-type | CLASSIFY_FROM {untyped} | model_type
no-weights | CLASSIFY_FROM {no_weights} | no model weights
shard-index-without-a-map | CLASSIFY_FROM {mapless_index} | has no 'weight_map'
model-path-is-a-file | CLASSIFY_FROM {sst2_csv} | is a file
bad-tokenizer-json | CLASSIFY_FROM {bad_tokenizer} | tokenizer.json
empty-tokenizer-json | CLASSIFY_FROM {empty_tokenizer_json} | tokenizer.json
five-token-vocab-txt | CLASSIFY_FROM {tiny_vocab} | vocab.txt
other-model-type | CLASSIFY_FROM {gpt2_type} | 'gpt2'
weights-shaped-for-another-config | CLASSIFY_FROM {wrong_shapes} | intermediate_size
empty-tokenizer-folder | CLASSIFY_FROM {model} --tokenizer_name {empty_folder} | --tokenizer_name {empty_folder} has no tokenizer files
no-model-flag | finetune-classification --output_dir {out} --train_file {sst2} | --model_name_or_path
preset-without-tokenizer | finetune-classification --output_dir {out} --config_preset bert-tiny --train_file {sst2} | --tokenizer_name
unknown-preset | finetune-classification --output_dir {out} --config_preset bert-huge --tokenizer_name {model} --train_file {sst2} | --config_preset
# folders saved with a manifest and damaged since, in a way only the manifest tells
manifest-flipped-weights | CLASSIFY_FROM {flipped} | model.safetensors does
manifest-cut-tokenizer | finetune-ner --output_dir {out} --model_name_or_path {cut_tokenizer} --train_file {conll} | tokenizer.json has
manifest-tokenizer-name | CLASSIFY_FROM {model} --tokenizer_name {cut_tokenizer} | tokenizer.json has
# data files
non-utf8-table | CLASSIFY_ON {latin1_tsv} | not UTF-8
empty-table | CLASSIFY_ON {empty_csv} | {empty_csv}
header-only | CLASSIFY_ON {header_csv} | no rows
missing-data-file | CLASSIFY_ON {tmp}/x.csv | {tmp}/x.csv
unknown-extension | CLASSIFY_ON {latin1_txt} | .txt
ragged-csv | CLASSIFY_ON {ragged_csv} | line 3
bad-jsonl-line | CLASSIFY_ON {bad_jsonl} | line 2
missing-label-column | CLASSIFY_ON {sst2_csv} --label_column sentiment | label_column='sentiment'
no-text-column | CLASSIFY_ON {no_text_csv} | text_column
mixed-labels | CLASSIFY_ON {mixed_csv} | mixes types
fractional-labels | CLASSIFY_ON {fraction_csv} --problem_type single_label_classification | problem_type regression
too-few-label-names | CLASSIFY_ON {three_csv} --label_names neg,pos | label_names
# 0/1 data: "1" would be called "neutral"
label-names-for-other-labels | CLASSIFY_ON {sst2} --label_names negative,neutral,positive | label_names gives 3 names (label ids 0..2) but the labels found in
repeated-label-names | CLASSIFY_ON {sst2} --label_names a,a | repeats
label-names-for-regression | CLASSIFY_ON {sst2} --problem_type regression --label_names a,b | --label_names
missing-dataset-folder | finetune-classification --output_dir {out} --model_name_or_path {model} --dataset_name ./nope | ./nope
dataset-and-files | CLASSIFY_FROM {model} --dataset_name x | --dataset_name
fewer-rows-than-a-batch | CLASSIFY_ON {sst2_csv} | --per_device_train_batch_size
non-utf8-validation-file | CLASSIFY_ON {sst2} --validation_file {latin1_tsv} | --validation_file
# flags
tiny-max-seq-length | CLASSIFY_ON {sst2} --max_seq_length 4 | --max_seq_length
max-seq-length-past-positions | CLASSIFY_ON {sst2} --max_seq_length 1024 | --max_seq_length 1024 exceeds the model's max_position_embeddings 512
zero-learning-rate | CLASSIFY_ON {sst2} --learning_rate 0 | --learning_rate must be > 0, got 0.0.
unknown-flag | CLASSIFY_ON {sst2} --lr 3 | --lr
# NER; a file of another shape is named as not CoNLL (it read as one sentence of texts tagged with labels)
non-utf8-conll | NER_ON {latin1_txt} | not UTF-8
conll-no-sentences | NER_ON {docstart_txt} | no sentences
conll-bad-tag | NER_ON {bad_tag_txt} | X-PER
ner-tsv | NER_ON {sst2} | {sst2} is not a CoNLL file: line 2 ('when are bears bears and
ner-json | NER_ON {squad} | {squad} is not a CoNLL file: line 1 is JSON
ner-csv | NER_ON {sst2_csv} | is not a CoNLL file: line 1 ('sentence,label') has one field, no tag; expected one token per line
ner-missing-column | NER_ON {conll} --token_column words | token_column
ner-crf-on-every-sub-word | NER_ON {conll} --crf --label_all_tokens | --label_all_tokens
# QA
qa-truncated-weights | finetune-qa --output_dir {out} --model_name_or_path {truncated} --train_file {squad} | truncated
squad-invalid-json | QA_ON {bad_json} | not valid JSON
squad-wrong-shape | QA_ON {not_squad_json} | 'data' list
squad-v2-without-flag | QA_ON {squad_v2_json} | --version_2_with_negative
squad-no-questions | QA_ON {squad} --train_articles 90:99 | no questions
squad-bad-range | QA_ON {squad} --train_articles first | --train_articles
doc-stride-too-large | QA_ON {squad} --max_seq_length 128 --doc_stride 100 | --doc_stride
qa-answer-start-is-a-string | QA_ON {string_start_json} | answer_start
qa-answers-not-in-context | QA_ON {absent_answer_json} | not in their context
# distillation
missing-teacher | DISTILL_FROM {tmp}/runs/sst2/final | {tmp}/runs/sst2/final
teacher-is-not-a-classifier | DISTILL_FROM {model} | not a sequence classifier
teacher-without-tokenizer | DISTILL_FROM {teacher_no_tokenizer} | no tokenizer files
labels-unknown-to-teacher | distill --output_dir {out} --teacher_model {teacher} --train_file {three_csv} | the teacher's labels
student-layers-not-numbers | DISTILL_FROM {teacher} --student_layers a,b | --student_layers
student-layers-out-of-range | DISTILL_FROM {teacher} --student_layers 0,7 | --student_layers
zero-temperature | DISTILL_FROM {teacher} --temperature 0 | --temperature
alpha-above-one | DISTILL_FROM {teacher} --alpha_kd 2 | --alpha_kd
unknown-student-preset | DISTILL_FROM {teacher} --student_preset huge | --student_preset
two-student-choices | DISTILL_FROM {teacher} --student_preset bert-tiny --student_layers 0 | at most one
student-without-weights | DISTILL_FROM {teacher} --student_model {no_weights} | --student_model
# the tokenizer and pretraining read text files their own way
tokenizer-blank-lines | TOKENIZER_ON {blank_lines_txt} | {blank_lines_txt}
tokenizer-non-utf8 | TOKENIZER_ON {latin1_txt} | not UTF-8
tokenizer-missing-file | TOKENIZER_ON {tmp}/a.txt | {tmp}/a.txt
tokenizer-vocab-size-absurd | train-tokenizer --output_dir {out} --files {text_txt} --vocab_size 1000000000 | --vocab_size
pretrain-non-utf8 | PRETRAIN_ON {latin1_txt} --vocab_size 200 | not UTF-8
pretrain-empty-file | PRETRAIN_ON {empty_txt} --vocab_size 200 | {empty_txt}
pretrain-blank-lines-file | PRETRAIN_ON {blank_lines_txt} --vocab_size 200 | {blank_lines_txt}
pretrain-vocab-size-zero | PRETRAIN_ON {wikitext} --vocab_size 0 | --vocab_size
pretrain-cut-tokenizer-json | PRETRAIN_ON {wikitext} --tokenizer_name {bad_tokenizer} | {bad_tokenizer}/tokenizer.json is not valid JSON
negative-hidden-size | PRETRAIN_ON {wikitext} --config_overrides hidden_size=-8 | hidden_size
string-hidden-size | PRETRAIN_ON {wikitext} --config_overrides hidden_size=big | hidden_size
# the parameter count is extrapolated from one and two layers, not built
pretrain-a-million-layers | PRETRAIN_ON {wikitext} --vocab_size 300 --config_overrides num_hidden_layers=1000000 | --config_overrides this model has
pretrain-a-billion-positions | PRETRAIN_ON {wikitext} --vocab_size 300 --config_overrides max_position_embeddings=1000000000 | --config_overrides this model has
# the other jobs that load a model folder run the same check before anything else (publish also with
# --no_verify, before anything is sent)
convert-truncated | convert --src {truncated} --out {out} | model.safetensors
export-truncated-safetensors | export-onnx --model_dir {truncated} --output_dir {out} | {truncated}
export-no-tokenizer | export-onnx --model_dir {no_tokenizer} --output_dir {out} | no tokenizer
publish-no-verify-truncated-weights | publish --model_dir {truncated} --repo_id me/m --no_verify | {truncated}/model.safetensors is truncated
publish-auto-map-not-a-mapping | publish --model_dir {oops} --repo_id me/m --dry_run | 'auto_map'
"""
ROWS = [line.split(" | ") for line in CASES.strip().splitlines() if not line.startswith("#")]


def command_line(argv: str, **fields) -> list[str]:
    """``argv`` with its leading prefix word expanded and ``fields`` filled in, as arguments."""
    first, _, rest = argv.partition(" ")
    return f"{PREFIXES.get(first, first)} {rest}".format(**fields).split()


NO_TOKENIZER = ("tokenizer*", "vocab.txt", "special_*")
WEIGHTS = "model.safetensors"


def _copy(source: Path, target: Path, ignore=(), replace=None, manifest: bool = False) -> Path:
    """A hard-linked copy of ``source`` without ``ignore``; ``replace`` is written after any manifest."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*ignore), copy_function=os.link)
    if manifest:
        from briskbert.files import write_manifest

        write_manifest(target)
    for name, content in (replace or {}).items():
        (target / name).unlink(missing_ok=True)  # break the hard link: the source keeps its content
        (target / name).write_bytes(content.encode() if isinstance(content, str) else content)
    return target


def _damaged_models(model: Path) -> dict:
    """How each copy of ``model`` is broken: weights, config and tokenizer damaged one way each."""
    weights, tokenizer_json = (model / WEIGHTS).read_bytes(), (model / "tokenizer.json").read_bytes()
    config = json.loads((model / "config.json").read_text())
    middle = slice(len(weights) // 2, len(weights) // 2 + 16)
    flipped = bytearray(weights)
    flipped[middle] = bytes(b ^ 0xFF for b in weights[middle])  # the same size, other bytes
    shapeless = json.dumps({"w": {"dtype": "F32"}}).encode()  # a safetensors header; its tensor has no shape

    def config_json(**changes) -> dict:
        """config.json with ``changes``; a field changed to None is left out."""
        fields = {k: v for k, v in {**config, **changes}.items() if k not in changes or v is not None}
        return {"config.json": json.dumps(fields)}

    return {
        "no_tokenizer": dict(ignore=NO_TOKENIZER),
        "no_weights": dict(ignore=("*.safetensors",)),
        "mapless_index": dict(
            ignore=("*.safetensors",), replace={"model.safetensors.index.json": '{"weight_map": ["a"]}'}
        ),
        "truncated": dict(replace={WEIGHTS: weights[: len(weights) // 2]}),
        "garbage_weights": dict(replace={WEIGHTS: b"<html>502 Bad Gateway</html>"}),
        "shapeless": dict(replace={WEIGHTS: len(shapeless).to_bytes(8, "little") + shapeless}),
        "bad_config": dict(replace={"config.json": '{"model_type": "briskbert",'}),
        "untyped": dict(replace=config_json(model_type=None)),
        "gpt2_type": dict(replace=config_json(model_type="gpt2")),
        "wrong_shapes": dict(replace=config_json(intermediate_size=config["intermediate_size"] * 2)),
        "oops": dict(replace=config_json(auto_map="oops")),
        "bad_tokenizer": dict(replace={"tokenizer.json": '{"version": "1.0", "model": '}),
        "empty_tokenizer_json": dict(replace={"tokenizer.json": "{}"}),
        "tiny_vocab": dict(
            ignore=("tokenizer.json", "tokenizer_config.json"),
            replace={"vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"},
        ),
        "flipped": dict(replace={WEIGHTS: bytes(flipped)}, manifest=True),
        "cut_tokenizer": dict(replace={"tokenizer.json": tokenizer_json[:-100]}, manifest=True),
    }


def _squad_json(**question) -> str:
    paragraph = {"context": "Paris is the capital.", "qas": [{"id": "1", "question": "Which?", **question}]}
    return json.dumps({"data": [{"title": "t", "paragraphs": [paragraph]}]})


DATA_FILES = {  # name_ext -> content (bytes where it is not UTF-8)
    "latin1_tsv": "sentence\tlabel\ncaf\xe9 cr\xe8me\t1\n".encode("latin-1"),
    "latin1_txt": "caf\xe9 B-LOC\n".encode("latin-1"),
    "empty_csv": "",
    "empty_txt": "",
    "blank_lines_txt": "\n  \n\n",
    "header_csv": "sentence,label\n",
    "ragged_csv": "sentence,label\ngood,1\nbad,0,extra\n",
    "bad_jsonl": '{"sentence": "good", "label": 1}\n{"sentence": "bad", \n',
    "sst2_csv": "sentence,label\ngood film,1\nbad film,0\n",
    "no_text_csv": "review,label\ngood film,1\n",
    "mixed_csv": "sentence,label\ngood,1\nbad,negative\n",
    "fraction_csv": "sentence,label\ngood,0.5\nbad,1.5\n",
    "three_csv": "sentence,label\ngood,2\nbad,0\nso so,1\n",
    "docstart_txt": "-DOCSTART- -X- O O\n\n",
    "bad_tag_txt": "Bob X-PER\nruns O\n",
    "bad_json": '{"data": [',
    "not_squad_json": '[{"question": "q", "context": "c"}]',
    "text_txt": "A plain line of text for a tokenizer.\nAnd another one.\n",
    "string_start_json": _squad_json(answers=[{"text": "Paris", "answer_start": "0"}]),
    "absent_answer_json": _squad_json(answers=[{"text": "Berlin", "answer_start": 0}]),
    "squad_v2_json": _squad_json(answers=[], is_impossible=True),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer, tiny_model) -> dict:
    from briskbert.modeling import BriskBertForMaskedLM, BriskBertForSequenceClassification

    tmp = tmp_path_factory.mktemp("bad_inputs")
    paths = {"tmp": tmp, "model": tmp / "model", "teacher": tmp / "teacher", "empty_folder": tmp / "empty"}
    paths |= {"sst2": DATA / "sst2_train_excerpt.tsv", "conll": DATA / "conll2003_train_excerpt.txt"}
    paths |= {"squad": DATA / "xquad_en_excerpt.json", "wikitext": DATA / "wikitext2_excerpt.txt"}
    paths["empty_folder"].mkdir()
    tiny_model(BriskBertForMaskedLM).save_pretrained(paths["model"])
    labels = dict(num_labels=2, id2label={0: "0", 1: "1"}, label2id={"0": 0, "1": 1})
    tiny_model(BriskBertForSequenceClassification, **labels).save_pretrained(paths["teacher"])
    for folder in (paths["model"], paths["teacher"]):
        tokenizer.save_pretrained(folder)
    paths["teacher_no_tokenizer"] = _copy(paths["teacher"], tmp / "teacher_no_tokenizer", NO_TOKENIZER)
    for name, damage in _damaged_models(paths["model"]).items():
        paths[name] = _copy(paths["model"], tmp / name, **damage)
    for name, content in DATA_FILES.items():
        paths[name] = tmp / ".".join(name.rsplit("_", 1))
        paths[name].write_bytes(content.encode() if isinstance(content, str) else content)
    return paths


def assert_one_clear_error(code, stderr: str, names: str, out: Path) -> None:
    error_lines = [line for line in stderr.splitlines() if "error:" in line]
    assert code == 2, f"exit status {code}; stderr:\n{stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-2000:]
    assert len(error_lines) == 1, stderr[-2000:]
    assert names in error_lines[0], f"{names!r} not named in: {error_lines[0]}"
    assert not out.exists(), f"{out} was left behind"


@pytest.mark.parametrize(("argv", "names"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_bad_input_is_one_error_line_exit_2(argv, names, inputs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths in a case resolve in an empty folder
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach for the network
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the command names its parser through argv[0]
    out = tmp_path / "out"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(command_line(argv, out=out, **inputs))
        except SystemExit as stop:  # argparse's own errors
            code = stop.code
    assert_one_clear_error(code, stderr.getvalue(), names.format(out=out, **inputs), out)


@pytest.mark.slow  # a fresh process imports torch (~6 s): the one check of what a shell sees
def test_mistyped_name_in_a_real_process_fails_at_once(inputs, tmp_path):
    """A name that is no local folder is looked up on the Hub once, without retries: one line in seconds."""
    out = tmp_path / "out"
    argv = command_line("DISTILL_FROM teacher_typo", out=out, **inputs)
    proc = subprocess.run(
        [sys.executable, "-m", "briskbert", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert_one_clear_error(proc.returncode, proc.stderr, "--teacher_model 'teacher_typo'", out)
