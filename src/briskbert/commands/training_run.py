"""What every training command does once its flags are parsed: train the job's task, then render the model card
into ``final/`` from its training facts (named ``your-namespace/<run folder>`` until the model is published)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from briskbert.files import folder_lock, write_manifest
from briskbert.training.engine.checkpointing import remove_partial_folders
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.engine.signals import stopping
from briskbert.training.engine.task import Task


def train(task: Task, config: TrainingConfig):
    """``run(task, config)`` under the output folder's lock, then the model card in ``final/``; returns the result."""
    main_process = os.environ.get("RANK", "0") == "0"  # before the loop starts the processes' state
    with stopping(config.output_dir, main_process):
        from briskbert.training.engine.loop import run

        with locked(config.output_dir) if main_process else contextlib.nullcontext():
            try:
                result = run(task, config)
                task.finish(result.final_dir)
                if main_process:
                    _write_card(result.final_dir, f"your-namespace/{result.output_dir.resolve().name}")
                    write_manifest(result.final_dir)  # last: the card is part of what the manifest proves
            except BaseException:
                if main_process:  # whatever stopped the run: no half-written folder stays behind
                    remove_partial_folders(Path(config.output_dir))
                raise
    if main_process and task.verdict:  # the last evaluation showed nothing learned: say so, last
        print(f"{task.verdict}: it has not learned yet; train longer or raise --learning_rate.")
    return result


@contextlib.contextmanager
def locked(folder):
    """Hold ``folder``'s lock (:func:`briskbert.files.folder_lock`), saying so when a dead run's is taken over."""
    with folder_lock(folder) as leftover:
        if leftover:
            print(
                f"Took over the lock of {folder}, left by {leftover}, which is no longer running.",
                file=sys.stderr,
            )
        yield


def _write_card(final_dir: Path, repo_id: str) -> None:
    from briskbert.hub_cards.card import write_card

    try:
        write_card(final_dir, repo_id=repo_id)
    except Exception as error:  # a card must never cost the run; publishing renders it again
        print(f"Could not write the model card into {final_dir.name}: {error}", file=sys.stderr)
    else:
        print(f"Wrote the model card {final_dir / 'README.md'}.")
