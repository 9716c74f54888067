"""Mutation testing of the core modules with cosmic-ray, one module at a time against its selected tests.

    python scripts/mutation.py optim masking          # run, then write .mutation/<module>/report.md
    python scripts/mutation.py --list                 # the modules, their tests and mutant counts
    python scripts/mutation.py optim --budget-minutes 15 --resume   # go on with an interrupted session
    python scripts/mutation.py optim --rerun-survivors  # after adding tests: do they kill the survivors?
    python scripts/mutation.py optim --report-only    # rewrite the report from the stored session
    python scripts/mutation.py loop --sample 30       # 30 mutants drawn at random; --resume --sample 60 for more

cosmic-ray mutates the source file in place (the editable install imports it from the checkout), runs the
module's test selection, and puts the original back after each mutant. This script adds what the repository
needs on top:

- speed: importing torch and transformers costs more than most test selections, so a small fork server imports
  them (and any ``warm`` modules that do not import the module under test) once, and every mutant's pytest run
  is a fork of it. Each run still imports the mutated module and the tests afresh from disk, no bytecode is
  written, and a run past the per-mutant timeout is killed with its process group;
- no noise: mutants inside annotations (never evaluated under ``from __future__ import annotations``) and the
  operator swaps listed in ``EXCLUDED_OPERATORS`` are marked skipped before the run;
- safety: the module is copied to ``.mutation/<module>/original.py`` first and put back on every exit
  (Ctrl-C, SIGTERM, an error), and again at the start of the next run if a kill -9 left a mutant behind;
- the figures: killed, survived, timeouts, and each survivor either matched with its reason in
  ``scripts/mutation_equivalents.toml`` or listed as a gap that needs a test. Exit code 1 when the kill rate of
  non-equivalent mutants is below ``--fail-under`` (90 by default).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
EQUIVALENTS = ROOT / "scripts" / "mutation_equivalents.toml"
PYTEST_FLAGS = ("-x", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")
# Third-party imports every test selection needs; forked runs share them.
BASE_WARM = (
    "numpy",
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "accelerate",
    "safetensors.torch",
    "pytest",
    "briskbert.hub_server",  # the tests' conftest imports it
)
UNSAMPLED = "skipped: not in the random sample"  # the outcome of mutants a --sample run leaves out
# Cross-kind swaps (arithmetic <-> bitwise or power, any operator -> identity test) add ten mutants per operator
# that die with the plain swap (``+`` -> ``-``) or are identical for small ints and singletons in CPython.
EXCLUDED_OPERATORS = (
    r"core/ReplaceBinaryOperator_(Add|Sub|Mul|Div|FloorDiv|Mod)_(Pow|RShift|LShift|BitOr|BitAnd|BitXor)$",
    r"core/ReplaceBinaryOperator_(BitOr|BitAnd|BitXor|LShift|RShift)_(Add|Sub|Mul|Div|FloorDiv|Mod|Pow)$",
    r"core/ReplaceBinaryOperator_Pow_(RShift|LShift|BitOr|BitAnd|BitXor)$",
    r"core/ReplaceComparisonOperator_(Eq|NotEq|Lt|LtE|Gt|GtE)_(Is|IsNot)$",
    r"core/ReplaceComparisonOperator_(Is|IsNot)_(Eq|NotEq|Lt|LtE|Gt|GtE)$",
)


@dataclass(frozen=True)
class Target:
    """One module under mutation and the tests that exercise it."""

    source: str
    module: str
    tests: tuple[str, ...]
    select: str = ""
    markers: str = ""
    warm: tuple[str, ...] = field(default_factory=tuple)
    timeout_s: float = 240.0
    # Functions (``name`` or ``Class.method``) to mutate when the module holds more than the code under test.
    only: tuple[str, ...] = field(default_factory=tuple)


TARGETS: dict[str, Target] = {
    "optim": Target(
        source="training/engine/optim.py",
        module="briskbert.training.engine.optim",
        tests=("tests/test_optim.py",),
        warm=("briskbert.modeling", "transformers.optimization"),
    ),
    "masking": Target(
        source="training/data/masking.py",
        module="briskbert.training.data.masking",
        tests=("tests/test_masking.py", "tests/test_pretrain.py"),
        select="masking or configurable_split",
        warm=(
            "briskbert.tokenization",
            "briskbert.training.data.pretraining_data",
            "briskbert.commands.pretrain",
        ),
    ),
    "checkpointing": Target(
        source="training/engine/checkpointing.py",
        module="briskbert.training.engine.checkpointing",
        tests=("tests/test_checkpointing.py", "tests/test_training_hardening.py"),
        warm=("briskbert.training.engine.config",),
    ),
    "metrics": Target(
        source="training/tasks/metrics.py",
        module="briskbert.training.tasks.metrics",
        tests=("tests/test_metrics.py",),
        warm=("sklearn.metrics", "scipy.stats", "seqeval.metrics"),
    ),
    "verification": Target(
        source="hub_cards/verification.py",
        module="briskbert.hub_cards.verification",
        tests=("tests/test_verification.py",),
    ),
    "secrets": Target(
        source="hub_cards/secrets.py",
        module="briskbert.hub_cards.secrets",
        tests=("tests/test_secrets.py",),
        select="not cli_refusal and not real_model_folders",  # the two that need a Hub or a real model
    ),
    "corpus": Target(
        source="training/data/corpus.py",
        module="briskbert.training.data.corpus",
        tests=("tests/test_corpus.py", "tests/test_pretraining_data.py"),
        select="not resume_mid_epoch",  # a whole training run; the store's reads are covered by the others
        warm=("datasets", "briskbert.tokenization", "briskbert.tokenization.training"),
    ),
    "sequences": Target(
        source="training/data/pretraining_data.py",
        module="briskbert.training.data.pretraining_data",
        tests=("tests/test_pretraining_data.py", "tests/test_corpus.py"),
        warm=("datasets", "briskbert.tokenization", "briskbert.training.data.corpus"),
    ),
    "loop": Target(
        source="training/engine/loop.py",
        module="briskbert.training.engine.loop",
        tests=("tests/test_training_loop.py", "tests/test_run_safety.py"),
        markers="not slow",
        warm=("briskbert.modeling", "briskbert.tokenization", "datasets"),
    ),
    "storage": Target(
        source="hub_server/storage.py",
        module="briskbert.hub_server.storage",
        tests=(
            "tests/test_hub_storage.py",
            "tests/test_local_hub.py",
            "tests/test_hub_hardening.py",
        ),
        markers="not slow",
        warm=("huggingface_hub",),
    ),
    "qa-postprocessing": Target(
        source="training/tasks/qa.py",
        module="briskbert.training.tasks.qa",
        tests=(
            "tests/test_qa.py",
            "tests/test_finetune.py",
            "tests/test_open_domain_qa.py",
            "tests/test_pipelines.py",
        ),
        markers="not slow",
        select="qa or squad or answer or question",
        warm=("briskbert.modeling", "briskbert.tokenization", "datasets"),
        only=(
            "_truncate_questions",
            "_tokenize_windows",
            "prepare_train_features",
            "keep_some_answerless_windows",
            "prepare_eval_features",
            "postprocess_qa_predictions",
            "nbest_text",
        ),
    ),
    "losses-crf": Target(
        source="modeling/crf.py",
        module="briskbert.modeling.crf",
        tests=("tests/test_crf.py",),
        markers="not slow",
    ),
    "losses-mlm": Target(
        source="modeling/modeling_briskbert.py",
        module="briskbert.modeling.modeling_briskbert",
        tests=("tests/test_modeling.py", "tests/test_pretrain.py"),
        markers="not slow",
        select="loss",
        only=("masked_lm_loss",),
    ),
    "losses-distillation": Target(
        source="training/tasks/distill.py",
        module="briskbert.training.tasks.distill",
        tests=("tests/test_distill.py", "tests/test_finetune.py"),
        markers="not slow",
        select="distil",
        warm=("briskbert.modeling", "briskbert.tokenization", "datasets"),
        only=("soft_target_loss", "DistillationModel.forward", "DistillationModel._hidden_loss"),
    ),
    "losses-embeddings": Target(
        source="training/retrieval/embeddings.py",
        module="briskbert.training.retrieval.embeddings",
        tests=(
            "tests/test_retrieval.py",
            "tests/test_multiprocess_retrieval.py",
        ),
        markers="not slow",
        warm=("briskbert.modeling", "briskbert.tokenization", "datasets"),
        only=("multiple_negatives_ranking_loss", "DualEncoder._loss"),
    ),
    "losses-similarity": Target(
        source="training/retrieval/similarity.py",
        module="briskbert.training.retrieval.similarity",
        tests=("tests/test_similarity.py",),
        markers="not slow",
        warm=("briskbert.modeling", "briskbert.tokenization", "datasets", "scipy.stats"),
        only=("cosent_loss", "cosine_mse_loss"),
    ),
    "lexical": Target(
        source="retrieval/lexical.py",
        module="briskbert.retrieval.lexical",
        tests=("tests/test_lexical_fusion.py",),
        warm=("bm25s", "briskbert.modeling", "briskbert.tokenization"),
    ),
    "fusion": Target(
        source="retrieval/fusion.py",
        module="briskbert.retrieval.fusion",
        tests=("tests/test_lexical_fusion.py", "tests/test_reranking.py"),
        markers="not slow",
        warm=("bm25s", "briskbert.modeling", "briskbert.tokenization"),
        only=(
            "fused_scores",
            "fused_rankings",
            "Fusion.__post_init__",
            "choose_fusion_weight",
            "Fusion.point",
            "Fusion.summary",
        ),
    ),
    "reranking": Target(
        source="retrieval/reranker.py",
        module="briskbert.retrieval.reranker",
        tests=("tests/test_lexical_fusion.py", "tests/test_reranking.py"),
        markers="not slow",
        warm=("bm25s", "briskbert.modeling", "briskbert.tokenization"),
        only=("Reranker.lexical_scores", "load_reranker"),
    ),
}


def pytest_args(target: Target) -> list[str]:
    args = [*PYTEST_FLAGS, *target.tests]
    args += ["-m", target.markers] if target.markers else []
    return [*args, "-k", target.select] if target.select else args


# ---------------------------------------------------------------------------------------------- fork server


def serve(socket_path: str, warm: list[str], forbidden: str) -> None:
    """Import ``warm`` once, then run each request's pytest in a fork of this process."""
    import importlib

    sys.dont_write_bytecode = True
    os.chdir(ROOT)
    for name in warm:
        importlib.import_module(name)
    if forbidden in sys.modules:
        raise SystemExit(f"warm imports pulled in {forbidden}: mutants would not be seen; trim the warm list")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(1)
    print("ready", flush=True)
    while True:
        connection, _ = server.accept()
        with connection, connection.makefile("rwb") as stream:
            request = json.loads(stream.readline())
            rc, output = _run_forked(request["args"], request["timeout"], connection)
            stream.write(json.dumps({"rc": rc, "output": output[-20000:]}).encode() + b"\n")
            stream.flush()


