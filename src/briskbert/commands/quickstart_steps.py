"""The quickstart's steps: each one a briskbert job in a child process, skipped when it already finished with
the same inputs, continued when it was interrupted.

A step is keyed by its inputs: the job and its flags, the contents of the input files it names from outside
the output folder, the keys of the steps whose outputs it reads, and briskbert's version. A finished step
leaves ``.quickstart/<step>.json`` with that key; the next run skips the step when the key is the same and
the step's outputs are still there. A changed key re-runs the step, and, through the keys, every step that
reads from it.

Ctrl-C reaches the quickstart only (each job runs in a session of its own), which passes one SIGINT on to a
training job (it finishes its optimizer step, saves a checkpoint and exits 130) and ends any other job with
SIGTERM; the quickstart then exits 130 too. The step stays unfinished, so the next run starts there again, a
training job from its checkpoint (``--resume_from_checkpoint latest``). A second Ctrl-C stops a training job
at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from briskbert import __version__
from briskbert.extras import TORCHAO_IMPORT_LOGGERS
from briskbert.files import write_atomic
from briskbert.processes import RESUME_COMMAND_VARIABLE, briskbert_argv
from briskbert.training.engine.checkpointing import checkpoint_dirs

STATE_DIR = ".quickstart"
PUBLISHED_TAGS = "published_tags.json"
OUTPUTS = "outputs.json"  # the entries of the output folder the quickstart created
HASHED_FILE_LIMIT = 256 << 20  # larger input files are recognised by size and modification time
EXIT_INTERRUPTED = 128 + signal.SIGINT

LOAD_BACK = """
import json, logging, sys
for noisy in sys.argv[4:]:  # torchao's import (transformers imports it when installed) warns about CUDA kernels
    logging.getLogger(noisy).setLevel(logging.ERROR)
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
repo_id, revision, sentences = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = AutoModelForSequenceClassification.from_pretrained(repo_id, revision=revision, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(repo_id, revision=revision, trust_remote_code=True)
classifier = pipeline("text-classification", model=model, tokenizer=tokenizer)
print(json.dumps(dict(model_class=f"{type(model).__module__}.{type(model).__name__}",
                      predictions=[dict(text=s, **p) for s, p in zip(sentences, classifier(sentences))])))
"""


@dataclass(frozen=True)
class Step:
    """One job of the flow: ``briskbert <command> --flag value ...``."""

    name: str  # its record's name under .quickstart/
    title: str
    command: str
    flags: dict
    done_when: tuple[Path, ...]  # files (or folders) a finished step leaves
    after: tuple[str, ...] = ()  # earlier steps whose outputs it reads
    training: bool = False  # a training job: stops at a checkpoint on Ctrl-C and resumes from it
    label: str | None = None  # how the summary names its result

    def argv(self, extra_flags: dict) -> list[str]:
        command = briskbert_argv(self.command)
        for flag, value in {**self.flags, **extra_flags}.items():
            command += [f"--{flag}"] if value is True else [f"--{flag}", str(value)]
        return command


@dataclass
class StepRecord:
    """What ``.quickstart/<step>.json`` holds: the inputs' key, whether the step finished, what it gave."""

    key: str
    finished: bool = False
    seconds: float | None = None
    result: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> StepRecord | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):  # absent, or written by another version: run the step
            return None

    def save(self, path: Path) -> None:
        write_atomic(path, json.dumps(asdict(self), indent=2))


class StepFailed(SystemExit):
    """A job exited with an error: the quickstart stops with exit code 1, naming the step and the command."""

    def __init__(self, title: str, returncode: int, command: list[str]):
        super().__init__(
            f"quickstart: step '{title}' failed (exit code {returncode}); command:\n  " + " ".join(command)
        )


class StepInterrupted(SystemExit):
    """Ctrl-C (or SIGTERM) during a step: exits 130 (143) once the job has stopped."""

    def __init__(self, title: str, signal_number: int, training: bool):
        where = "from its last checkpoint" if training else "from the start of that step"
        print(
            f"\nquickstart: interrupted during '{title}'. Run the same command again to continue {where}; "
            "the steps before it are reused (--fresh starts over).",
            file=sys.stderr,
            flush=True,
        )
        super().__init__(128 + signal_number)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def path_fingerprint(path: Path) -> str:
    """A file by its content (size and modification time past 256 MB), a folder by its files' listing."""
    if path.is_file():
        stat = path.stat()
        return (
            file_digest(path) if stat.st_size <= HASHED_FILE_LIMIT else f"{stat.st_size}:{stat.st_mtime_ns}"
        )
    if path.is_dir():
        listing = sorted(
            (file.relative_to(path).as_posix(), file.stat().st_size, file.stat().st_mtime_ns)
            for file in path.rglob("*")
            if file.is_file()
        )
        return hashlib.sha256(json.dumps(listing).encode()).hexdigest()
    return "missing"


