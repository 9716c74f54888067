"""SIGTERM and Ctrl-C end any job quietly with the shell's status; a signal at any moment names the checkpoint
to resume; a kill -9 anywhere, then a resume, ends where an uninterrupted run does."""

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.fixture
def signal_job(monkeypatch):
    """Registers a job (``main`` given) as ``interrupted-job``; puts back the handlers ``cli.main`` leaves."""
    import types

    from briskbert import cli

    job = types.ModuleType("briskbert.commands.interrupted_job")
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # cli.main renames the program in argv[0]
    monkeypatch.setitem(sys.modules, job.__name__, job)
    monkeypatch.setitem(cli.COMMANDS, "interrupted-job", "is interrupted")
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    # a SIGTERM that cli.main does not take fails the test instead of ending the test process
    signal.signal(signal.SIGTERM, lambda *frame: pytest.fail("SIGTERM was not handled as Ctrl-C"))
    yield job
    for number, handler in handlers.items():
        signal.signal(number, handler)


def test_sigterm_stops_any_job_as_ctrl_c_does_with_status_143(signal_job, capsys):
    from briskbert import cli

    cleaned = []

    def main(argv):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)  # never reached: the signal stops the job here
        finally:
            cleaned.append(True)  # a job's clean-up runs, as on Ctrl-C

    signal_job.main = main
    assert cli.main(["interrupted-job"]) == 143 and cleaned == [True]
    assert capsys.readouterr().err == "briskbert interrupted-job: interrupted by SIGTERM.\n"


def test_an_interrupt_inside_an_exec_of_a_string_still_ends_with_status_130(signal_job, capsys):
    """A KeyboardInterrupt leaving an exec() of a string must not end ``python -m`` by SIGINT after 130."""
    import ctypes

    from briskbert import cli

    try:
        flag = ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
    except ValueError:
        pytest.skip("this interpreter does not export _Py_UnhandledKeyboardInterrupt")
    signal_job.main = lambda argv: exec("raise KeyboardInterrupt")
    assert cli.main(["interrupted-job"]) == 130  # 128 + SIGINT
    assert flag.value == 0
    assert "interrupted by SIGINT." in capsys.readouterr().err


# ------------------------------------------------------------- a real run, killed or signalled at any moment
TINY_MLM = """
import os, signal, sys, time, types
from pathlib import Path
from briskbert import cli
from briskbert.commands.arguments import parse
from briskbert.commands.training_run import train
from briskbert.training.engine import checkpointing, signals
from briskbert.training.engine.config import TrainingConfig
from test_training_loop import MLMTask, sequences

if os.environ["STOP_AT"]:  # a checkpointing function, what its call must mention, and kill or pause there
    where, match, how = os.environ["STOP_AT"].split(":")
    original = getattr(checkpointing, where)

    def stopped(*args, **kwargs):
        if match in repr(args) + repr(kwargs):
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            # Say where the run stands; wait until the test, which sends its signals meanwhile, lets it go on.
            print("PAUSED", flush=True)
            while not Path("go").exists():
                time.sleep(0.01)
            Path("go").unlink()
        return original(*args, **kwargs)

    setattr(checkpointing, where, stopped)
handle = signals.SignalCatcher._handle


def acknowledged(self, signum, frame):  # the loop has taken the signal in: the test may send the next
    handle(self, signum, frame)
    print(f"CAUGHT {signum}", flush=True)


signals.SignalCatcher._handle = acknowledged


def main(argv):  # a job as the command line runs one: parse, then train
    (config,) = parse(None, TrainingConfig, argv=argv)
    return train(MLMTask(train=sequences(24)), config)


job = types.ModuleType("briskbert.commands.tiny_mlm")
job.main = main
sys.modules[job.__name__] = job
cli.COMMANDS["tiny-mlm"] = "the loop's tiny test job"
sys.exit(cli.main(["tiny-mlm", *sys.argv[1:]]))
"""
RESUME = ("--resume_from_checkpoint", "latest")


class TinyMLM:
    """The tiny job through the command line in a real process, stopped where ``stop_at`` says."""

    def __init__(self, folder: Path, output_dir: str, *extra: str, stop_at: str = "", steps: int = 6):
        (folder / "run.py").write_text(TINY_MLM)
        self.folder, self.output_dir = folder, folder / output_dir
        argv = [sys.executable, "run.py", "--output_dir", output_dir, "--max_train_steps", str(steps)]
        argv += ["--logging_steps", "1", "--checkpointing_steps", "2", "--per_device_train_batch_size", "4"]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "OMP_NUM_THREADS": "1"}
        env.update(STOP_AT=stop_at, TQDM_DISABLE="1")
        self.stderr_file = folder / "stderr.txt"
        with open(self.stderr_file, "w") as stderr:
            self.process = subprocess.Popen(
                [*argv, *extra], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
            )

    def wait_for(self, prefix: str) -> str:
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line.strip()
        raise AssertionError(f"the run ended before '{prefix}': {self.stderr()[-3000:]}")

    def signal(self, number: int, acknowledged: bool = False) -> None:
        self.process.send_signal(number)
        if acknowledged:
            self.wait_for(f"CAUGHT {number}")

    def finish(self) -> int:
        self.process.stdout.read()
        return self.process.wait(timeout=300)

    def stderr(self) -> str:
        return self.stderr_file.read_text()

    def leftovers(self) -> list[str]:
        """What no stopped run may leave: half-written folders and the lock."""
        found = self.output_dir.glob(".*") if self.output_dir.is_dir() else []
        return sorted(path.name for path in found)

    def losses(self) -> list:
        lines = (self.output_dir / "log_history.jsonl").read_text().splitlines()
        entries = [json.loads(line) for line in lines]
        return [(e["step"], e["loss"]) for e in entries if "loss" in e]