def _run_forked(args: list[str], timeout: float, connection: socket.socket) -> tuple[int, str]:
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        if pid == 0:  # the test run: its own process group, so a timeout takes its subprocesses too
            os.setsid()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            code = 3
            try:
                import pytest

                code = int(pytest.main(args))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        rc = _wait(pid, timeout, connection)
        log.seek(0)
        output = log.read().decode(errors="replace")
    return rc, ("timeout\n" + output if rc == 124 else output)


def _wait(pid: int, timeout: float, connection: socket.socket) -> int:
    """The child's exit code; 124 after killing it when it overran or the client went away."""
    deadline = time.monotonic() + timeout
    connection.setblocking(False)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) & 0xFF
        try:
            client_gone = connection.recv(1) == b""
        except BlockingIOError:
            client_gone = False
        if client_gone or time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return 124
        time.sleep(0.05)


def client(socket_path: str, timeout: float, args: list[str]) -> int:
    """cosmic-ray's test command: ask the fork server; without one, run pytest in this process."""
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(socket_path)
    except OSError:
        import pytest

        return int(pytest.main(args))
    with connection, connection.makefile("rwb") as stream:
        stream.write(json.dumps({"args": args, "timeout": timeout}).encode() + b"\n")
        stream.flush()
        reply = json.loads(stream.readline())
    sys.stdout.write(reply["output"])
    return reply["rc"]