def folder_content_digest(folder: Path) -> str:
    """Every file's path and content: what a publish of ``folder`` would upload, as one digest."""
    files = sorted(file for file in folder.rglob("*") if file.is_file())
    listing = [(file.relative_to(folder).as_posix(), file_digest(file)) for file in files]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def written(out: Path) -> list[str]:
    """The entries of ``out`` the quickstart recorded creating (what ``--fresh`` deletes)."""
    path = out / STATE_DIR / OUTPUTS
    return json.loads(path.read_text()) if path.is_file() else []


def record_output(out: Path, path: Path) -> None:
    """Record ``path`` (in ``out``) as the quickstart's, before the quickstart creates it; an entry that is
    there already is someone else's and is never recorded."""
    names, name = written(out), path.relative_to(out).parts[0]
    if name not in names and not (out / name).exists():
        (out / STATE_DIR).mkdir(exist_ok=True)
        write_atomic(out / STATE_DIR / OUTPUTS, json.dumps([*names, name]))


@contextlib.contextmanager
def unless_held(folder: Path):
    """Yields False when a running process holds one of ``folder``'s lock files (a job's ``.briskbert.lock``,
    the local Hub's ``.server.lock``); else True, holding them all so that none can start meanwhile."""
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


def clear_outputs(out: Path) -> tuple[list[str], list[str]]:
    """Delete what the quickstart recorded creating in ``out``, but no folder a running process holds;
    returns (deleted, kept because in use). Nothing else in ``out`` is touched."""
    removed, kept = [], []
    for name in written(out):
        path = out / name
        with unless_held(path) as free:
            if not free:
                kept.append(name)
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
                removed.append(name)
            elif path.exists() or path.is_symlink():
                path.unlink()
                removed.append(name)
    if kept:
        write_atomic(out / STATE_DIR / OUTPUTS, json.dumps(kept))
    elif (out / STATE_DIR).is_dir():
        shutil.rmtree(out / STATE_DIR)
    return removed, kept


def foreign_outputs(out: Path, names: tuple[str, ...]) -> list[str]:
    """Which of the quickstart's output names are in ``out`` without its record of creating them."""
    recorded = written(out)
    return [name for name in names if (out / name).exists() and name not in recorded]


def run_child(command: list[str], env: dict, training: bool, cwd=None, capture: bool = False):
    """Run ``command`` in a session of its own and pass on the signals the quickstart receives: a training
    job gets SIGINT / SIGTERM as such (it saves a checkpoint), any other job SIGTERM. Returns (exit code,
    first signal received or 0, stdout when ``capture``)."""
    process = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        start_new_session=True,  # a terminal's Ctrl-C reaches the quickstart only, which passes it on once
        stdout=subprocess.PIPE if capture else None,
        text=True,
    )
    received = []

    def pass_on(signal_number, frame):
        received.append(signal_number)
        graceful = training and signal_number in (signal.SIGINT, signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal_number if graceful else signal.SIGTERM)

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, pass_on) for number in watched}
    try:
        stdout, _ = process.communicate()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return process.returncode, (received[0] if received else 0), stdout


