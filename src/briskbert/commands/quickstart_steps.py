"""The quickstart's record (``.quickstart.json`` in its output folder) and how it runs each step's job.

The record holds the entries of the folder the quickstart created (what ``--fresh`` deletes; nothing else is
ever deleted) and, per step, the job's flags, the steps it read from and when it finished. A step is reused
when it finished with the same flags, after the same runs of the steps it reads, and its output is there; else
its job runs again. A training job then continues its own interrupted run (``--resume_from_checkpoint
latest``, which the job checks is the same run) or replaces an earlier one (``--overwrite_output_dir``).

Each job runs in the quickstart's process group, so a terminal's Ctrl-C reaches the job itself, which stops
on its own terms (a training job saves a checkpoint first); the quickstart waits for it, then exits 130.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from briskbert.errors import UserError
from briskbert.files import write_atomic
from briskbert.processes import RESUME_COMMAND_VARIABLE, briskbert_argv

RECORD = ".quickstart.json"


def call(
    title: str, command: list[str], env: dict | None = None, capture=False, **popen
) -> tuple[str, int, bool]:
    """Run ``command`` and wait for it: (its stdout when ``capture``, its exit code, whether a SIGINT stopped
    it). A Ctrl-C reaches the job too (same process group) and is the job's to handle, so the quickstart only
    notes it. A job that fails otherwise stops the quickstart with exit code 1, naming the step."""
    process = subprocess.Popen(command, env={**os.environ, **(env or {})}, text=True,
                               stdout=subprocess.PIPE if capture else None, **popen)  # fmt: skip
    received = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        stdout, _ = process.communicate()
    finally:
        signal.signal(signal.SIGINT, previous)
    stopped = bool(received) or process.returncode in (130, -signal.SIGINT)
    if process.returncode and not stopped:
        command = " ".join(command)
        raise SystemExit(
            f"quickstart: step '{title}' failed (exit code {process.returncode}); command:\n  {command}"
        )
    return stdout, process.returncode, stopped


class Record:
    """``.quickstart.json``: what the quickstart created in ``out`` and each step's last run (see above)."""

    def __init__(self, out: Path, resume_command: str):
        self.out, self.path, self.resume_command = out, out / RECORD, resume_command
        try:
            saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
            self.outputs, self.steps = list(saved.get("outputs", [])), dict(saved.get("steps", {}))
        except (ValueError, AttributeError, TypeError) as error:
            raise UserError(
                f"{self.path} is not a quickstart record ({error}); delete it or choose another --output_dir"
            ) from None
        self.titles: list[str] = []
        self.timings: dict[str, float] = {}  # the steps that ran in this invocation
        self.skipped: list[str] = []

    def save(self) -> None:
        write_atomic(self.path, json.dumps({"outputs": self.outputs, "steps": self.steps}, indent=2))

    def claim(self, name: str) -> None:
        """Record ``out/name`` as the quickstart's before creating it; an entry there already is not ours."""
        if name not in self.outputs and not (self.out / name).exists():
            self.outputs.append(name)
            self.save()

    def refuse_foreign(self, names) -> None:
        """One line when ``out`` holds any of ``names`` that the quickstart did not record creating."""
        foreign = [name for name in names if (self.out / name).exists() and name not in self.outputs]
        if foreign:
            raise UserError(
                f"--output_dir {self.out} already holds {', '.join(foreign)}, which the quickstart did not "
                "write; choose another --output_dir, or delete them (the quickstart neither reuses nor deletes them)"
            )

    def begin(self, name: str, title: str, flags: dict, reads=(), done: Path | None = None) -> dict | None:
        """Print the step's header; return its record when it can be reused (and say so), else None."""
        self.titles.append(title)
        print(f"\n=== {len(self.titles)}. {title} ===", flush=True)
        self.current = dict(
            flags={k: str(v) for k, v in flags.items()}, reads={r: self.finished(r) for r in reads}
        )
        earlier = self.steps.get(name, {})
        if not (self.finished(name) and self.same(earlier) and (done is None or done.exists())):
            return None
        print(f"skipped: done in an earlier run with the same flags ({earlier['seconds']:.1f} s then)")
        self.skipped.append(title)
        return earlier

    def finished(self, name: str) -> float | None:
        return self.steps.get(name, {}).get("finished_at")

    def same(self, earlier: dict) -> bool:
        return {key: earlier.get(key) for key in self.current} == self.current

    def run(
        self, name: str, command: list[str], env=None, training=False, capture=False, result=None, **popen
    ):
        """Run the step :meth:`begin` announced; it counts as finished once its job exits 0. Returns its
        record, which keeps ``result``, or with ``capture`` the last line the job printed (JSON)."""
        resume = training and self.same(self.steps.get(name, {}))  # the same run, interrupted or lost
        if resume:
            print("continuing the earlier run of this step from its last checkpoint, if it saved one")
            command = [*command, "--resume_from_checkpoint", "latest"]
        if training:
            command = [*command, "--overwrite_output_dir"]  # replaces a run with other flags, ours by claim()
            env = {**(env or {}), RESUME_COMMAND_VARIABLE: self.resume_command}
        self.steps[name] = {**self.current, "finished_at": None}
        self.save()
        started = time.perf_counter()
        stdout, returncode, stopped = call(self.titles[-1], command, env, capture, **popen)
        seconds = round(time.perf_counter() - started, 1)
        if returncode == 0:
            self.timings[self.titles[-1]] = seconds
            result = json.loads(stdout.strip().splitlines()[-1]) if capture else result
            self.steps[name].update(finished_at=time.time(), seconds=seconds, result=result)
            self.save()
        if stopped:
            where = "from its last checkpoint" if training else "from the start of that step"
            print(f"\nquickstart: interrupted during '{self.titles[-1]}'. Run the same command again to continue "
                  f"{where}; the steps before it are reused (--fresh starts over).", file=sys.stderr)  # fmt: skip
            raise SystemExit(130)
        return self.steps[name]

    def job(self, name: str, title: str, job: str, flags: dict, reads=(), done=None, training=False) -> None:
        """One briskbert job writing ``out/name``: reused, or run (``briskbert JOB --flag value ...``)."""
        if self.begin(name, title, flags, reads, done) is None:
            self.claim(name)
            self.run(name, job_argv(job, flags), training=training)