# ------------------------------------------------------------------------------------------------ the session


@dataclass
class Paths:
    """Where one module's session lives."""

    folder: Path
    config: Path
    session: Path
    backup: Path
    socket: Path
    report: Path

    @classmethod
    def of(cls, name: str) -> Paths:
        folder = WORK / name
        return cls(
            folder=folder,
            config=folder / "cosmic-ray.toml",
            session=folder / "session.sqlite",
            backup=folder / "original.py",
            socket=Path(tempfile.gettempdir()) / f"briskbert-mutation-{os.getpid()}-{name}.sock",
            report=folder / "report.md",
        )


def restore_leftover(target: Target, paths: Paths) -> None:
    """Put the original back if an earlier run was killed while a mutant was on disk."""
    source = ROOT / target.source
    if paths.backup.exists() and paths.backup.read_bytes() != source.read_bytes():
        shutil.copyfile(paths.backup, source)
        print(f"restored {target.source} from {paths.backup.relative_to(ROOT)} (an earlier run was killed)")


def write_config(target: Target, paths: Paths) -> None:
    test_command = " ".join(
        [
            sys.executable,
            "scripts/mutation.py",
            "--client",
            str(paths.socket),
            "--timeout",
            str(target.timeout_s),
        ]
        + ["--"]
        + [_quote(arg) for arg in pytest_args(target)]
    )
    paths.config.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{target.source}"\n'
        f"timeout = {target.timeout_s + 60}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(test_command)}\n\n"
        '[cosmic-ray.distributor]\nname = "local"\n'
    )


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of every annotation, when the module never evaluates them."""
    tree = ast.parse(source)
    future = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    if not future:
        return []
    spans = []
    for node in ast.walk(tree):
        annotations = []
        if isinstance(node, ast.arg | ast.AnnAssign):
            annotations.append(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(node.returns)
        for annotation in filter(None, annotations):
            spans.append(
                (
                    (annotation.lineno, annotation.col_offset),
                    (annotation.end_lineno, annotation.end_col_offset),
                )
            )
    return spans


def function_lines(source: str, names: tuple[str, ...]) -> list[range]:
    """The line ranges of the named functions (``name`` or ``Class.method``); every name must exist."""
    found = {}
    for node in ast.parse(source).body:
        members = node.body if isinstance(node, ast.ClassDef) else []
        for prefix, child in [("", node), *((f"{node.name}.", m) for m in members)]:
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found[prefix + child.name] = range(child.lineno, child.end_lineno + 1)
    missing = [name for name in names if name not in found]
    if missing:
        raise SystemExit(f"no function {missing[0]!r} in the module: update the target's `only`")
    return [found[name] for name in names]


def skip_noise(target: Target, paths: Paths, sample: int, seed: int) -> None:
    """Mark annotation mutants, excluded operator swaps, mutants outside ``only`` and, with ``sample``, all but
    a random sample of the rest as skipped in the session."""
    import random

    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    source = (ROOT / target.source).read_text()
    spans = annotation_spans(source)
    functions = function_lines(source, target.only) if target.only else []
    excluded = re.compile("|".join(EXCLUDED_OPERATORS))
    with use_db(str(paths.session), WorkDB.Mode.open) as db:
        kept = []
        for item in db.pending_work_items:
            mutation = item.mutations[0]
            start = tuple(mutation.start_pos)
            reason = None
            if any(begin <= start < end for begin, end in spans):
                reason = "skipped: inside an annotation (never evaluated)"
            elif excluded.match(mutation.operator_name):
                reason = "skipped: excluded operator swap"
            elif functions and not any(start[0] in lines for lines in functions):
                reason = "skipped: outside the functions under test"
            if reason:
                db.set_result(item.job_id, WorkResult(output=reason, worker_outcome=WorkerOutcome.SKIPPED))
            else:
                kept.append(item.job_id)
        if 0 < sample < len(kept):
            chosen = set(random.Random(seed).sample(kept, sample))
            for job_id in kept:
                if job_id not in chosen:
                    outcome = WorkResult(output=UNSAMPLED, worker_outcome=WorkerOutcome.SKIPPED)
                    db.set_result(job_id, outcome)


def widen_sample(paths: Paths, sample: int, seed: int) -> None:
    """Draw more of the mutants left out of the random sample, so that ``sample`` have been drawn in all."""
    import random
    import sqlite3

    def count(query: str) -> int:
        return db.execute(query).fetchone()[0]

    with sqlite3.connect(paths.session) as db:
        left_out = [
            row[0] for row in db.execute("SELECT job_id FROM work_results WHERE output = ?", (UNSAMPLED,))
        ]
        run = count("SELECT COUNT(*) FROM work_results WHERE worker_outcome != 'SKIPPED'")
        pending = count("SELECT COUNT(*) FROM work_items") - count("SELECT COUNT(*) FROM work_results")
        wanted = max(0, min(sample - run - pending, len(left_out)))
        more = random.Random(f"{seed}/{run + pending}").sample(sorted(left_out), wanted)
        db.executemany("DELETE FROM work_results WHERE job_id = ?", [(job_id,) for job_id in more])


def forget_survivors(paths: Paths) -> None:
    """Make the survivors pending again, to check that new tests kill them (tests only ever get added), and
    the kills by timeout too: a machine that was paused or overloaded times out mutants the tests would not
    have noticed."""
    import sqlite3

    with sqlite3.connect(paths.session) as db:
        db.execute(
            "DELETE FROM work_results WHERE test_outcome = 'SURVIVED'"
            " OR (test_outcome = 'KILLED' AND output LIKE 'timeout%')"
        )


def start_server(target: Target, paths: Paths) -> subprocess.Popen:
    # A package that holds the module under test imports it: such a package is left cold (imported per run).
    warm = [name for name in (*BASE_WARM, *target.warm) if not target.module.startswith(name + ".")]
    server = subprocess.Popen(
        [
            sys.executable,
            "scripts/mutation.py",
            "--serve",
            str(paths.socket),
            "--forbid",
            target.module,
            *warm,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        text=True,
    )
    if server.stdout.readline().strip() != "ready":
        server.wait()
        raise SystemExit(f"the fork server for {target.module} did not start (exit code {server.returncode})")
    return server


def run_session(name: str, target: Target, options: argparse.Namespace) -> None:
    """Initialise (unless resuming), run the baseline and the mutants, always putting the original back."""
    paths = Paths.of(name)
    paths.folder.mkdir(parents=True, exist_ok=True)
    restore_leftover(target, paths)
    source = ROOT / target.source
    shutil.copyfile(source, paths.backup)
    server = None
    try:
        write_config(target, paths)
        server = start_server(target, paths)
        started = time.monotonic()
        if options.rerun_survivors and paths.session.exists():
            forget_survivors(paths)
        elif options.resume and options.sample and paths.session.exists():
            widen_sample(paths, options.sample, options.seed)
        elif not (options.resume and paths.session.exists()):
            _cosmic_ray("init", str(paths.config), str(paths.session))
            skip_noise(target, paths, options.sample, options.seed)
        baseline = _cosmic_ray("baseline", str(paths.config), check=False)
        if baseline.returncode != 0:
            raise SystemExit(
                f"the unmutated tests of {name} fail; fix them first:\n{baseline.stdout[-3000:]}"
            )
        print(
            f"{name}: baseline passed in {time.monotonic() - started:.0f} s; running the mutants", flush=True
        )
        _execute_within_budget(paths, options.budget_minutes * 60)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        paths.socket.unlink(missing_ok=True)
        if source.read_bytes() != paths.backup.read_bytes():
            shutil.copyfile(paths.backup, source)
            print(f"restored {target.source} after the interrupted run")


def _execute_within_budget(paths: Paths, budget_s: float) -> None:
    """``cosmic-ray exec``; at the budget it is interrupted (it restores the file) and the rest stays pending."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cosmic_ray.cli", "exec", str(paths.config), str(paths.session)], cwd=ROOT
    )
    try:
        process.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        print(f"budget of {budget_s / 60:.0f} min reached: the remaining mutants stay pending (--resume)")
        process.send_signal(signal.SIGINT)
        process.wait()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait()