class Flow:
    """Runs the steps in order, reusing the finished ones, and keeps their timings for the summary."""

    def __init__(self, out: Path, resume_command: str | None = None):
        self.out = out
        self.resume_command = resume_command  # what an interrupted training job prints as the way to resume
        self.state_dir = out / STATE_DIR
        self.keys: dict[str, str] = {}
        self.titles: list[str] = []
        self.timings: dict[str, float] = {}  # steps that ran in this invocation
        self.skipped: list[str] = []
        self.resumed: list[str] = []

    def announce(self) -> None:
        if any(self.state_dir.glob("*.json")):
            print(
                f"Reusing the earlier quickstart in {self.out}: each step whose inputs are unchanged since it "
                "finished is skipped, an interrupted step continues (--fresh starts over)."
            )
        else:
            print(f"Starting a new quickstart in {self.out}.")

    def key(self, step: Step) -> str:
        """What defines the step's result: see the module docstring."""
        flags, inputs = {}, {}
        for flag, value in sorted(step.flags.items()):
            if isinstance(value, Path) and value.is_relative_to(self.out):
                value = value.relative_to(self.out).as_posix()  # covered by the step that writes it
            elif isinstance(value, Path):
                inputs[flag] = path_fingerprint(value)
            flags[flag] = str(value)
        payload = {
            "briskbert": __version__,
            "command": step.command,
            "flags": flags,
            "inputs": inputs,
            "after": {name: self.keys[name] for name in step.after},
        }
        self.keys[step.name] = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]
        return self.keys[step.name]

    def record_path(self, step: Step) -> Path:
        return self.state_dir / f"{step.name}.json"

    def begin(self, step: Step) -> StepRecord | None:
        """Print the step's header; return its record when it is done already (and say it is skipped)."""
        self.titles.append(step.title)
        print(f"\n=== {len(self.titles)}. {step.title} ===", flush=True)
        key = self.key(step)
        record = StepRecord.load(self.record_path(step))
        if not (record and record.finished and record.key == key and all(p.exists() for p in step.done_when)):
            return None
        took = f"{record.seconds:.1f} s then" if record.seconds is not None else "earlier"
        print(f"skipped: done in an earlier run with the same inputs ({took}); output: {step.done_when[0]}")
        self.skipped.append(step.title)
        return record

    def record_finished(self, step: Step, result: dict) -> StepRecord:
        """Record ``step`` as finished without running it (its result is there already)."""
        record = StepRecord(self.keys[step.name], finished=True, seconds=0.0, result=result)
        record.save(self.record_path(step))
        return record

    def run(self, step: Step, extra_flags: dict | None = None, env: dict | None = None) -> StepRecord:
        return self.begin(step) or self.execute(step, extra_flags=extra_flags, env=env)

    def execute(
        self, step: Step, extra_flags=None, env=None, command=None, cwd=None, capture=False, result=None
    ):
        """Run the step's job now (after :meth:`begin`); a training job continues its interrupted run.

        The finished step's record keeps ``result``, or with ``capture`` the last line of the job's output
        (JSON)."""
        key, path = self.keys[step.name], self.record_path(step)
        extra_flags = dict(extra_flags or {})
        if step.training:
            extra_flags["overwrite_output_dir"] = True  # replaces the outputs of a run with other inputs
            earlier = StepRecord.load(path)
            output_dir = Path(step.flags["output_dir"])
            if earlier and not earlier.finished and earlier.key == key and checkpoint_dirs(output_dir):
                extra_flags["resume_from_checkpoint"] = "latest"
                print(
                    f"continuing the interrupted run from its last checkpoint ({checkpoint_dirs(output_dir)[-1]})"
                )
                self.resumed.append(step.title)
        for flag in ("output_dir", "out"):
            if isinstance(step.flags.get(flag), Path):
                record_output(self.out, step.flags[flag])
        StepRecord(key).save(path)  # started: an interruption from here on continues this step
        if step.training and self.resume_command:
            env = {**(env or {}), RESUME_COMMAND_VARIABLE: self.resume_command}
        command = command or step.argv(extra_flags)
        start = time.perf_counter()
        returncode, signal_number, stdout = run_child(
            command, {**os.environ, **(env or {})}, step.training, cwd=cwd, capture=capture
        )
        seconds = time.perf_counter() - start
        if signal_number:
            raise StepInterrupted(step.title, signal_number, step.training)
        if returncode != 0:
            raise StepFailed(step.title, returncode, command)
        self.timings[step.title] = seconds
        if capture:
            result = json.loads(stdout.strip().splitlines()[-1])
        record = StepRecord(key, finished=True, seconds=round(seconds, 1), result=result or {})
        record.save(path)
        return record


