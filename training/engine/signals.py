"""Stopping a run on SIGINT/SIGTERM (exit 130/143): inside the loop the first signal lets the step finish and
checkpoint; elsewhere, or on a second Ctrl-C, :func:`stopping` names the newest intact checkpoint to resume."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from briskbert.processes import RESUME_COMMAND_VARIABLE, Interrupt, raise_interrupt, signal_handler
from briskbert.training.engine.checkpointing import intact_checkpoint, resume_command


class TrainingInterrupted(SystemExit):
    """Ends the process with 128 + the signal number, as a shell reports it; ``checkpoint``: the one to resume."""

    def __init__(self, signal_number: int, checkpoint: Path | None, command: str | None):
        super().__init__(128 + signal_number)
        self.signal_number, self.checkpoint, self.command = signal_number, checkpoint, command


@contextlib.contextmanager
def stopping(output_dir: str | os.PathLike, main_process: bool = True):
    """A signal stops the whole run wherever it stands, with the newest intact checkpoint of ``output_dir``."""
    with signal_handler(raise_interrupt):
        try:
            yield
        except KeyboardInterrupt as error:
            signal_number = getattr(error, "signal_number", signal.SIGINT)
            # the report takes a moment (it checks the checkpoint's files): no signal may cut it short
            with signal_handler(signal.SIG_IGN):
                checkpoint = intact_checkpoint(output_dir) if main_process else None
                processes = int(os.environ.get("WORLD_SIZE", "1"))
                raise report(signal_number, checkpoint, None, processes, main_process) from None


class SignalCatcher:
    """While entered, the first signal is remembered (the loop stops after this step); a second Ctrl-C (not
    SIGTERM: no user at the keyboard) raises :class:`Interrupt` at once."""

    def __init__(self):
        self.signal_number = 0
        self._handlers = signal_handler(self._handle)

    def _handle(self, signum, frame):
        if self.signal_number and signum == signal.SIGINT:
            raise Interrupt(signum)
        self.signal_number = self.signal_number or signum  # the first is the one the run reports

    def __enter__(self):
        self._handlers.__enter__()
        return self

    def __exit__(self, *exc):
        return self._handlers.__exit__(*exc)

    def received(self, accelerator) -> int:
        """The signal any process received (0: none); all processes then stop at the same step."""
        if accelerator.num_processes == 1:
            return self.signal_number
        import torch

        flag = torch.tensor(float(self.signal_number), device=accelerator.device)
        return int(accelerator.reduce(flag, "max").item())


def report(
    signal_number: int, checkpoint: Path | None, step: int | None, processes: int, main_process: bool
) -> TrainingInterrupted:
    """Print where the run stopped and the command that resumes it; return the exception that ends the process."""
    name = signal.Signals(signal_number).name
    where = f" at step {step}" if step is not None else ""
    command = None
    if checkpoint is None:
        message = (
            f"Interrupted by {name}{where}, before any checkpoint was saved: there is nothing to resume; "
            "run the same command again to start over."
        )
    else:
        # --resume_from_checkpoint latest finds this checkpoint (the newest intact one); a parent such as the
        # quickstart names its own command instead.
        command = os.environ.get(RESUME_COMMAND_VARIABLE) or resume_command(sys.orig_argv, "latest")
        launcher = " (launched the same way, e.g. with accelerate launch)" if processes > 1 else ""
        newest = "" if step is not None else ", the newest intact one"
        message = f"Interrupted by {name}{where}; the checkpoint is {checkpoint}{newest}. Resume with{launcher}:\n  {command}"
    if main_process:
        print(f"\n{message}", file=sys.stderr, flush=True)
    return TrainingInterrupted(signal_number, checkpoint, command)
