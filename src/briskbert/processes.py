"""How briskbert starts itself in a subprocess (the quickstart's steps, an ablation's runs)."""

from __future__ import annotations

import contextlib
import signal
import sys

#: Set by a parent that runs briskbert jobs (the quickstart) to the command that continues the whole flow: an
#: interrupted training job prints it as the way to resume, instead of its own internal command line.
RESUME_COMMAND_VARIABLE = "BRISKBERT_RESUME_COMMAND"


def briskbert_argv(*args: str) -> list[str]:
    """``python -m briskbert ARGS`` with this interpreter; ``-P`` (3.11+) keeps the current directory off
    ``sys.path``, so nothing named like a project module where the user stands replaces the installed package."""
    safe_path = ("-P",) if sys.version_info >= (3, 11) else ()
    return [sys.executable, *safe_path, "-m", "briskbert", *args]


class Interrupt(KeyboardInterrupt):
    """A SIGINT or SIGTERM as a KeyboardInterrupt that knows its signal (the process exits with 128 + it)."""

    def __init__(self, signal_number: int):
        super().__init__(signal.Signals(signal_number).name)
        self.signal_number = signal_number


def raise_interrupt(signal_number, frame):
    """A signal handler: raise :class:`Interrupt` (SIGTERM then acts as Ctrl-C)."""
    raise Interrupt(signal_number)


@contextlib.contextmanager
def signal_handler(handler, signals=(signal.SIGINT, signal.SIGTERM)):
    """``handler`` for ``signals`` while entered (only the main thread can set handlers: elsewhere, none)."""
    previous = {}
    for number in signals:
        with contextlib.suppress(ValueError):
            previous[number] = signal.signal(number, handler)
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def to_argv(**settings) -> list[str]:
    """``--name value`` for each setting (``--name`` alone for ``True``): the one place outside the command
    layer that spells a flag."""
    return [
        text
        for name, value in settings.items()
        for text in ([f"--{name}"] if value is True else [f"--{name}", str(value)])
    ]
