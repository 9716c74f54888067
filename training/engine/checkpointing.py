"""Checkpoints that resume exactly, and only the run they belong to.

A checkpoint is a folder ``output_dir/step_{N}`` holding what ``accelerator.save_state`` writes (model,
optimizer, learning-rate scheduler, gradient scaler, the RNG states of every process), the loop's
:class:`TrainingState` (``trainer_state.json``) and the :class:`RunIdentity` of the run that wrote it
(``run_identity.json``). It is written into a hidden ``.step_{N}.partial`` folder and renamed into place
when complete, so a ``step_N`` folder is always whole; a kill during the save leaves only the partial
folder, which the next launch deletes.

The output folder holds one run: a new run into a folder with an earlier run's checkpoints or final
model is refused unless ``--overwrite_output_dir`` (then they are deleted), and a resume is refused when
the checkpoint's run had other arguments, data or model, naming what differs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shlex
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from briskbert.files import PARTIAL_SUFFIX, partial_path, replace_folder
from briskbert.training.engine.config import TrainingConfig, TrainingSetupError

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
IDENTITY_FILE = "run_identity.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
# What a finished or started run leaves in its output folder (a new run must not mix with these).
RUN_OUTPUTS = ("final", "best", "log_history.jsonl", "all_results.json", "training_curves.png")
FINGERPRINT_SAMPLES = 64


@dataclass
class TrainingState:
    """Where a run stands: everything besides the accelerator's states that a resume must restore."""

    global_step: int = 0
    epoch: int = 0
    batches_in_epoch: int = 0  # this process's batches consumed in the current epoch (the data position)
    items_seen: int = 0  # what the loss is a mean over (masked tokens, labelled tokens, examples)
    tokens_seen: int = 0
    examples_seen: int = 0
    wall_time_s: float = 0.0  # time spent in training steps (not evaluating, saving, or interrupted)
    best_metric: float | None = None
    best_step: int | None = None

    def save(self, folder: Path) -> None:
        (folder / STATE_FILE).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, folder: Path) -> TrainingState:
        saved = json.loads((folder / STATE_FILE).read_text())
        return cls(**{f.name: saved[f.name] for f in fields(cls) if f.name in saved})


@dataclass
class RunIdentity:
    """What makes two launches the same run: the run-defining arguments, the data and the model."""

    arguments: dict
    train_data: str | None  # fingerprint (see :func:`dataset_fingerprint`); None for streamed data
    eval_data: str | None
    model: str

    @classmethod
    def of_run(cls, config: TrainingConfig, model, train_dataset, eval_dataset) -> RunIdentity:
        parameters = sum(p.numel() for p in model.parameters())
        return cls(
            arguments=config.run_defining_arguments(),
            train_data=dataset_fingerprint(train_dataset),
            eval_data=dataset_fingerprint(eval_dataset),
            model=f"{type(model).__name__} with {parameters:,} parameters",
        )

    def save(self, folder: Path) -> None:
        (folder / IDENTITY_FILE).write_text(json.dumps(asdict(self), indent=2, default=str))

    @classmethod
    def load(cls, folder: Path) -> RunIdentity | None:
        path = folder / IDENTITY_FILE
        return cls(**json.loads(path.read_text())) if path.is_file() else None

    def differences(self, saved: RunIdentity) -> list[str]:
        """What differs from ``saved`` (the checkpoint's), one readable phrase each."""
        now = json.loads(json.dumps(asdict(self), default=str))  # compare as the checkpoint stored it
        found = []
        for name in sorted(set(now["arguments"]) | set(saved.arguments)):
            old, new = saved.arguments.get(name), now["arguments"].get(name)
            if old != new:
                found.append(f"--{name} {old} in the checkpoint, {new} now")
        for label, old, new in (
            ("training data", saved.train_data, now["train_data"]),
            ("evaluation data", saved.eval_data, now["eval_data"]),
        ):
            if old != new:
                found.append(f"the {label} differs (fingerprint {old} in the checkpoint, {new} now)")
        if saved.model != now["model"]:
            found.append(f"the model differs ({saved.model} in the checkpoint, {now['model']} now)")
        return found


