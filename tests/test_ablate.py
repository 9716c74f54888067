"""``briskbert ablate``: variants pretrained at equal budget on the same tokenizer, data and masks; one tiny
two-variant ablation runs once per module, launched through ``first_batch_recorder.py``."""

import json
import math
import shlex
import sys
from pathlib import Path

import pytest

from briskbert.cli import main
from briskbert.errors import UserError
from briskbert.training.experiments.ablation import (
    ACCEPTED_FORMS,
    RUN_RECORD,
    AblationSettings,
    parse_variants,
    run_pretraining,
    run_segment,
    tokenizer_definition,
)

EXCERPT = Path(__file__).resolve().parents[1] / "data" / "wikitext2_excerpt.txt"
RECORDER = Path(__file__).with_name("first_batch_recorder.py")
SEED = 7


def ablate_argv(output_dir: Path) -> list[str]:
    return [
        "ablate", "--train_file", str(EXCERPT), "--vocab_size", "256", "--max_seq_length", "32", "--packing",
        "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "64", "--max_train_steps", "2",
        "--eval_steps", "1", "--logging_steps", "1", "--validation_split_percentage", "1",
        "--config_overrides", "hidden_size=32,intermediate_size=64,num_hidden_layers=1",
        "--configs", "bert:bert-tiny", "modern:modern-tiny:num_hidden_layers=2,sliding_window=8",
        "--seeds", str(SEED), "--launcher", shlex.join([sys.executable, str(RECORDER)]),
        "--output_dir", str(output_dir),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("ablation")
    assert main(ablate_argv(output_dir)) == 0
    return output_dir, [output_dir / name / f"seed{SEED}" for name in ("bert", "modern")]


def test_two_variants_run_at_equal_budget_and_are_reported(ablation):
    output_dir, run_dirs = ablation
    results = json.loads((output_dir / "results.json").read_text())
    assert [v["name"] for v in results["variants"]] == ["bert", "modern"]
    shared = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}
    overrides = [variant["config_overrides"] for variant in results["variants"]]
    assert overrides == [shared, {**shared, "num_hidden_layers": 2, "sliding_window": 8}]  # its own come last
    runs = [variant["runs"][str(SEED)] for variant in results["variants"]]
    for run in runs:
        assert run["train_steps"] == 2 and run["peak_rss_mib"] > 50 and run["wall_time_s"] > 0
        assert 0 < run["non_embedding_parameters"] < run["parameters"]
        assert run["eval_perplexity"] == pytest.approx(math.exp(run["eval_loss"]), rel=1e-6)
        assert [point["step"] for point in run["curve"]] == [1, 2]
    assert runs[0]["tokens_seen"] == runs[1]["tokens_seen"]
    table = (output_dir / "results.md").read_text()
    assert "| bert |" in table and "| modern |" in table and "**" in table
    assert (output_dir / "curves.png").stat().st_size > 10_000
    # Each run is a normal pretraining output, on the very tokenizer the ablation trained once ...
    shared = (output_dir / "tokenizer" / "tokenizer.json").read_bytes()
    for run_dir in run_dirs:
        assert (run_dir / "final" / "model.safetensors").is_file()
        assert (run_dir / "final" / "tokenizer.json").read_bytes() == shared
    # ... and saw the same sequences with the same masked positions, replaced the same way.
    first = [json.loads((d / "first_batches.json").read_text())[str(SEED)] for d in run_dirs]
    assert any(label != -100 for row in first[0]["labels"] for label in row)
    assert first[0] == first[1]


def test_rerun_skips_finished_variants(ablation, capsys):
    output_dir, run_dirs = ablation
    before = {d: (d / "all_results.json").stat().st_mtime_ns for d in run_dirs}
    assert main(ablate_argv(output_dir)) == 0
    assert capsys.readouterr().out.count("finished before, skipped") == 2
    for run_dir in run_dirs:
        assert (run_dir / "all_results.json").stat().st_mtime_ns == before[run_dir]
        assert len(json.loads((run_dir / RUN_RECORD).read_text())["segments"]) == 1


def test_an_interrupted_run_is_resumed_and_one_with_other_flags_refused(tmp_path):
    """With a stand-in for ``briskbert pretrain`` that just writes a finished run."""
    finish = (
        "import pathlib, sys; out = pathlib.Path(sys.argv[sys.argv.index('--output_dir') + 1]); "
        "(out / 'final').mkdir(); (out / 'final' / 'config.json').write_text('{}'); "
        "(out / 'all_results.json').write_text('{}')"
    )
    launcher = shlex.join([sys.executable, "-c", finish])
    settings = AblationSettings(["bert-tiny"], str(tmp_path), train_file=str(EXCERPT), launcher=launcher)
    argv, run_dir = ["pretrain", "--output_dir", str(tmp_path / "run")], tmp_path / "run"
    segment = {"argv": argv, "returncode": 130, "wall_time_s": 5.0, "peak_rss_mib": 900.0}
    run_dir.mkdir()
    (run_dir / RUN_RECORD).write_text(json.dumps({"argv": argv, "segments": [segment]}))
    record = run_pretraining(settings, argv, run_dir, "bert seed 1")
    assert [s["wall_time_s"] > 0 for s in record["segments"]] == [True, True]  # the earlier one is kept
    assert record["segments"][1]["argv"][-2:] == ["--resume_from_checkpoint", "latest"]
    with pytest.raises(UserError, match="was run with other flags"):
        run_pretraining(settings, [*argv, "--learning_rate", "1"], run_dir, "bert seed 1")


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


def test_a_config_file_names_its_variant_and_a_name_is_used_once():
    assert parse_variants(["configs/my.json"], None)[0][:2] == ("my", "configs/my.json")
    with pytest.raises(UserError, match=r"the variant name\(s\) \['a'\] appear more than once"):
        parse_variants(["a:bert-tiny", "a:modern-tiny"], None)


def test_a_given_tokenizer_is_compared_by_its_definition_not_its_bytes(ablation, minilm_path, tmp_path):
    """Each run saves the given tokenizer again through transformers: other bytes, the same tokenizer."""
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() != (minilm_path / "tokenizer.json").read_bytes()
    assert tokenizer_definition(tmp_path) == tokenizer_definition(minilm_path)
    assert tokenizer_definition(tmp_path) != tokenizer_definition(ablation[0] / "tokenizer")


def test_a_tokenizer_folder_without_tokenizer_json_is_refused(tmp_path, capsys):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    argv = ["ablate", "--train_file", str(EXCERPT), "--configs", "bert-tiny", "--tokenizer_name"]
    assert main([*argv, str(tmp_path), "--output_dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    expected = f"error: --tokenizer_name {tmp_path} has no tokenizer.json"
    assert error.startswith(expected) and error.count("\n") == 1


def test_a_runs_progress_bar_follows_its_logged_steps_past_a_line_being_written(tmp_path):
    class Bar:
        n = 0

        def update(self, steps):
            self.n += steps

    class Settings:
        def command(self, *argv):
            history = tmp_path / "log_history.jsonl"
            return [
                sys.executable,
                "-c",
                f"import time; log = open({str(history)!r}, 'a', buffering=1); log.write('{{\"st'); log.flush(); "
                "time.sleep(1.2); log.write('ep\": 4}\\n'); time.sleep(1.2)",
            ]

    (tmp_path / "log_history.jsonl").write_text('{"step": 1}\n{"step": 3}\n')  # then half of step 4, then all
    bar, record = Bar(), {"segments": []}
    run_segment(Settings(), record, tmp_path, [], None, bar)
    assert bar.n == 4 and record["segments"][0]["returncode"] == 0
