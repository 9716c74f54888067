"""``briskbert ablate``: variants pretrained at equal budget on the same tokenizer, data and masks.

One tiny two-variant ablation runs once for the module (a tokenizer and two pretraining processes of two
steps on the bundled WikiText-2 excerpt, about 30 s on 2 CPU cores, most of it starting Python and torch in
each process); the tests then read what it wrote. Its runs are launched through
``first_batch_recorder.py``, which records the first batch each process really drew.
"""

import json
import shlex
import sys
from pathlib import Path

import pytest

from briskbert.cli import main
from briskbert.training.experiments.ablation import ACCEPTED_FORMS, RUN_RECORD, parse_variant

ROOT = Path(__file__).resolve().parents[1]
EXCERPT = ROOT / "data" / "wikitext2_excerpt.txt"
RECORDER = Path(__file__).with_name("first_batch_recorder.py")
TRAIN_SEED = 7


def ablate_argv(output_dir: Path) -> list[str]:
    return [
        "ablate",
        "--train_file",
        str(EXCERPT),
        "--vocab_size",
        "256",
        "--max_seq_length",
        "32",
        "--packing",
        "--per_device_train_batch_size",
        "4",
        "--per_device_eval_batch_size",
        "64",
        "--max_train_steps",
        "2",
        "--eval_steps",
        "1",
        "--logging_steps",
        "1",
        "--config_overrides",
        "hidden_size=32,intermediate_size=64,num_hidden_layers=1",
        "--configs",
        "bert:bert-tiny",
        "modern:modern-tiny:num_hidden_layers=2,sliding_window=8",
        "--seeds",
        str(TRAIN_SEED),
        "--launcher",
        shlex.join([sys.executable, str(RECORDER)]),
        "--output_dir",
        str(output_dir),
    ]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("ablation")
    assert main(ablate_argv(output_dir)) == 0
    return output_dir


def run_dirs(output_dir: Path) -> list[Path]:
    return [output_dir / name / f"seed{TRAIN_SEED}" for name in ("bert", "modern")]


def test_two_variants_run_end_to_end(ablation):
    results = json.loads((ablation / "results.json").read_text())
    assert [v["name"] for v in results["variants"]] == ["bert", "modern"]
    for variant in results["variants"]:
        run = variant["runs"][str(TRAIN_SEED)]
        assert run["train_steps"] == 2 and run["peak_rss_mib"] > 50 and run["wall_time_s"] > 0
        assert 0 < run["non_embedding_parameters"] < run["parameters"]
        assert run["eval_perplexity"] == pytest.approx(2.718281828 ** run["eval_loss"], rel=1e-6)
        assert [point["step"] for point in run["curve"]] == [1, 2]
    # The same data in the same order: both variants trained on exactly as many tokens.
    tokens = {v["runs"][str(TRAIN_SEED)]["tokens_seen"] for v in results["variants"]}
    assert len(tokens) == 1
    table = (ablation / "results.md").read_text()
    assert "| bert |" in table and "| modern |" in table and "**" in table
    assert (ablation / "curves.png").stat().st_size > 10_000
    for run_dir in run_dirs(ablation):  # each run is a normal pretraining output
        assert (run_dir / "final" / "model.safetensors").is_file()
        assert (run_dir / "final" / "training_facts.json").is_file()


def test_variants_used_the_same_tokenizer_file_and_the_same_masks(ablation):
    shared = (ablation / "tokenizer" / "tokenizer.json").read_bytes()
    for run_dir in run_dirs(ablation):
        assert (run_dir / "final" / "tokenizer.json").read_bytes() == shared
    first = [json.loads((d / "first_batches.json").read_text())[str(TRAIN_SEED)] for d in run_dirs(ablation)]
    masked = [[[label != -100 for label in row] for row in batch["labels"]] for batch in first]
    assert any(any(row) for row in masked[0])
    assert masked[0] == masked[1]  # the same positions ...
    assert first[0]["labels"] == first[1]["labels"]  # ... of the same sequences,
    assert first[0]["input_ids"] == first[1]["input_ids"]  # replaced the same way


def test_rerun_skips_finished_variants(ablation, capsys):
    before = {d: (d / "all_results.json").stat().st_mtime_ns for d in run_dirs(ablation)}
    assert main(ablate_argv(ablation)) == 0
    output = capsys.readouterr().out
    assert output.count("finished before, skipped") == 2
    for run_dir in run_dirs(ablation):
        assert (run_dir / "all_results.json").stat().st_mtime_ns == before[run_dir]
        assert len(json.loads((run_dir / RUN_RECORD).read_text())["segments"]) == 1


@pytest.mark.parametrize(
    "entry, lists_the_forms",
    [
        ("rope:bert-tiny:position_embedding_type", True),  # no '='
        ("a:bert-tiny:hidden_size=64:extra", True),  # four parts
        ("rope::position_embedding_type=rope", True),  # empty preset
        ("bad name:bert-tiny", True),  # not a folder name
        ("bert-tinyy", True),  # no such preset
        ("x:bert-tiny:no_such_field=1", False),  # unknown field: the message lists the fields
        ("x:bert-tiny:num_attention_heads=3", False),  # the config's own check: 128 / 3
    ],
)
def test_malformed_configs_entry_is_refused_before_anything_runs(entry, lists_the_forms, tmp_path, capsys):
    output_dir = tmp_path / "out"
    argv = ["ablate", "--train_file", str(EXCERPT), "--max_train_steps", "1", "--output_dir", str(output_dir)]
    assert main([*argv, "--configs", "bert-tiny", entry]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1, error
    assert entry.split(":")[0] in error
    assert (ACCEPTED_FORMS in error) == lists_the_forms
    assert not output_dir.exists()


def test_variant_forms():
    assert parse_variant("bert-tiny").config_name == "bert-tiny"
    variant = parse_variant("glu:bert-tiny:mlp_type=glu,num_hidden_layers=4,attention_bias=false", {"x": 1})
    assert (variant.name, variant.config_name) == ("glu", "bert-tiny")
    assert variant.overrides == {"x": 1, "mlp_type": "glu", "num_hidden_layers": 4, "attention_bias": False}
    assert variant.pretrain_flags()[-1] == "x=1,mlp_type=glu,num_hidden_layers=4,attention_bias=false"
    assert parse_variant("configs/my.json").name == "my"