def _cosmic_ray(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "cosmic_ray.cli", *args], cwd=ROOT, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise SystemExit(f"cosmic-ray {args[0]} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result


# ---------------------------------------------------------------------------------------------------- report


@dataclass
class Survivor:
    line: int
    operator: str
    original: str
    mutant: str
    why: str = ""


@dataclass
class Figures:
    """What one session reached."""

    total: int = 0
    skipped: int = 0
    unsampled: int = 0
    pending: int = 0
    killed: int = 0
    timeouts: int = 0
    incompetent: int = 0
    survivors: list[Survivor] = field(default_factory=list)

    @property
    def equivalent(self) -> int:
        return sum(bool(s.why) for s in self.survivors)

    @property
    def kill_rate(self) -> float:
        relevant = self.killed + len(self.survivors) - self.equivalent
        return 100.0 * self.killed / relevant if relevant else 100.0


def load_equivalents(name: str) -> list[dict]:
    if not EQUIVALENTS.exists():
        return []
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import toml as tomllib  # cosmic-ray depends on it

        return tomllib.loads(EQUIVALENTS.read_text()).get(name, [])
    return tomllib.loads(EQUIVALENTS.read_text()).get(name, [])


def _changed_lines(diff: str) -> tuple[str, str]:
    lines = diff.splitlines()
    removed = [x[1:].strip() for x in lines if x.startswith("-") and not x.startswith("---")]
    added = [x[1:].strip() for x in lines if x.startswith("+") and not x.startswith("+++")]
    return " ".join(removed), " ".join(added)


def figures(name: str, paths: Paths) -> Figures:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    equivalents = load_equivalents(name)
    result = Figures()
    with use_db(str(paths.session), WorkDB.Mode.open) as db:
        result.total = db.num_work_items
        result.pending = db.num_work_items - db.num_results
        for item, outcome in db.completed_work_items:
            if outcome.worker_outcome == WorkerOutcome.SKIPPED and outcome.output == UNSAMPLED:
                result.unsampled += 1
            elif outcome.worker_outcome == WorkerOutcome.SKIPPED:
                result.skipped += 1
            elif outcome.test_outcome == TestOutcome.INCOMPETENT:
                result.incompetent += 1
            elif outcome.test_outcome == TestOutcome.KILLED:
                result.killed += 1
                result.timeouts += (outcome.output or "").startswith("timeout")
            else:
                mutation = item.mutations[0]
                original, mutant = _changed_lines(outcome.diff or "")
                why = next(
                    (e["why"] for e in equivalents if e["line"] == original and e["mutant"] == mutant), ""
                )
                operator = mutation.operator_name.removeprefix("core/")
                result.survivors.append(Survivor(mutation.start_pos[0], operator, original, mutant, why))
    result.survivors.sort(key=lambda s: (s.line, s.operator))
    return result


def render(name: str, target: Target, numbers: Figures) -> str:
    run = numbers.total - numbers.skipped - numbers.unsampled - numbers.pending
    sampled = f" (a random sample; {numbers.unsampled} left out)" if numbers.unsampled else ""
    only = f" Mutated: {', '.join(target.only)}." if target.only else ""
    lines = [
        f"### `{target.source}`",
        "",
        f"Mutants: {numbers.total} generated, {numbers.skipped} skipped (annotations, excluded swaps, outside "
        f"the functions under test), {run} run{sampled}, {numbers.pending} not run.{only} Killed {numbers.killed} ({numbers.timeouts} by timeout), "
        f"survived {len(numbers.survivors)} ({numbers.equivalent} equivalent), "
        f"incompetent {numbers.incompetent}. **Kill rate of non-equivalent mutants: {numbers.kill_rate:.1f} %.**",
        "",
    ]
    if numbers.survivors:
        lines += ["| line | operator | original | mutant | equivalent because |", "|---|---|---|---|---|"]
        for s in numbers.survivors:
            cells = [str(s.line), s.operator, f"`{s.original}`", f"`{s.mutant}`", s.why or "**NOT KILLED**"]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


SUMMARY_HEADER = (
    "| module | mutants | skipped | run | not run | killed | survived (equivalent) | kill rate |\n"
    "|---|---|---|---|---|---|---|---|\n"
)


def summary_row(target: Target, numbers: Figures) -> str:
    run = numbers.total - numbers.skipped - numbers.unsampled - numbers.pending
    cells = [
        f"`{target.source}`",
        numbers.total,
        numbers.skipped + numbers.unsampled,
        run,
        numbers.pending,
        numbers.killed,
        f"{len(numbers.survivors)} ({numbers.equivalent})",
        f"**{numbers.kill_rate:.1f} %**",
    ]
    return "| " + " | ".join(map(str, cells)) + " |"


# ------------------------------------------------------------------------------------------------------ main


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("modules", nargs="*", help=f"any of: {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--list", action="store_true", help="Show the modules and their test selections.")
    parser.add_argument(
        "--resume", action="store_true", help="Go on with the stored session's pending mutants."
    )
    parser.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="Run the stored session's survivors and timeouts again (after adding tests).",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="Only write the report of stored sessions."
    )
    parser.add_argument("--budget-minutes", type=float, default=15.0, help="Per module (default 15).")
    parser.add_argument(
        "--sample",
        type=int,
        default=0,
        help="Run only this many mutants drawn at random (default: all); with --resume, draw more to reach it.",
    )
    parser.add_argument("--seed", type=int, default=0, help="Of the random sample (default 0).")
    parser.add_argument("--fail-under", type=float, default=90.0, help="Kill rate in %% (default 90).")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--forbid", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=240.0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    if "--" in argv:  # the test command: everything after -- goes to pytest
        split = argv.index("--")
        options, pytest_argv = parse_arguments(argv[:split]), argv[split + 1 :]
    else:
        options, pytest_argv = parse_arguments(argv), []
    if options.serve:
        serve(options.serve, options.modules, options.forbid)
        return 0
    if options.client:
        return client(options.client, options.timeout, pytest_argv)
    unknown = [m for m in options.modules if m not in TARGETS]
    if unknown:
        print(f"error: unknown module {unknown[0]!r}; choose from {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    names = options.modules or list(TARGETS)
    if options.list:
        for name in names:
            print(f"{name}: {TARGETS[name].source}\n    pytest {' '.join(pytest_args(TARGETS[name]))}")
        return 0
    signal.signal(signal.SIGTERM, _interrupt)  # like Ctrl-C: the finally blocks put the sources back
    passed, summary = True, []
    for name in names:
        target, paths = TARGETS[name], Paths.of(name)
        if not options.report_only:
            run_session(name, target, options)
        if not paths.session.exists():
            print(f"{name}: no session yet (run it first)")
            continue
        numbers = figures(name, paths)
        paths.report.write_text(render(name, target, numbers))
        print(render(name, target, numbers))
        summary.append(summary_row(target, numbers))
        passed &= numbers.kill_rate >= options.fail_under and not numbers.pending
    if len(summary) > 1:
        print(SUMMARY_HEADER + "\n".join(summary))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
