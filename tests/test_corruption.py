"""Nothing corrupt goes unnoticed: every checkpoint file flipped, truncated or replaced by garbage makes
``--resume_from_checkpoint latest`` fall back to the newest intact checkpoint (one line naming the file) or
stop in one line, never resume silently nor end in a traceback; a full disk during a save is one line and
leaves no partial folder. test_run_safety's tiny run is built once and copied for each case."""

import errno
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import test_run_safety
import torch
from safetensors.torch import load_file
from test_training_loop import tiny_model

from briskbert import cli
from briskbert.errors import SettingError, UserError
from briskbert.training import TrainingDiverged
from briskbert.training.engine import checkpointing
from briskbert.training.engine.checkpointing import resolve_checkpoint

# custom_checkpoint_0.pkl holds the learning-rate scheduler
CHECKPOINT_FILES = ("model.safetensors", "optimizer.bin", "custom_checkpoint_0.pkl", "random_states_0.pkl")
CHECKPOINT_FILES += ("trainer_state.json", "run_identity.json")
STEPS = ("--max_train_steps", "4", "--checkpointing_steps", "2")
# A 4-step run with checkpoints at steps 2 and 4 (STEPS), and a copy of it for each test.
finished_run, used_run, train = test_run_safety.finished_run, test_run_safety.used_run, test_run_safety.train


def flip(path: Path) -> None:
    """XOR 16 bytes in the middle of the file (the bit rot the issue reproduced)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))


FAULTS = {
    "flip": flip,
    "truncate": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "garbage": lambda path: path.write_bytes(os.urandom(path.stat().st_size)),
}


@pytest.mark.parametrize(
    "name, fault", [(name, list(FAULTS)[i % 3]) for i, name in enumerate(CHECKPOINT_FILES)]
)
def test_a_corrupt_checkpoint_file_is_skipped_for_the_newest_intact_one(used_run, name, fault, caplog):
    path = used_run / "step_4" / name
    FAULTS[fault](path)
    with caplog.at_level(logging.WARNING):
        assert resolve_checkpoint("latest", used_run) == used_run / "step_2"
    (skipped,) = [r.message for r in caplog.records if "Skipping" in r.message]
    assert skipped.startswith("Skipping the checkpoint step_4: ") and str(path) in skipped
    assert "\n" not in skipped
    with pytest.raises(SettingError) as refused:  # named explicitly: refused, naming the file
        resolve_checkpoint(str(used_run / "step_4"), used_run)
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)


def test_a_resume_past_a_bit_flipped_checkpoint_equals_the_uninterrupted_run(finished_run, used_run):
    """The issue's reproduction: a bit-flipped newest checkpoint is passed over; the weights end the same."""
    flip(used_run / "step_4" / "model.safetensors")
    shutil.rmtree(used_run / "final")
    result = train(used_run, *STEPS, "--resume_from_checkpoint", "latest")
    assert result.global_step == 4
    ours = load_file(used_run / "final" / "model.safetensors")
    expected = load_file(finished_run / "final" / "model.safetensors")
    assert ours.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(ours[name], tensor), name
    assert resolve_checkpoint("latest", used_run) == used_run / "step_4"  # saved anew, intact


def test_no_intact_checkpoint_is_one_line(used_run):
    for step in ("step_2", "step_4"):
        FAULTS["garbage"](used_run / step / "trainer_state.json")
    with pytest.raises(UserError) as refused:
        train(used_run, *STEPS, "--resume_from_checkpoint", "latest")
    message = str(refused.value)
    assert f"no checkpoint in {used_run} is intact (2 checked" in message and "\n" not in message


def test_a_nan_loss_names_the_last_intact_checkpoint_not_a_corrupt_newer_one(tmp_path):
    model, training_calls = tiny_model(), []

    def nan_loss_at_step_6(module, args, kwargs, outputs):
        training_calls.append(module.training)
        if module.training and sum(training_calls) == 6:
            outputs.loss = outputs.loss * float("nan")

    def corrupt_step_4(entry):  # after step_4 was saved, before the NaN of step 6
        if entry["step"] == 5:
            flip(tmp_path / "step_4" / "optimizer.bin")

    model.register_forward_hook(nan_loss_at_step_6, with_kwargs=True)
    with pytest.raises(TrainingDiverged) as stopped:
        train(tmp_path, "--max_train_steps", "8", *STEPS[2:], model=model, callbacks=[corrupt_step_4])
    message = str(stopped.value)
    assert "loss became nan at step 6" in message and "\n" not in message
    assert f"the last good checkpoint is {tmp_path / 'step_2'}" in message
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_2", "step_4"]  # nothing of step 6 saved


