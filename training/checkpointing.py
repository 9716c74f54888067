"""Checkpoints that resume exactly: save, find the latest, rotate (keep the last K), load.

A checkpoint is a folder ``output_dir/step_{N}`` written by ``accelerator.save_state`` (model, optimizer,
learning-rate scheduler, gradient scaler, the RNG states of ``random``/numpy/torch/CUDA of every process)
plus ``trainer_state.json``::

    {"global_step": N, "epoch": e, "batches_in_epoch": b, "tokens_seen": ..., "items_seen": ...,
     "wall_time_s": ..., "best_metric": ..., "best_step": ...}

``epoch``/``batches_in_epoch`` are the data position: on resume the loop re-creates the epoch's shuffle
(seeded by ``seed + epoch``) and skips the ``b`` batches this process already consumed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


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


def resolve_checkpoint(resume_from_checkpoint: str, output_dir: str | Path) -> Path | None:
    """``"latest"`` -> newest checkpoint in ``output_dir`` (``None`` when there is none yet), else the path."""
    if resume_from_checkpoint == "latest":
        found = checkpoint_dirs(output_dir)
        return found[-1] if found else None
    path = Path(resume_from_checkpoint)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(
            f"--resume_from_checkpoint {resume_from_checkpoint!r} is not a checkpoint folder (no {STATE_FILE}); "
            f"pass a folder such as {Path(output_dir) / 'step_500'} or 'latest'."
        )
    return path


def save_checkpoint(accelerator, output_dir: str | Path, state: dict, total_limit: int | None) -> Path:
    """Write ``output_dir/step_{global_step}`` on every process (each saves its own RNG state)."""
    path = Path(output_dir) / f"step_{state['global_step']}"
    accelerator.save_state(str(path))
    if accelerator.is_main_process:
        (path / STATE_FILE).write_text(json.dumps(state, indent=2))
        if total_limit is not None and total_limit > 0:
            for old in checkpoint_dirs(output_dir)[:-total_limit]:
                shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return path


def load_checkpoint(accelerator, path: str | Path) -> dict:
    """Restore model/optimizer/scheduler/RNG states from ``path``; return its ``trainer_state.json``."""
    accelerator.load_state(str(path))
    return json.loads((Path(path) / STATE_FILE).read_text())
