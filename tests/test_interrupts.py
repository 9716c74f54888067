"""Ctrl-C while a command is still starting (importing torch, reading its inputs) ends it quietly."""

import os
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