def test_a_state_that_loads_wrong_is_one_line(used_run, monkeypatch):
    """What the checks before the load cannot see (e.g. weights of another shape) still ends in one line."""
    from accelerate import Accelerator

    def shape_mismatch(self, *args, **kwargs):
        raise RuntimeError("Error(s) in loading state_dict:\n\tsize mismatch for weight")

    monkeypatch.setattr(Accelerator, "load_state", shape_mismatch)
    with pytest.raises(
        UserError, match=r"step_4 does not load: Error\(s\) in loading state_dict: size mismatch"
    ):
        train(used_run, *STEPS, "--resume_from_checkpoint", "latest")


# ------------------------------------------------------------------------------------------ disk full
def fill_then_fail(error: BaseException):
    """An ``accelerator.save_state`` that writes part of the checkpoint, then fails as a full disk does."""

    def save_state(self, output_dir, **kwargs):
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "model.safetensors").write_bytes(b"\0" * 1000)
        raise error

    return save_state


@pytest.mark.parametrize(
    "error, free, full",
    [
        (OSError(errno.ENOSPC, "No space left on device"), 10**12, True),
        (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 320 vs 228"), 0, True),
        (RuntimeError("unexpected pos"), 10**12, False),  # plenty of space: the error as it was
    ],
    ids=["ENOSPC", "torch-unexpected-pos", "unrelated"],
)
def test_a_checkpoint_save_on_a_full_disk_is_one_line_and_leaves_nothing(
    tmp_path, monkeypatch, error, free, full
):
    from accelerate import Accelerator

    monkeypatch.setattr(Accelerator, "save_state", fill_then_fail(error))
    monkeypatch.setattr("briskbert.files.free_space", lambda path: free)
    with pytest.raises(UserError if full else RuntimeError) as raised:
        train(tmp_path, *STEPS)
    assert not list(tmp_path.glob(".*partial")) and not list(tmp_path.glob("step_*"))
    if full:
        message = str(raised.value)
        assert message.startswith(f"no space left on the device for {tmp_path / 'step_2'}: it needs about 0.")
        assert "MiB" in message and "\n" not in message


def test_a_final_save_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def safetensors_full(folder, facts):  # the weights are written, then the disk fills
        raise Exception("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(checkpointing, "write_training_facts", safetensors_full)
    with pytest.raises(UserError, match=rf"for {tmp_path / 'final'}: it needs about"):
        train(tmp_path, "--max_train_steps", "2")
    assert not (tmp_path / "final").exists() and not list(tmp_path.glob(".*partial"))


@pytest.fixture
def small_disk(tmp_path):
    """A 400 KiB file system (a tmpfs): the logs fit, a checkpoint (about 0.5 MiB) does not."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "--lazy", str(disk)], check=True)  # the failed run may hold its log open


def test_a_real_full_disk_during_a_checkpoint_is_one_line_and_leaves_nothing(small_disk):
    with pytest.raises(UserError) as full:
        train(small_disk / "run", *STEPS)
    message = str(full.value)
    assert message.startswith(f"no space left on the device for {small_disk / 'run' / 'step_2'}: it needs")
    assert "\n" not in message
    assert not list((small_disk / "run").glob(".*partial")) and not list((small_disk / "run").glob("step_*"))
    curves = small_disk / "run" / "training_curves.png"
    assert not curves.exists() or curves.stat().st_size > 0  # never an empty plot


def test_the_command_line_answers_any_full_disk_in_one_line(monkeypatch, capsys):
    import types

    job = types.ModuleType("briskbert.commands.full_disk_job")

    def main(argv):
        raise OSError(errno.ENOSPC, "No space left on device", "runs/x/log_history.jsonl")

    job.main = main
    monkeypatch.setattr("sys.argv", ["briskbert"])
    monkeypatch.setitem(sys.modules, job.__name__, job)
    monkeypatch.setitem(cli.COMMANDS, "full-disk-job", "fills the disk")
    assert cli.main(["full-disk-job"]) == 2
    said = "no space left on the device writing runs/x/log_history.jsonl; free some space, then run again"
    assert capsys.readouterr().err == f"error: {said}\n"
    job.main = lambda argv: (_ for _ in ()).throw(OSError(errno.EACCES, "Permission denied"))
    with pytest.raises(PermissionError):  # other errors are not disguised as a full disk
        cli.main(["full-disk-job"])
