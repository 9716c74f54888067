"""Checkpoints (``output_dir/step_{N}``) and model folders, written whole and never with NaN or infinite weights;
a resume verifies the manifest and continues only the run the checkpoint belongs to (docs/security.md)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import shlex
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from briskbert.errors import SettingError, UserError
from briskbert.files import (
    MANIFEST_FILE,
    PARTIAL_SUFFIX,
    manifest_problem,
    partial_path,
    replace_folder,
    space_for,
    staged_folder,
    write_manifest,
)
from briskbert.inputs import WEIGHT_FILES
from briskbert.processes import to_argv
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.engine.facts import TrainingFacts, write_training_facts

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
IDENTITY_FILE = "run_identity.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
# What a finished or started run leaves in its output folder (a new run must not mix with these).
RUN_OUTPUTS = ("final", "best", "log_history.jsonl", "all_results.json", "training_curves.png")
FINGERPRINT_SAMPLES = 64


def _flag(name: str) -> str:
    """The flag of setting ``name``, for advice inside a message."""
    return to_argv(**{name: True})[0]


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
        return cls(**json.loads((folder / STATE_FILE).read_text()))


@dataclass
class RunIdentity:
    """What makes two launches the same run: arguments, data, model and number of processes."""

    arguments: dict
    train_data: str | None  # fingerprint (see :func:`dataset_fingerprint`); None for streamed data
    eval_data: str | None
    model: str
    processes: int

    @classmethod
    def of_run(
        cls, config: TrainingConfig, model, train_dataset, eval_dataset, processes: int
    ) -> RunIdentity:
        parameters = sum(p.numel() for p in model.parameters())
        return cls(
            arguments=config.run_defining_arguments(),
            train_data=dataset_fingerprint(train_dataset),
            eval_data=dataset_fingerprint(eval_dataset),
            model=f"{type(model).__name__} with {parameters:,} parameters",
            processes=processes,
        )

    def save(self, folder: Path) -> None:
        (folder / IDENTITY_FILE).write_text(json.dumps(asdict(self), indent=2, default=str))

    @classmethod
    def load(cls, folder: Path) -> RunIdentity:
        return cls(**json.loads((folder / IDENTITY_FILE).read_text()))

    def differences(self, saved: RunIdentity) -> list[str]:
        """What differs from ``saved`` (the checkpoint's), one readable phrase each."""
        now = json.loads(json.dumps(asdict(self), default=str))  # compare as the checkpoint stored it
        found = [
            f"{_flag(name)} {saved.arguments.get(name)} in the checkpoint, {now['arguments'].get(name)} now"
            for name in sorted(set(now["arguments"]) | set(saved.arguments))
            if saved.arguments.get(name) != now["arguments"].get(name)
        ]
        for key, what in (
            ("train_data", "training data"),
            ("eval_data", "evaluation data"),
            ("model", "model"),
        ):
            if getattr(saved, key) != now[key]:
                found.append(f"the {what} differs ({getattr(saved, key)} in the checkpoint, {now[key]} now)")
        if saved.processes != self.processes:
            found.append(
                f"it was written by {saved.processes} process(es), this launch has {self.processes} (the global "
                f"batch and each process's random state would differ: launch it on {saved.processes} process(es))"
            )
        return found


def dataset_fingerprint(dataset) -> str | None:
    """A short hash of a sized dataset's length and up to 64 evenly spaced examples (None: streamed data)."""
    if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        return None
    size = len(dataset)
    indices = sorted({i * size // FINGERPRINT_SAMPLES for i in range(FINGERPRINT_SAMPLES)} & set(range(size)))
    sample = [dataset[i] for i in indices]
    text = json.dumps(
        [size, sample], sort_keys=True, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints in ``output_dir``, oldest first (by global step)."""
    found = [
        p for p in Path(output_dir).glob("step_*") if _STEP_DIR.match(p.name) and (p / STATE_FILE).is_file()
    ]
    return sorted(found, key=lambda path: int(path.name.removeprefix("step_")))


def check_output_dir(output_dir: str | Path, resume_from_checkpoint: str | None, overwrite: bool) -> None:
    """Refuse a new run (nothing to resume) into a folder holding an earlier run, unless ``overwrite``."""
    output_dir = Path(output_dir)
    checkpoints = [p.name for p in checkpoint_dirs(output_dir)]
    if resume_from_checkpoint not in (None, "latest"):
        checkpoint_folder(resume_from_checkpoint, output_dir)  # early; checkpoint_to_resume verifies it
    if overwrite or (resume_from_checkpoint and (resume_from_checkpoint != "latest" or checkpoints)):
        return
    earlier = checkpoints[-2:] + [f"{name}/" for name in ("final", "best") if (output_dir / name).is_dir()]
    if earlier:
        resume = (
            shlex.join(to_argv(resume_from_checkpoint="latest")) + " to continue it, " if checkpoints else ""
        )
        raise SettingError(
            "output_dir",
            f"{output_dir} already holds a run ({', '.join(earlier)}); pass {resume}"
            f"{_flag('overwrite_output_dir')} to replace it, or choose another {_flag('output_dir')}.",
        )


def clear_previous_run(output_dir: Path, inputs: Iterable[str], main_process: bool) -> None:
    """Delete (on the main process) an earlier run's checkpoints and outputs, refused if one holds an ``input``."""
    outputs = (output_dir / name for name in RUN_OUTPUTS)
    doomed = [*checkpoint_dirs(output_dir), *(path for path in outputs if path.exists())]
    for name in inputs:
        path = Path(name).expanduser().resolve()  # a Hub repo id names nothing there
        for folder in doomed:
            if path == folder.resolve() or folder.resolve() in path.parents:
                raise SettingError(
                    "overwrite_output_dir",
                    f"would delete {folder.resolve()}, which holds this run's input {name}; choose another "
                    f"{_flag('output_dir')} (or copy the input elsewhere first).",
                )
    for path in doomed if main_process else []:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def remove_partial_folders(output_dir: Path) -> None:
    """Delete what a stopped save left half-written (``.step_N.partial``, ``.final.partial``, ...)."""
    for path in output_dir.glob(f".*{PARTIAL_SUFFIX}"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def resolve_checkpoint(resume_from_checkpoint: str, output_dir: str | Path) -> Path | None:
    """``"latest"``: the newest intact checkpoint (None when there is none yet); else the path, if intact."""
    if resume_from_checkpoint == "latest":
        found = checkpoint_dirs(output_dir)
        checkpoint = intact_checkpoint(output_dir)
        if found and checkpoint is None:
            raise SettingError(
                "resume_from_checkpoint",
                f"latest: no checkpoint in {output_dir} is intact ({len(found)} checked, see the lines above); "
                f"pass {_flag('overwrite_output_dir')} to start the run anew.",
            )
        return checkpoint
    path = checkpoint_folder(resume_from_checkpoint, output_dir)
    problem = checkpoint_problem(path)
    if problem:
        raise SettingError(
            "resume_from_checkpoint",
            f"{resume_from_checkpoint}: {problem}; pass an intact checkpoint or 'latest'.",
        )
    return path


def checkpoint_folder(resume_from_checkpoint: str, output_dir: str | Path) -> Path:
    """The folder ``resume_from_checkpoint`` names, refused unless it holds a state file."""
    path = Path(resume_from_checkpoint)
    if not (path / STATE_FILE).is_file():
        raise SettingError(
            "resume_from_checkpoint",
            f"{resume_from_checkpoint!r} is not a checkpoint folder (no {STATE_FILE}); "
            f"pass a folder such as {Path(output_dir) / 'step_500'} or 'latest'.",
        )
    return path


def intact_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest checkpoint that passes :func:`checkpoint_problem`, with a warning for each one skipped."""
    for checkpoint in reversed(checkpoint_dirs(output_dir)):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return checkpoint
        logger.warning(f"Skipping the checkpoint {checkpoint.name}: {problem}.")
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be resumed (its manifest is missing or does not match), in one line naming the file."""
    if not (folder / MANIFEST_FILE).is_file():
        return f"{folder / MANIFEST_FILE} is missing (the checkpoint was not saved whole)"
    return manifest_problem(folder)


def save_checkpoint(
    accelerator, output_dir: Path, state: TrainingState, identity: RunIdentity, total_limit: int | None
) -> Path:
    """Write ``output_dir/step_{global_step}`` from every process (each saves its own RNG state)."""
    folder = output_dir / f"step_{state.global_step}"
    partial = partial_path(folder)
    # a checkpoint is about the weights and AdamW's two moments
    weights = (p.numel() * p.element_size() for model in accelerator._models for p in model.parameters())
    with space_for(folder, 3 * sum(weights)):
        hook = accelerator.register_save_state_pre_hook(drop_tied_copies)
        accelerator.save_state(str(partial))
        hook.remove()
        if accelerator.is_main_process:
            identity.save(partial)
            state.save(partial)  # last: a folder with a state file is complete
        accelerator.wait_for_everyone()  # every process has written its part before the folder moves
        if accelerator.is_main_process:
            write_manifest(partial)
            replace_folder(partial, folder)
    if accelerator.is_main_process and total_limit is not None and total_limit > 0:
        for old in checkpoint_dirs(output_dir)[:-total_limit]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return folder


def drop_tied_copies(models, weights: list[dict], output_dir) -> None:
    """accelerate's ``save_state`` hook: one name per shared storage, as ``save_pretrained`` keeps (no warning)."""
    for state in weights:
        seen = set()
        for key, tensor in list(state.items()):
            if tensor.numel() and tensor.data_ptr() in seen:
                del state[key]
            seen.add(tensor.data_ptr())


def check_steps_left(config: TrainingConfig, checkpoint: Path | None, max_train_steps: int) -> None:
    """Refuse to resume ``checkpoint`` into a run of fewer steps than it has already taken."""
    step = TrainingState.load(checkpoint).global_step if checkpoint is not None else 0
    if max_train_steps < step:
        field = "max_train_steps" if config.max_train_steps is not None else "num_train_epochs"
        raise SettingError(
            field,
            f"{getattr(config, field)} makes {max_train_steps} steps, fewer than the {step} its checkpoint "
            f"{checkpoint} has taken; resume with at least {step} steps, or start a new run from its model.",
        )


def checkpoint_to_resume(config: TrainingConfig, identity: RunIdentity) -> Path | None:
    """The checkpoint ``resume_from_checkpoint`` names, refused unless it belongs to this run; None: start anew."""
    if not config.resume_from_checkpoint:
        return None
    checkpoint = resolve_checkpoint(config.resume_from_checkpoint, config.output_dir)
    differences = identity.differences(RunIdentity.load(checkpoint)) if checkpoint is not None else []
    if differences:
        raise SettingError(
            "resume_from_checkpoint",
            f"{checkpoint} belongs to another run: {'; '.join(differences)}. Resume with the checkpoint's "
            f"arguments and data, or start a new run (another {_flag('output_dir')}, or "
            f"{_flag('overwrite_output_dir')}).",
        )
    return checkpoint


def load_checkpoint(accelerator, checkpoint: Path) -> TrainingState:
    """Restore model/optimizer/scheduler/RNG states from ``checkpoint``; return its :class:`TrainingState`."""
    try:
        accelerator.load_state(str(checkpoint))
    except Exception as error:  # what the checks before missed (e.g. weights of another shape)
        reason = " ".join(str(error).split())[:300] or type(error).__name__
        raise SettingError("resume_from_checkpoint", f"{checkpoint} does not load: {reason}") from error
    return TrainingState.load(checkpoint)


def resume_command(argv: list[str], checkpoint: Path | str) -> str:
    """This process's command line (``sys.orig_argv``) resuming from ``checkpoint`` (a folder, or ``latest``)."""
    program, *rest = argv
    if rest and not rest[0].startswith("-") and not rest[0].endswith(".py"):  # a console script: briskbert
        program, *rest = rest
        program = Path(program).name
    else:
        program = "python"
    resume = to_argv(resume_from_checkpoint=checkpoint)
    kept, skip_value = [], False
    for arg in rest:
        if skip_value:
            skip_value = False
        elif arg == resume[0]:
            skip_value = True
        elif not arg.startswith(f"{resume[0]}="):
            kept.append(arg)
    return shlex.join([program, *kept, *resume])


def save_model_folder(
    accelerator, model, tokenizer, folder: Path, facts: TrainingFacts | None = None
) -> None:
    """``save_pretrained`` model, tokenizer and facts, whole or not at all; never with non-finite weights."""
    accelerator.wait_for_everyone()
    refuse_non_finite_weights(accelerator, model, f"{folder.name}/", folder.parent)
    # The model itself, not torch.compile's wrapper (whose class cannot be swapped, nor saved as remote code).
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)
    # Sharded engines need their weights gathered; otherwise save_pretrained handles tied weights itself.
    sharded = accelerator.distributed_type.value in ("FSDP", "DEEPSPEED")
    state_dict = accelerator.get_state_dict(model) if sharded else None
    weight_bytes = sum(p.numel() * p.element_size() for p in unwrapped.parameters())
    if accelerator.is_main_process:
        with space_for(folder, weight_bytes), staged_folder(folder) as partial:
            with own_class(unwrapped):
                unwrapped.save_pretrained(partial, state_dict=state_dict)
            if tokenizer is not None:
                tokenizer.save_pretrained(partial)
            if facts is not None:
                write_training_facts(partial, facts)
            write_manifest(partial)  # synced files, then the manifest, then the rename
    accelerator.wait_for_everyone()


@contextlib.contextmanager
def own_class(model):
    """An FSDP2-sharded model wears its own class during a save, whose remote-code files save_pretrained copies."""
    sharded_class = type(model)
    model.__class__ = next(cls for cls in sharded_class.__mro__ if not cls.__module__.startswith("torch."))
    try:
        yield model
    finally:
        model.__class__ = sharded_class


class TrainingDiverged(UserError):
    """The loss, the gradient or the weights became NaN or infinite."""


def non_finite_parameter(model) -> str | None:
    """The first parameter holding a NaN or an infinity; None when all are finite."""
    import torch

    for name, parameter in model.named_parameters():
        local = parameter.to_local() if hasattr(parameter, "to_local") else parameter  # an FSDP2 shard
        if not bool(torch.isfinite(local.detach()).all()):
            return name
    return None


def weights_file(folder: str | Path) -> str:
    """The weight file of a model folder, for messages (the folder itself when none is found)."""
    found = [Path(folder, name) for name in WEIGHT_FILES if Path(folder, name).is_file()]
    return str(found[0] if found else folder)


def check_finite_weights(model, source: str, setting: str | None = None) -> None:
    """Refuse to train from ``model`` (loaded from ``source``, given as ``setting``) when a weight is not finite."""
    name = non_finite_parameter(model)
    if name is not None:
        problem = (
            f"{source}: the weight {name} holds NaN or infinite values (the run that wrote it diverged); "
            "train from an earlier checkpoint or another model."
        )
        raise SettingError(setting, problem) if setting else UserError(problem)


def refuse_non_finite_weights(accelerator, model, what: str, output_dir: Path) -> None:
    """Never save NaN/inf weights as ``what`` (a checkpoint, best/ or final/); all processes agree."""
    import torch

    local = torch.tensor(float(non_finite_parameter(model) is not None), device=accelerator.device)
    if accelerator.reduce(local, "max").item():
        raise TrainingDiverged(
            f"the weights became NaN or infinite, so {what} was not saved; {last_good_checkpoint(output_dir)}. "
            "Lower learning_rate and keep max_grad_norm above 0."
        )


def last_good_checkpoint(output_dir: Path) -> str:
    """Where to resume a diverged run from: the newest checkpoint that verifies."""
    checkpoint = intact_checkpoint(output_dir)
    if checkpoint is not None:
        return f"the last good checkpoint is {checkpoint}"
    return "no intact checkpoint was saved before (checkpointing_steps saves them)"
