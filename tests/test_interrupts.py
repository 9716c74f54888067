"""Ctrl-C while a command is still starting (importing torch, reading its inputs) ends it quietly; a kill -9
anywhere, then a resume, ends where an uninterrupted run does."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXCERPT = ROOT / "data" / "wikitext2_excerpt.txt"


def start_pretraining(output_dir, max_train_steps: int) -> subprocess.Popen:
    """A real ``briskbert pretrain`` process on the bundled excerpt, its output piped."""
    argv = [sys.executable, "-m", "briskbert", "pretrain", "--train_file", str(EXCERPT)]
    argv += ["--config_name", "bert-tiny", "--vocab_size", "300", "--max_train_steps", str(max_train_steps)]
    argv += ["--output_dir", str(output_dir)]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        # As in a terminal's foreground: a suite started in the background (`cmd &`) passes SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.slow  # a real process, interrupted one second into its start-up
def test_ctrl_c_during_start_up_is_one_line_and_status_130(tmp_path):
    process = start_pretraining(tmp_path / "run", max_train_steps=2)
    time.sleep(1.0)  # torch is still being imported
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "interrupted" in stderr.lower()


@pytest.mark.slow  # a real process, interrupted once it has announced its training
def test_ctrl_c_between_start_up_and_the_first_step_stops_the_run_with_status_130(tmp_path):
    """The window between the command's start-up and the loop's own signal handler: the run must stop
    (never go on training), in one line, with status 130, and write no final model."""
    process = start_pretraining(tmp_path / "run", max_train_steps=400)
    announced = next((line for line in process.stdout if line.startswith("Training:")), None)
    assert announced is not None, "the run never announced its training"
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "step 400" not in stdout and not (tmp_path / "run" / "final").exists()


def test_an_interrupt_inside_an_exec_of_a_string_still_ends_with_status_130(monkeypatch, capsys):
    """CPython 3.11 keeps a flag when a KeyboardInterrupt leaves an exec() of a string (dataclasses run such
    execs while torch imports) and, under ``python -m``, ends the process by SIGINT after it returned 130.
    The flag is only readable where the interpreter exports it."""
    import ctypes
    import types

    from briskbert import cli

    try:
        flag = ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
    except ValueError:
        pytest.skip("this interpreter does not export _Py_UnhandledKeyboardInterrupt")
    job = types.ModuleType("briskbert.commands.interrupted_job")
    job.main = lambda argv: exec("raise KeyboardInterrupt")
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # cli.main renames the program in argv[0]
    monkeypatch.setitem(sys.modules, job.__name__, job)
    monkeypatch.setitem(cli.COMMANDS, "interrupted-job", cli.Command("interrupted_job", "raises Ctrl-C"))
    assert cli.main(["interrupted-job"]) == cli.INTERRUPTED_EXIT_CODE
    assert flag.value == 0
    assert "interrupted before training started" in capsys.readouterr().err


# ------------------------------------------------------------------------------ kill -9, then resume
KILLABLE_RUN = """
import os, signal
from briskbert.commands.arguments import parse
from briskbert.training.engine import checkpointing
from briskbert.training.engine.config import TrainingConfig
from briskbert.training import run
from test_training_loop import mlm_task, sequences

(config,) = parse(None, TrainingConfig)
where, _, step = os.environ.get("KILL_INSIDE_SAVE", "::").partition(":")
if where:  # SIGKILL this process inside the save of step_<step>, just before the named part of it
    original = getattr(checkpointing, where)

    def die_first(path, *args, **kwargs):
        if f"step_{step}" in str(path):
            os.kill(os.getpid(), signal.SIGKILL)
        return original(path, *args, **kwargs)

    setattr(checkpointing, where, die_first)
run(mlm_task(train=sequences(24)), config)
"""


def killable_run(folder: Path, output_dir: str, *extra: str, kill_inside_save: str = "") -> subprocess.Popen:
    argv = [sys.executable, "run.py", "--output_dir", output_dir, "--max_train_steps", "12"]
    argv += [
        "--checkpointing_steps",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--logging_steps",
        "1",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "OMP_NUM_THREADS": "1"}
    env["KILL_INSIDE_SAVE"] = kill_inside_save
    return subprocess.Popen(
        argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def losses(output_dir: Path) -> list:
    entries = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    return [(e["step"], e["loss"]) for e in entries if "loss" in e]


@pytest.mark.slow  # four fresh processes (~30 s): the crash-consistency property of the issue
def test_kill_9_anywhere_then_resume_equals_the_uninterrupted_run_bit_for_bit(tmp_path):
    """A SIGKILL inside a checkpoint save (at a random part of it) and another at a random moment: every
    ``--resume_from_checkpoint latest`` starts from a complete checkpoint and the run ends exactly where an
    uninterrupted one does (weights and every logged loss). The seed is in the failure message
    (``BRISKBERT_KILL_SEED`` replays it)."""
    import torch
    from safetensors.torch import load_file

    seed = int(os.environ.get("BRISKBERT_KILL_SEED") or random.randrange(10**6))  # to replay a failure
    draw = random.Random(seed)
    (tmp_path / "run.py").write_text(KILLABLE_RUN)
    reference = killable_run(tmp_path, "reference")
    assert reference.wait(timeout=300) == 0, reference.stderr.read()[-3000:]

    part = draw.choice(["write_manifest", "replace_folder"])  # before the manifest, before the rename
    inside = killable_run(tmp_path, "out", kill_inside_save=f"{part}:{draw.choice([4, 6, 8])}")
    assert inside.wait(timeout=300) == -signal.SIGKILL, (seed, inside.stderr.read()[-3000:])
    assert list((tmp_path / "out").glob(".step_*.partial")), seed  # it did die inside a save

    resumed = killable_run(tmp_path, "out", "--resume_from_checkpoint", "latest")
    time.sleep(draw.uniform(0.5, 8.0))  # start-up, training or a save: wherever the moment falls
    resumed.kill()
    resumed.wait(timeout=60)
    finished = killable_run(tmp_path, "out", "--resume_from_checkpoint", "latest")
    _, stderr = finished.communicate(timeout=300)
    assert finished.returncode == 0 and "Traceback" not in stderr, (seed, stderr[-3000:])

    ours, expected = (
        load_file(tmp_path / run / "final" / "model.safetensors") for run in ("out", "reference")
    )
    assert ours.keys() == expected.keys()
    assert all(torch.equal(ours[name], expected[name]) for name in expected), seed
    assert losses(tmp_path / "out") == losses(tmp_path / "reference"), seed
    assert not list((tmp_path / "out").glob(".*partial")), seed