class LocalHub:
    """The local Hub server, started the first time a step needs it."""

    def __init__(self, out: Path, token: str):
        self.out, self.token, self.hub = out, token, None
        self._stack = contextlib.ExitStack()

    def env(self) -> dict:
        if self.hub is None:
            from briskbert.hub_server import BackgroundHub

            record_output(self.out, self.out / "hub")
            record_output(self.out, self.out / "hf_home")

            self.hub = self._stack.enter_context(
                BackgroundHub(self.out / "hub", self.token, user="briskbert")
            )  # writes under briskbert/
            print(f"Local Hub listening on {self.hub.url} (data in {self.out / 'hub'})")
        return {"HF_TOKEN": self.token, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(self.out / "hf_home"),
                "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": self.hub.url}  # fmt: skip

    def tags(self, repo_id: str) -> set[str]:
        """The tags ``repo_id`` has on the local Hub (none before its first publish)."""
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError

        self.env()
        try:
            refs = HfApi(endpoint=self.hub.url, token=self.token).list_repo_refs(repo_id)
        except RepositoryNotFoundError:
            return set()
        return {tag.name for tag in refs.tags}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        started = self.hub is not None
        self._stack.close()
        if started:
            print("Local Hub stopped.")


def published_tags(out: Path) -> dict[str, str]:
    """Content digest -> tag of every model an earlier run published to the local Hub in ``out/hub``."""
    path = out / STATE_DIR / PUBLISHED_TAGS
    return json.loads(path.read_text()) if path.is_file() and (out / "hub").is_dir() else {}


def tag_for(out: Path, model_dir: Path, taken: set[str]) -> tuple[str, bool]:
    """The tag for ``model_dir`` and whether it already names exactly this folder's content: the tag an
    earlier run published the same content under, else the first ``vN`` no tag on the Hub (``taken``) has
    yet. A tag is never moved to other content."""
    tags = published_tags(out)
    content = folder_content_digest(model_dir)
    if tags.get(content) in taken:
        return tags[content], True
    earlier = sorted(taken)
    tag = next(f"v{n}" for n in range(1, len(taken) + 2) if f"v{n}" not in taken)
    if earlier:
        print(
            f"This model differs from the one(s) published before as {', '.join(earlier)}: publishing it as {tag}."
        )
    return tag, False


def remember_tag(out: Path, model_dir: Path, tag: str) -> None:
    tags = published_tags(out)
    tags[folder_content_digest(model_dir)] = tag
    write_atomic(out / STATE_DIR / PUBLISHED_TAGS, json.dumps(tags, indent=2))


def publish_and_load_back(
    flow: Flow, best: Step, repo_id: str, sentences: list[str], hub_token: str
) -> tuple[dict, dict]:
    """Publish the best classifier to the local Hub, then load it back in a clean process; both steps are
    skipped when done before with the same model. Returns ({repo_id, tag}, the load-back's result)."""
    out = flow.out
    model_dir = Path(best.flags["output_dir"]) / "final"
    publish = Step(
        name="publish",
        title=f"Publish the {best.label} classifier to the local Hub",
        command="publish",
        flags=dict(model_dir=model_dir, repo_id=repo_id),
        done_when=(out / "hub",),
        after=(best.name,),
    )
    with LocalHub(out, hub_token) as hub:
        published = flow.begin(publish)
        if published is None:
            tag, done_before = tag_for(out, model_dir, hub.tags(repo_id))
            result = {"repo_id": repo_id, "tag": tag, "published_at": time.time()}
            if done_before:  # this very folder was published and tagged by an earlier run: nothing to do
                print(f"already published: {repo_id}@{tag} holds exactly this model; nothing to publish.")
                published = flow.record_finished(publish, result)
            else:
                published = flow.execute(publish, extra_flags={"tag": tag}, env=hub.env(), result=result)
                remember_tag(out, model_dir, tag)
        tag = published.result["tag"]
        load_back = Step(
            name="load-back",
            title=f"Load {repo_id}@{tag} back in a fresh process and run pipeline()",
            command="(load back)",
            flags=dict(
                repo_id=repo_id,
                tag=tag,
                published_at=published.result["published_at"],
                sentences=json.dumps(sentences),
            ),  # fmt: skip
            done_when=(out / "hub",),
            after=("publish",),
        )
        loaded = flow.begin(load_back)
        if loaded is None:
            with tempfile.TemporaryDirectory() as scratch:
                env = {**hub.env(), "HF_HOME": str(Path(scratch) / "fresh_cache"), "PYTHONPATH": ""}
                command = [
                    sys.executable,
                    "-c",
                    textwrap.dedent(LOAD_BACK),
                    repo_id,
                    tag,
                    json.dumps(sentences),
                    *TORCHAO_IMPORT_LOGGERS,
                ]
                loaded = flow.execute(load_back, env=env, command=command, cwd=scratch, capture=True)
    return published.result, loaded.result
