"""The quickstart's steps and their record, ``.quickstart.json`` in its output folder.

The record lists what the quickstart created in the folder (all that ``--fresh`` deletes) and, per step, the
job's flags, the runs of the steps it read and when it finished. A step that finished with the same flags after
the same runs of the steps it reads, its output still there, is reused; else its job runs again, a training job
continuing its own interrupted run (``--resume_from_checkpoint latest``: the job checks it is the same run) or
replacing an older one (``--overwrite_output_dir``).

Jobs run in the quickstart's process group: a terminal's Ctrl-C reaches the job, which stops on its own terms
(a training job saves a checkpoint first); the quickstart waits for it, then exits 130.
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
from briskbert.inputs import read_json_object
from briskbert.processes import RESUME_COMMAND_VARIABLE, briskbert_argv, to_argv

RECORD = ".quickstart.json"


def call(
    title: str, command: list[str], env: dict | None = None, capture=False, **popen
) -> tuple[str, int, bool]:
    """Run ``command`` to its end: (its stdout when ``capture``, its exit code, whether a SIGINT stopped it). A
    Ctrl-C is the job's to handle: the quickstart only notes it. Any other failure stops the quickstart (exit 1)."""
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
    """``.quickstart.json`` (see above), and the titles, timings and reuses of this invocation's steps."""

    def __init__(self, out: Path, resume_command: str):
        self.out, self.path, self.resume_command = out, out / RECORD, resume_command
        saved = {}
        if self.path.is_file():
            saved = read_json_object(self.path, "output_dir", "delete it or choose another --output_dir")
        self.outputs, self.steps = list(saved.get("outputs", [])), dict(saved.get("steps", {}))
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
        finished = {read: self.steps.get(read, {}).get("finished_at") for read in reads}
        self.current = dict(flags={k: str(v) for k, v in flags.items()}, reads=finished)
        earlier = self.steps.get(name, {})
        if not (earlier.get("finished_at") and self.same(earlier) and (done is None or done.exists())):
            return None
        print(f"skipped: done in an earlier run with the same flags ({earlier['seconds']:.1f} s then)")
        self.skipped.append(title)
        return earlier

    def same(self, earlier: dict) -> bool:
        return {key: earlier.get(key) for key in self.current} == self.current

    def run(
        self, name: str, command: list[str], env=None, training=False, capture=False, result=None, **popen
    ):
        """Run the step :meth:`begin` announced; it is finished once its job exits 0. Its record keeps ``result``,
        or with ``capture`` the last line the job printed (JSON)."""
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
        """One briskbert job writing ``out/name``: reused, or run."""
        if self.begin(name, title, flags, reads, done) is None:
            self.claim(name)
            self.run(name, briskbert_argv(job, *to_argv(**flags)), training=training)


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
