"""Stopping a run cleanly: the first Ctrl-C or SIGTERM lets the current optimizer step finish, the loop
saves a checkpoint, prints the command that resumes and exits 130 (SIGINT) or 143 (SIGTERM) by raising
:class:`TrainingInterrupted`; a second Ctrl-C aborts at once."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import torch

from briskbert.processes import RESUME_COMMAND_VARIABLE
from briskbert.training.engine.checkpointing import resume_command


class TrainingInterrupted(SystemExit):
    """Raised by the loop after a SIGINT/SIGTERM once the checkpoint is saved: exits the process with
    128 + the signal number (130, 143), as a shell reports a process the signal ended."""

    def __init__(self, signal_number: int, checkpoint: Path, command: str):
        super().__init__(128 + signal_number)
        self.signal_number, self.checkpoint, self.command = signal_number, checkpoint, command


class SignalCatcher:
    """While entered: the first SIGINT or SIGTERM is remembered (the loop stops after the current
    optimizer step); a second Ctrl-C raises ``KeyboardInterrupt`` at once."""

    def __init__(self):
        self.signal_number = 0
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signal_number and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_number = signum

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not in the main thread: no handlers, no stopping
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def received(self, accelerator) -> int:
        """The signal any process received (0: none); all processes then stop at the same step."""
        if accelerator.num_processes == 1:
            return self.signal_number
        flag = torch.tensor(float(self.signal_number), device=accelerator.device)
        return int(accelerator.reduce(flag, "max").item())


def interrupted(accelerator, signal_number: int, checkpoint: Path, step: int) -> TrainingInterrupted:
    """Print where the run stopped and how to resume it; the exception that ends the process."""
    # --resume_from_checkpoint latest, as the README says (this checkpoint is the newest); a parent such as
    # the quickstart names its own command instead.
    command = os.environ.get(RESUME_COMMAND_VARIABLE) or resume_command(sys.orig_argv, "latest")
    if accelerator.is_main_process:
        launcher = (
            " (launched the same way, e.g. with accelerate launch)" if accelerator.num_processes > 1 else ""
        )
        print(
            f"\nInterrupted by {signal.Signals(signal_number).name} at step {step}; the checkpoint is "
            f"{checkpoint}. Resume with{launcher}:\n  {command}",
            file=sys.stderr,
        )
    return TrainingInterrupted(signal_number, checkpoint, command)