def job_argv(job: str, flags: dict) -> list[str]:
    """``briskbert JOB --flag value ...`` as this interpreter runs it."""
    return briskbert_argv(job, *(str(part) for flag, value in flags.items() for part in (f"--{flag}", value)))


@contextlib.contextmanager
def holding_locks(folder: Path):
    """Yields False when a running process holds one of ``folder``'s lock files (a job's ``.briskbert.lock``,
    the local Hub's ``.server.lock``); else True, holding them all so that none starts meanwhile."""
    import fcntl

    with contextlib.ExitStack() as handles:
        for lock in sorted(folder.glob("*.lock")) if folder.is_dir() else ():
            handle = handles.enter_context(open(lock, "a"))  # noqa: SIM115 - closed by the stack
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
        yield True


def clear_outputs(record: Record) -> tuple[list[str], list[str]]:
    """``--fresh``: delete what ``record`` says the quickstart created, but no folder a running process
    holds; returns (deleted, kept because in use). Nothing else in the folder is touched."""
    removed, kept = [], []
    for name in record.outputs:
        path = record.out / name
        with holding_locks(path) as free:
            if not free:
                kept.append(name)
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
                removed.append(name)
            elif path.exists() or path.is_symlink():
                path.unlink()
                removed.append(name)
    record.outputs, record.steps = kept, {}
    if kept:
        record.save()
    else:
        record.path.unlink(missing_ok=True)
    return removed, kept
