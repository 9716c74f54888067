"""Checkpoints, run identity and the output folder, with a real Accelerator and hand-written folders (the
loop-level behaviour is in ``test_run_safety.py`` and ``test_training_loop.py``)."""

import os
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from torch import nn

from briskbert.errors import SettingError
from briskbert.files import write_manifest
from briskbert.training.engine.checkpointing import (
    FINGERPRINT_SAMPLES,
    RunIdentity,
    TrainingState,
    check_output_dir,
    checkpoint_dirs,
    checkpoint_problem,
    clear_previous_run,
    dataset_fingerprint,
    load_checkpoint,
    remove_partial_folders,
    resolve_checkpoint,
    resume_command,
    save_checkpoint,
)


def make_checkpoint(folder: Path, step: int) -> Path:
    path = folder / f"step_{step}"
    path.mkdir(parents=True)
    TrainingState(global_step=step).save(path)
    write_manifest(path)
    return path


def identity(**changes) -> RunIdentity:
    fields = {"arguments": {"learning_rate": 0.001, "seed": 1}, "train_data": "aaa", "eval_data": "bbb"}
    return RunIdentity(**{**fields, "model": "bert-tiny", "processes": 1, **changes})


# -------------------------------------------------------------------------------------------- the state
def test_state_and_identity_round_trip(tmp_path):
    state = TrainingState(7, 2, 3, 11, 13, 5, 1.5, 0.25, 6)
    state.save(tmp_path)
    assert TrainingState.load(tmp_path) == state
    run = identity(arguments={"output_dir": Path("out"), "seed": 1})
    run.save(tmp_path)
    assert run.differences(RunIdentity.load(tmp_path)) == []  # a Path compares as the string stored


def test_differences_name_each_changed_argument_data_model_and_process_count():
    saved = identity(processes=2)
    assert identity(processes=2).differences(saved) == []
    arguments = {"learning_rate": 0.002, "seed": 1, "warmup": 3}
    now = identity(arguments=arguments, train_data="ccc", eval_data=None, model="modern-tiny", processes=1)
    assert now.differences(saved) == [
        "--learning_rate 0.001 in the checkpoint, 0.002 now",
        "--warmup None in the checkpoint, 3 now",
        "the training data differs (aaa in the checkpoint, ccc now)",
        "the evaluation data differs (bbb in the checkpoint, None now)",
        "the model differs (bert-tiny in the checkpoint, modern-tiny now)",
        "it was written by 2 process(es), this launch has 1 (the global batch and each process's random state "
        "would differ: launch it on 2 process(es))",
    ]


