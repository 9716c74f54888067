"""A training run is never silently wrong: one run per output folder, a resume continues only that run, a kill
never leaves a half-written checkpoint, and what the user watches shows the validation metrics."""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from accelerate.tracking import GeneralTracker
from safetensors.torch import load_file, save_file
from test_training_loop import MLMTask, config, sequences, tiny_model
from transformers import SchedulerType

from briskbert.errors import SettingError, UserError
from briskbert.files import LOCK_FILE, MANIFEST_FILE, folder_lock, manifest_problem, write_manifest
from briskbert.training import TrainingDiverged, run
from briskbert.training.engine.checkpointing import check_finite_weights
from briskbert.training.engine.config import SCHEDULER_NAMES
from briskbert.training.engine.logging_utils import LOG_FILE

TESTS = Path(__file__).resolve().parent
EXCERPT = TESTS.parent / "data" / "wikitext2_excerpt.txt"
FAST = ("--per_device_train_batch_size", "4", "--learning_rate", "1e-3", "--logging_steps", "1")
RESUME = ("--resume_from_checkpoint", "latest")


def train(output_dir, *extra, model=None, train_data=None, evaluate_fn=None, accelerator=None, callbacks=()):
    task = MLMTask(model, train_data or sequences(12), sequences(4, seed=1), evaluate_fn)
    training = config("--output_dir", str(output_dir), *FAST, *extra)
    return run(task, training, accelerator=accelerator, callbacks=callbacks)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A 4-step run with checkpoints at steps 2 and 4 and its final folder; tests work on copies."""
    folder = tmp_path_factory.mktemp("finished") / "run"
    train(folder, "--max_train_steps", "4", "--checkpointing_steps", "2")
    return folder


@pytest.fixture
def used_run(finished_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def test_an_overwritten_output_dir_holds_only_the_new_run(used_run):
    result = train(used_run, "--max_train_steps", "2", "--overwrite_output_dir")
    assert result.global_step == 2
    assert [e["step"] for e in result.history if "eval_loss" in e] == [2]  # a short run evaluates at the end
    assert not list(used_run.glob("step_*"))  # the earlier run's checkpoints are gone, not mixed in
    logged = [json.loads(line)["step"] for line in (used_run / LOG_FILE).read_text().splitlines()]
    assert max(logged) == 2


def test_resume_refuses_a_checkpoint_of_another_run_and_says_what_differs(used_run):
    assert json.loads((used_run / "step_4" / "run_identity.json").read_text())["processes"] == 1
    resume = ("--max_train_steps", "4", *RESUME)
    with pytest.raises(
        UserError, match=r"belongs to another run: --learning_rate 0.001 in the checkpoint, 0.002"
    ):
        train(used_run, *resume, "--learning_rate", "2e-3")
    with pytest.raises(UserError, match="the training data differs"):
        train(used_run, *resume, train_data=sequences(12, seed=7))
    extended = train(used_run, "--max_train_steps", "5", *RESUME)
    assert extended.global_step == 5  # a longer run continues the same one


def test_a_kill_during_a_checkpoint_save_leaves_no_half_written_step(tmp_path):
    class Killed(Exception):
        pass

    accelerator = Accelerator()
    save_state = accelerator.save_state

    def save_then_die(path, **kwargs):  # the process dies after the weights, before the state file
        save_state(path, **kwargs)
        if "step_4" in str(path):
            raise Killed

    accelerator.save_state = save_then_die
    with pytest.raises(Killed):
        train(tmp_path, "--max_train_steps", "4", "--checkpointing_steps", "2", accelerator=accelerator)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_2"]  # no step_4 with stray files
    result = train(tmp_path, "--max_train_steps", "4", "--checkpointing_steps", "2", *RESUME)
    assert result.global_step == 4
    assert not list(tmp_path.glob(".*partial"))  # the killed save's leftovers are cleaned
    files = [sorted(p.name for p in (tmp_path / step).iterdir()) for step in ("step_2", "step_4")]
    assert files[0] == files[1]


def test_a_resume_tolerates_a_partial_log_line_and_says_so(used_run, caplog):
    log = used_run / LOG_FILE
    log.write_text(log.read_text() + '{"step": 5, "lo')  # killed while writing a line
    with caplog.at_level(logging.WARNING):
        result = train(used_run, "--max_train_steps", "4", "--checkpointing_steps", "2", *RESUME)
    warnings = [r.message for r in caplog.records]
    assert [e["step"] for e in result.history if "loss" in e] == [1, 2, 3, 4]
    assert all(json.loads(line) for line in log.read_text().splitlines())  # rewritten whole
    assert any("line" in w and "dropped" in w for w in warnings), warnings


class ListTracker(GeneralTracker):
    """An accelerate tracker that keeps what it is sent."""

    name, requires_logging_directory, main_process_only = "list", False, True

    def __init__(self):
        super().__init__()
        self.logged = []

    @property
    def tracker(self):
        return self.logged

    def store_init_configuration(self, values):
        self.configuration = values

    def log(self, values, step=None, **kwargs):
        self.logged.append((step, values))


def accuracy_only(model, dataloader, accelerator):
    """A task evaluation that reports a metric but no loss (as classification's does)."""
    for batch in dataloader:
        model(**batch)
    return {"accuracy": 0.5}


def test_validation_curves_console_and_trackers_without_eval_steps(tmp_path, capsys):
    tracker = ListTracker()
    accelerator = Accelerator(log_with=[tracker])
    result = train(tmp_path, "--max_train_steps", "20", evaluate_fn=accuracy_only, accelerator=accelerator)
    evaluations = [e for e in result.history if "eval_accuracy" in e]
    assert [e["step"] for e in evaluations] == list(range(2, 21, 2))  # ten evaluations by default
    assert all("eval_loss" in e for e in evaluations)  # the model's own loss, though the task gave none
    printed = capsys.readouterr().out
    assert "step 2 | eval_accuracy 0.5 | eval_loss" in printed and "step 20 |" in printed
    assert tracker.configuration["learning_rate"] == 1e-3
    tracked_steps = {step for step, values in tracker.logged if "eval_loss" in values}
    assert tracked_steps == set(range(2, 21, 2)) and any("loss" in values for _, values in tracker.logged)

    assert (tmp_path / "training_curves.png").stat().st_size > 1000


def test_scheduler_names_are_transformers_own():
    assert set(SCHEDULER_NAMES) == {s.value for s in SchedulerType} - {"reduce_lr_on_plateau", "greedy"}


def test_the_command_line_refuses_a_used_output_dir_in_one_error_line(used_run, capsys):
    from briskbert import cli
    from briskbert.data import DATA_DIR

    argv = ["pretrain", "--train_file", str(DATA_DIR / "wikitext2_excerpt.txt"), "--config_name", "bert-tiny"]
    assert cli.main([*argv, "--output_dir", str(used_run)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: --output_dir {used_run} already holds a run (step_2, step_4, final/)")
    assert "--overwrite_output_dir" in error and "\n" not in error
    assert not (used_run / "tokenizer").exists()  # refused before any data preparation


# ------------------------------------------------------------------------------------ finite or nothing
def test_nan_weights_are_never_saved(tmp_path):
    model = tiny_model()

    def break_a_weight_at_step_2(entry):  # after the step, before its checkpoint
        if entry["step"] == 2:
            with torch.no_grad():
                model.model.layers[0].mlp.up.weight[0, 0] = float("inf")

    checkpointed = ("--max_train_steps", "4", "--checkpointing_steps", "2")
    with pytest.raises(
        TrainingDiverged, match=r"step_2 was not saved; no intact checkpoint was saved before"
    ):
        train(tmp_path, *checkpointed, model=model, callbacks=[break_a_weight_at_step_2])
    assert not list(tmp_path.glob("step_*")) and not list(tmp_path.glob(".step_*"))
    assert not (tmp_path / "final").exists()


def test_resuming_from_a_checkpoint_with_nan_weights_is_refused_naming_the_file(used_run):
    weights_path = used_run / "step_4" / "model.safetensors"
    weights = load_file(weights_path)
    name = next(iter(weights))
    weights[name][0] = float("nan")
    save_file(weights, weights_path, metadata={"format": "pt"})
    write_manifest(weights_path.parent)  # intact as written: the NaN was saved, not corrupted after
    with pytest.raises(UserError, match=rf"resume_from_checkpoint {weights_path}: the weight \S*{name}"):
        train(used_run, "--max_train_steps", "5", *RESUME)


def test_a_model_with_nan_weights_is_refused_naming_its_setting_or_what_it_is():
    model = tiny_model()
    with torch.no_grad():
        next(model.parameters())[0] = float("nan")
    with pytest.raises(SettingError, match=r"^model_name_or_path m\.safetensors: the weight \S+ holds NaN"):
        check_finite_weights(model, "m.safetensors", "model_name_or_path")
    with pytest.raises(UserError, match=r"^the model to train: the weight \S+ holds NaN"):
        check_finite_weights(model, "the model to train")


# ------------------------------------------------------------------------------------ one writer per folder
@pytest.mark.parametrize(
    "argv",
    [
        ["pretrain", "--train_file", str(EXCERPT), "--config_name", "bert-tiny", "--max_train_steps", "2"],
        ["quickstart", "--size", "fast"],
        ["ablate", "--configs", "bert:bert-tiny", "--max_train_steps", "1", "--train_file", str(EXCERPT)],
    ],
    ids=["pretrain", "quickstart", "ablate"],
)
def test_a_run_into_a_busy_output_dir_is_refused_in_one_line_naming_the_holder(argv, tmp_path, capsys):
    from briskbert import cli

    out = tmp_path / "out"
    with folder_lock(out):  # a run in progress
        assert cli.main([*argv, "--output_dir", str(out)]) == 2
        assert [p.name for p in out.iterdir()] == [LOCK_FILE]  # it wrote nothing
    assert capsys.readouterr().err == (
        f"error: {out} is in use by another run (process {os.getpid()} on {socket.gethostname()}); "
        "wait for it to finish or choose another folder\n"
    )
    assert not out.exists()  # the lock made the folder, and took it with it


def test_a_lock_left_by_a_killed_run_is_taken_over_in_one_line(tmp_path, capsys):
    from briskbert.commands.training_run import train as train_command

    out = tmp_path / "run"
    hold_and_die = "import os, sys\nfrom briskbert.files import folder_lock\nwith folder_lock(sys.argv[1]): os.kill(os.getpid(), 9)"
    assert subprocess.run([sys.executable, "-c", hold_and_die, str(out)]).returncode == -9
    leftover = (out / LOCK_FILE).read_text()
    assert leftover.startswith("process ")
    args = config("--output_dir", str(out), *FAST, "--max_train_steps", "2")
    result = train_command(MLMTask(train=sequences(12)), args)
    took_over = f"Took over the lock of {out}, left by {leftover}, which is no longer running.\n"
    assert took_over in capsys.readouterr().err
    assert not (out / LOCK_FILE).exists()  # released at the end
    listed = json.loads((result.final_dir / MANIFEST_FILE).read_text())["files"]
    assert set(listed) == {p.name for p in result.final_dir.iterdir()} - {MANIFEST_FILE}  # the card too
    assert "README.md" in listed and manifest_problem(result.final_dir) is None


# ------------------------------------------------------------------------------ an output folder no job can use
# Every job that writes a folder, with its other required flags (their values are never read: the output
# folder is refused first).
OUTPUT_JOBS = {
    "quickstart": [],
    "train-tokenizer": ["--vocab_size", "100"],
    "pretrain": [],
    "ablate": ["--configs", "bert:bert-tiny"],
    "convert": ["--src", "model"],
    "finetune-classification": [],
    "finetune-ner": [],
    "finetune-qa": [],
    "finetune-embeddings": ["--train_file", "pairs.tsv"],
    "finetune-reranker": ["--train_file", "pairs.tsv"],
    "evaluate-similarity": ["--model_name_or_path", "model", "--file", "pairs.tsv"],
    "build-index": ["--model_name_or_path", "model"],
    "evaluate-retrieval": ["--model_name_or_path", "model"],
    "open-domain-qa": ["--retriever_model_name_or_path", "model", "--reader_model_name_or_path", "model"],
    "distill": ["--teacher_model", "model"],
    "export-onnx": ["--model_dir", "model"],
    "export-family": ["--model_dir", "model"],
    "quantize": ["--model_dir", "model"],
}
UNUSABLE = {  # an output folder -> what the one line says
    "file": ("notes.txt", "notes.txt is a file, not a folder; pass a folder"),
    "under a file": ("notes.txt/run", "notes.txt/run is inside notes.txt, which is a file, not a folder"),
    "dangling symlink": ("gone", "gone is a symbolic link to the missing nowhere; create nowhere or pass"),
}


def test_every_job_that_writes_a_folder_is_checked():
    from briskbert import cli

    assert set(OUTPUT_JOBS) == set(cli.COMMANDS) - {"local-hub", "publish"}  # those two write no folder


# The check is one function run as any job's flags are parsed: every job with one kind, every kind with one job.
@pytest.mark.parametrize(
    ("job", "case"),
    [(job, "file") for job in OUTPUT_JOBS] + [("pretrain", case) for case in list(UNUSABLE)[1:]],
)
def test_an_unusable_output_folder_is_one_line_naming_the_flag_exit_2(
    job, case, tmp_path, monkeypatch, capsys
):
    from briskbert import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # cli.main names the program in argv[0]
    Path("notes.txt").write_text("not a folder\n")
    os.symlink("nowhere", "gone")
    folder, said = UNUSABLE[case]
    flag = "--out" if job == "convert" else "--output_dir"
    assert cli.main([job, *OUTPUT_JOBS[job], flag, folder]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {flag} {said}") and error.count("\n") == 1, error
    assert sorted(os.listdir()) == ["gone", "notes.txt"] and Path("notes.txt").is_file()  # nothing written


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any folder")
def test_an_unwritable_output_folder_is_one_line(tmp_path, capsys):
    locked_out = tmp_path / "read-only"
    locked_out.mkdir(mode=0o555)
    with pytest.raises(UserError, match="read-only/run is inside .*read-only, which is not writable"):
        with folder_lock(locked_out / "run"):
            pass


# ------------------------------------------------------------------------------ a resume is the same run or none
def test_a_resume_into_fewer_steps_than_the_checkpoint_took_is_refused_naming_the_setting(used_run):
    final = (used_run / "final" / "model.safetensors").read_bytes()
    taken = r"^max_train_steps 3 makes 3 steps, fewer than the 4 its checkpoint .*step_4 has taken"
    with pytest.raises(SettingError, match=taken) as refused:
        train(used_run, "--max_train_steps", "3", *RESUME)
    assert refused.value.field == "max_train_steps"
    assert (used_run / "final" / "model.safetensors").read_bytes() == final  # nothing saved over it
    assert train(used_run, "--max_train_steps", "4", *RESUME).global_step == 4