@pytest.mark.slow  # four fresh processes (~30 s): the crash-consistency property of the issue
def test_kill_9_anywhere_then_resume_equals_the_uninterrupted_run_bit_for_bit(tmp_path):
    """SIGKILLs in a save and at random, each resumed, end on the uninterrupted weights and losses."""
    import torch
    from safetensors.torch import load_file

    seed = int(os.environ.get("BRISKBERT_KILL_SEED") or random.randrange(10**6))
    draw = random.Random(seed)
    reference = TinyMLM(tmp_path, "reference", steps=8)
    assert reference.finish() == 0, reference.stderr()[-3000:]

    part = draw.choice(["write_manifest", "replace_folder"])  # before the manifest, before the rename
    inside = TinyMLM(tmp_path, "out", stop_at=f"{part}:step_{draw.choice([4, 6])}:kill", steps=8)
    assert inside.finish() == -signal.SIGKILL, (seed, inside.stderr()[-3000:])
    assert list(inside.output_dir.glob(".step_*.partial")), seed  # it did die inside a save

    resumed = TinyMLM(tmp_path, "out", *RESUME, steps=8)
    time.sleep(draw.uniform(0.5, 6.0))  # start-up, training or a save: wherever the moment falls
    resumed.process.kill()
    resumed.process.wait(timeout=60)
    finished = TinyMLM(tmp_path, "out", *RESUME, steps=8)
    assert finished.finish() == 0 and "Traceback" not in finished.stderr(), (seed, finished.stderr()[-3000:])

    ours, expected = (load_file(run.output_dir / "final/model.safetensors") for run in (finished, reference))
    assert ours.keys() == expected.keys()
    assert all(torch.equal(ours[name], expected[name]) for name in expected), seed
    assert finished.losses() == reference.losses(), seed
    assert not list(finished.output_dir.glob(".*partial")), seed


@pytest.mark.slow  # two real processes: stopped inside a checkpoint write, then resumed as the message says
def test_a_second_ctrl_c_inside_a_checkpoint_write_names_the_one_before_and_its_resume_works(tmp_path):
    run = TinyMLM(tmp_path, "out", stop_at="write_manifest:.step_:pause")
    run.wait_for("PAUSED")  # writing step_2
    run.signal(signal.SIGINT, acknowledged=True)  # the first: the loop stops after its next step
    (run.folder / "go").touch()  # the paused run goes on
    run.wait_for("PAUSED")  # writing step_3, the checkpoint the first Ctrl-C asked for
    run.signal(signal.SIGINT)
    assert run.finish() == 130, run.stderr()[-3000:]
    message = run.stderr()
    assert "Interrupted by SIGINT; the checkpoint is out/step_2, the newest intact one." in message
    assert run.leftovers() == [] and not (run.output_dir / "step_3").exists()

    command = message.split("Resume with:\n")[1].splitlines()[0].strip()
    assert command.endswith("--resume_from_checkpoint latest"), command
    resumed = TinyMLM(tmp_path, "out", *shlex.split(command)[2:])  # the same flags, resumed
    assert resumed.finish() == 0, resumed.stderr()[-3000:]
    assert json.loads((run.output_dir / "all_results.json").read_text())["train_steps"] == 6


def test_a_signal_outside_the_loop_names_the_newest_intact_checkpoint(tmp_path, capsys):
    """SIGTERM while no step runs: status 143, naming the newest checkpoint that verifies, or none."""
    from briskbert.files import write_manifest
    from briskbert.training.engine.checkpointing import TrainingState
    from briskbert.training.engine.signals import TrainingInterrupted, stopping

    for step in (2, 4):
        (tmp_path / f"step_{step}").mkdir()
        TrainingState(global_step=step).save(tmp_path / f"step_{step}")
        write_manifest(tmp_path / f"step_{step}")
    (tmp_path / "step_4" / "trainer_state.json").write_text("{}")  # changed since its manifest
    with pytest.raises(TrainingInterrupted) as stopped, stopping(tmp_path):
        os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.value.code == 143 and stopped.value.checkpoint == tmp_path / "step_2"
    said = f"Interrupted by SIGTERM; the checkpoint is {tmp_path / 'step_2'}, the newest intact one"
    assert said in capsys.readouterr().err
    with pytest.raises(TrainingInterrupted) as stopped, stopping(tmp_path / "empty"):
        os.kill(os.getpid(), signal.SIGINT)
    assert stopped.value.code == 130 and stopped.value.checkpoint is None
    assert "before any checkpoint was saved: there is nothing to resume" in capsys.readouterr().err