def dataset_fingerprint(dataset) -> str | None:
    """A short hash of a sized dataset: its length and up to 64 evenly spaced examples.

    Cheap on any size; a change of size, order, tokenization or most edits shows, though an edit to an
    unsampled example may not. Streamed (unsized) data has no fingerprint.
    """
    if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        return None
    size = len(dataset)
    indices = sorted({i * size // FINGERPRINT_SAMPLES for i in range(FINGERPRINT_SAMPLES)} & set(range(size)))
    sample = [dataset[i] for i in indices]
    text = json.dumps([size, sample], sort_keys=True, default=_as_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _as_plain(value):
    return value.tolist() if hasattr(value, "tolist") else str(value)


# -------------------------------------------------------------------------------------- the output folder
def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints in ``output_dir``, oldest first (by global step)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = []
    for path in output_dir.iterdir():
        match = _STEP_DIR.match(path.name)
        if match and (path / STATE_FILE).is_file():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def check_output_dir(output_dir: str | Path, resume_from_checkpoint: str | None, overwrite: bool) -> None:
    """Refuse a new run into a folder holding an earlier run's checkpoints or final model.

    A new run is one without a checkpoint to resume (``--resume_from_checkpoint latest`` with none yet
    counts as new). ``overwrite`` (``--overwrite_output_dir``) lets it start; :func:`clear_previous_run`
    then deletes the earlier outputs.
    """
    output_dir = Path(output_dir)
    if overwrite or (resume_from_checkpoint and resolve_checkpoint(resume_from_checkpoint, output_dir)):
        return
    checkpoints = [p.name for p in checkpoint_dirs(output_dir)]
    earlier = checkpoints[-2:] + [f"{name}/" for name in ("final", "best") if (output_dir / name).is_dir()]
    if earlier:
        resume = "--resume_from_checkpoint latest to continue it, " if checkpoints else ""
        raise TrainingSetupError(
            f"--output_dir {output_dir} already holds a run ({', '.join(earlier)}); pass {resume}"
            "--overwrite_output_dir to replace it, or choose another --output_dir."
        )


def check_overwrite_spares_inputs(output_dir: Path, inputs: Iterable[str]) -> None:
    """Refuse ``--overwrite_output_dir`` when what it deletes holds one of the run's inputs (a model folder
    such as ``runs/x/final`` continued into ``--output_dir runs/x``)."""
    doomed = [
        path.resolve() for path in [*checkpoint_dirs(output_dir), *(output_dir / n for n in RUN_OUTPUTS)]
    ]
    for name in inputs:
        path = Path(name).expanduser()
        if not path.exists():
            continue  # a Hub repo id
        for folder in doomed:
            if path.resolve() == folder or folder in path.resolve().parents:
                raise TrainingSetupError(
                    f"--output_dir {output_dir}: --overwrite_output_dir would delete {folder}, which holds "
                    f"this run's input {name}; choose another --output_dir (or copy the input elsewhere first)."
                )


def clear_previous_run(output_dir: Path) -> None:
    """Delete an earlier run's checkpoints and outputs (``--overwrite_output_dir``); other files stay."""
    for path in checkpoint_dirs(output_dir):
        shutil.rmtree(path)
    for name in RUN_OUTPUTS:
        path = output_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def remove_partial_folders(output_dir: Path) -> list[Path]:
    """Delete folders a killed save left half-written (``.step_N.partial``, ``.final.partial``, ...)."""
    strays = sorted(output_dir.glob(f".*{PARTIAL_SUFFIX}")) if output_dir.is_dir() else []
    for path in strays:
        shutil.rmtree(path, ignore_errors=True)
    return strays


# ---------------------------------------------------------------------------------- save, find, load
def resolve_checkpoint(resume_from_checkpoint: str, output_dir: str | Path) -> Path | None:
    """``"latest"`` -> newest checkpoint in ``output_dir`` (``None`` when there is none yet), else the path."""
    if resume_from_checkpoint == "latest":
        found = checkpoint_dirs(output_dir)
        return found[-1] if found else None
    path = Path(resume_from_checkpoint)
    if not (path / STATE_FILE).is_file():
        raise TrainingSetupError(
            f"--resume_from_checkpoint {resume_from_checkpoint!r} is not a checkpoint folder (no {STATE_FILE}); "
            f"pass a folder such as {Path(output_dir) / 'step_500'} or 'latest'."
        )
    return path


def save_checkpoint(
    accelerator, output_dir: Path, state: TrainingState, identity: RunIdentity, total_limit: int | None
) -> Path:
    """Write ``output_dir/step_{global_step}`` from every process (each saves its own RNG state)."""
    folder = output_dir / f"step_{state.global_step}"
    partial = partial_path(folder)
    accelerator.save_state(str(partial))
    if accelerator.is_main_process:
        identity.save(partial)
        state.save(partial)  # last: a folder with a state file is complete
    accelerator.wait_for_everyone()  # every process has written its part before the folder moves
    if accelerator.is_main_process:
        replace_folder(partial, folder)
        if total_limit is not None and total_limit > 0:
            for old in checkpoint_dirs(output_dir)[:-total_limit]:
                shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return folder


def check_same_run(checkpoint: Path, identity: RunIdentity) -> None:
    """Refuse to resume ``checkpoint`` with other arguments, data or model than its run had."""
    saved = RunIdentity.load(checkpoint)
    if saved is None:
        logger.warning(f"{checkpoint} does not record its run's arguments and data: they are not checked.")
        return
    differences = identity.differences(saved)
    if differences:
        raise TrainingSetupError(
            f"--resume_from_checkpoint {checkpoint} belongs to another run: {'; '.join(differences)}. "
            "Resume with the checkpoint's arguments and data, or start a new run (another --output_dir, "
            "or --overwrite_output_dir)."
        )


def checkpoint_to_resume(config: TrainingConfig, identity: RunIdentity) -> Path | None:
    """The checkpoint ``--resume_from_checkpoint`` names, checked to belong to this run; None: start anew."""
    if not config.resume_from_checkpoint:
        return None
    checkpoint = resolve_checkpoint(config.resume_from_checkpoint, config.output_dir)
    if checkpoint is not None:
        check_same_run(checkpoint, identity)
    return checkpoint


def load_checkpoint(accelerator, checkpoint: Path) -> TrainingState:
    """Restore model/optimizer/scheduler/RNG states from ``checkpoint``; return its :class:`TrainingState`."""
    rng_file = checkpoint / f"random_states_{accelerator.process_index}.pkl"
    if not rng_file.is_file():
        logger.warning(
            f"{rng_file} is missing: the run resumes, but dropout and data draws will not repeat those of "
            "an uninterrupted run (the resume is not exact)."
        )
    accelerator.load_state(str(checkpoint))
    return TrainingState.load(checkpoint)


def resume_command(argv: list[str], checkpoint: Path) -> str:
    """The command line that started this process (``sys.orig_argv``) with ``--resume_from_checkpoint``
    pointing at ``checkpoint``: what to run to continue an interrupted run."""
    program, *rest = argv
    if rest and not rest[0].startswith("-") and not rest[0].endswith(".py"):  # a console script: briskbert
        program, *rest = rest
        program = Path(program).name
    else:
        program = "python"
    kept, skip_value = [], False
    for arg in rest:
        if skip_value:
            skip_value = False
        elif arg == "--resume_from_checkpoint":
            skip_value = True
        elif not arg.startswith("--resume_from_checkpoint="):
            kept.append(arg)
    return shlex.join([program, *kept, "--resume_from_checkpoint", str(checkpoint)])
