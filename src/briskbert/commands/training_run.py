"""What every training command does once its flags are parsed: train the job's task, then write the model card.

The loop (:func:`briskbert.training.engine.loop.run`) only trains: it saves ``final/`` with the model, the
tokenizer and ``training_facts.json``. The card (``final/README.md``) is the job's, rendered here from those
facts as a publish would render it, named ``your-namespace/<run folder>`` until the model is published.
"""

from __future__ import annotations

import sys

from briskbert.training.engine.config import TrainingConfig
from briskbert.training.engine.task import Task


def train(task: Task, config: TrainingConfig):
    """``run(task, config)``, then the model card in ``final/``; returns the run's ``TrainResult``."""
    from accelerate import PartialState

    from briskbert.hub_cards.card import write_card
    from briskbert.training.engine.loop import run

    result = run(task, config)
    if PartialState().is_main_process:
        try:
            write_card(result.final_dir, repo_id=f"your-namespace/{result.output_dir.resolve().name}")
        except Exception as error:  # a card must never cost the run; publishing renders it again
            print(f"Could not write the model card into {result.final_dir.name}: {error}", file=sys.stderr)
        else:
            print(f"Wrote the model card {result.final_dir / 'README.md'}.")
    return result