# ------------------------------------------------------------------------------------------ fingerprint
def test_fingerprint_samples_evenly_and_sees_size_order_and_content():
    data = [{"input_ids": [i, i + 1]} for i in range(1000)]
    print_ = dataset_fingerprint(data)
    assert len(print_) == 16 and print_ == dataset_fingerprint(list(data))
    assert dataset_fingerprint(data[:-1]) != print_  # size
    assert dataset_fingerprint(data[::-1]) != print_  # order
    edited = list(data)
    edited[1000 // FINGERPRINT_SAMPLES] = {"input_ids": [0, 0]}  # the second sampled example
    assert dataset_fingerprint(edited) != print_
    assert dataset_fingerprint([torch.tensor([1, 2])]) == dataset_fingerprint([[1, 2]])
    assert dataset_fingerprint(iter([1, 2])) is None and dataset_fingerprint({1, 2}) is None  # not indexable


# ------------------------------------------------------------------------------------ the output folder
def test_a_new_run_into_a_used_folder_is_refused_naming_what_is_there(tmp_path):
    (tmp_path / "best").mkdir()  # only a model, no checkpoint: it cannot be resumed, only replaced
    with pytest.raises(SettingError, match=r"\(best/\); pass --overwrite_output_dir to replace it"):
        check_output_dir(tmp_path, "latest", overwrite=False)  # latest with no checkpoint is a new run
    check_output_dir(tmp_path / "new", None, overwrite=False)
    for step in (1, 2, 3):
        make_checkpoint(tmp_path, step)
    (tmp_path / "final").mkdir()
    with pytest.raises(SettingError) as error:
        check_output_dir(tmp_path, None, overwrite=False)
    assert (error.value.field, error.value.problem) == (
        "output_dir",
        f"{tmp_path} already holds a run (step_2, step_3, final/, best/); pass --resume_from_checkpoint latest "
        "to continue it, --overwrite_output_dir to replace it, or choose another --output_dir.",
    )
    check_output_dir(tmp_path, None, overwrite=True)
    check_output_dir(tmp_path, "latest", overwrite=False)  # resuming it is what the folder is for


def test_clear_previous_run_deletes_run_outputs_and_keeps_other_files(tmp_path):
    make_checkpoint(tmp_path, 1)
    for name in ("final", "best"):
        (tmp_path / name).mkdir()
    for name in ("log_history.jsonl", "all_results.json", "training_curves.png", "notes.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "data").mkdir()
    clear_previous_run(tmp_path, [str(tmp_path / "data")], main_process=True)  # an input elsewhere
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "notes.txt"]


def test_stray_partial_folders_are_removed(tmp_path):
    for name in (".step_4.partial", ".final.partial", ".hidden", "step_1.partial"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "weights").write_text("x")
    remove_partial_folders(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "step_1.partial"]


def test_latest_is_the_newest_complete_checkpoint_by_step_and_a_named_one_must_be_a_checkpoint(
    tmp_path, monkeypatch
):
    assert resolve_checkpoint("latest", tmp_path) is None and checkpoint_dirs(tmp_path / "missing") == []
    for step in (2, 7, 12):
        make_checkpoint(tmp_path, step)
    (tmp_path / "step_100").mkdir()  # no state file: incomplete
    (tmp_path / "step_99x").mkdir()
    TrainingState().save(tmp_path / "step_99x")
    (tmp_path / "step_3").write_text("")  # a file
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step_2", "step_7", "step_12"]
    assert resolve_checkpoint("latest", tmp_path) == tmp_path / "step_12"
    assert resolve_checkpoint(str(tmp_path / "step_2"), tmp_path) == tmp_path / "step_2"
    (tmp_path / "step_12" / "manifest.json").unlink()  # not saved whole (or from before manifests): skipped
    assert resolve_checkpoint("latest", tmp_path) == tmp_path / "step_7"
    monkeypatch.chdir(tmp_path)
    assert resolve_checkpoint("step_2", tmp_path) == Path("step_2")  # a relative path, not "latest"
    with pytest.raises(SettingError) as error:
        resolve_checkpoint(str(tmp_path), tmp_path)
    assert str(error.value) == (
        f"resume_from_checkpoint {str(tmp_path)!r} is not a checkpoint folder (no trainer_state.json); "
        f"pass a folder such as {tmp_path / 'step_500'} or 'latest'."
    )


# ------------------------------------------------------------------------------------ save and load
def tiny_training(seed=0):
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    return accelerator, model, optimizer, scheduler


def step(model, optimizer, scheduler):
    model(torch.ones(4, 3)).pow(2).sum().backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def test_save_then_load_restores_weights_optimizer_schedule_and_state(tmp_path):
    accelerator, model, optimizer, scheduler = tiny_training()
    step(model, optimizer, scheduler)
    state = TrainingState(global_step=1, epoch=0, batches_in_epoch=1, items_seen=4)
    folder = save_checkpoint(accelerator, tmp_path, state, identity(), total_limit=None)
    assert folder == tmp_path / "step_1" and (folder / "random_states_0.pkl").is_file()
    assert RunIdentity.load(folder) == identity() and TrainingState.load(folder) == state
    assert not list(tmp_path.glob(".*"))  # written as a partial folder, then renamed
    assert checkpoint_problem(folder) is None  # the manifest covers every file accelerate wrote
    step(model, optimizer, scheduler)
    expected = [p.detach().clone() for p in model.parameters()]

    accelerator, model, optimizer, scheduler = tiny_training(seed=1)  # another start, then the checkpoint
    assert load_checkpoint(accelerator, folder) == state
    assert scheduler.get_last_lr() == [0.05]
    step(model, optimizer, scheduler)
    for ours, theirs in zip(model.parameters(), expected):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_total_limit_keeps_the_newest_checkpoints_even_when_an_old_one_cannot_be_deleted(
    tmp_path, monkeypatch
):
    accelerator, *_ = tiny_training()
    for epoch, global_step in enumerate((1, 2, 3, 3)):
        state = TrainingState(global_step=global_step, epoch=epoch)
        save_checkpoint(accelerator, tmp_path, state, identity(), total_limit=2)
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step_2", "step_3"]
    assert TrainingState.load(tmp_path / "step_3").epoch == 3  # the second save replaced the first
    save_checkpoint(accelerator, tmp_path, TrainingState(global_step=4), identity(), total_limit=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_2", "step_3", "step_4"]  # no partial left
    (tmp_path / "step_2" / "busy.lock").write_text("held open elsewhere")
    unlink = os.unlink

    def refuse_busy(path, *args, **kwargs):  # what a network drive answers for a file in use
        if str(path).endswith("busy.lock"):
            raise PermissionError(13, "file in use", str(path))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refuse_busy)
    folder = save_checkpoint(accelerator, tmp_path, TrainingState(global_step=5), identity(), total_limit=1)
    assert checkpoint_dirs(tmp_path) == [folder]  # the rest of step_2 went, and the run goes on


# ---------------------------------------------------------------------------------- the resume command
def test_resume_command_replaces_an_old_checkpoint_given_with_an_equals_sign():
    argv = ["python", "scripts/pretrain.py", "--resume_from_checkpoint=out/step_2", "--seed", "1"]
    assert resume_command(argv, Path("out/step_8")) == (
        "python scripts/pretrain.py --seed 1 --resume_from_checkpoint out/step_8"
    )
    argv = ["/usr/bin/python3", "-m", "briskbert", "pretrain", "--seed", "1"]
    assert (
        resume_command(argv, "latest")
        == "python -m briskbert pretrain --seed 1 --resume_from_checkpoint latest"
    )
    argv = ["python3", "/venv/bin/briskbert", "pretrain", "--resume_from_checkpoint", "out/step_2", "-v"]
    assert resume_command(argv, "latest") == "briskbert pretrain -v --resume_from_checkpoint latest"
    argv = ["python3", "-m", "briskbert", "finetune-ner", "--output_dir", "my runs/a"]
    assert resume_command(argv, Path("my runs/a/step_2")) == (
        "python -m briskbert finetune-ner --output_dir 'my runs/a' --resume_from_checkpoint 'my runs/a/step_2'"
    )
