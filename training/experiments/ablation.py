"""Architecture ablations at equal budget: several configs, one tokenizer, the same data, masks and steps.

Every run is an ordinary ``briskbert pretrain`` process with the same flags but its config, seed and output
folder. The tokenizer is trained once (or given) and passed to every run, so data preparation gives identical
sequences; the order is a shuffle keyed on (seed, epoch) and each sequence's mask is drawn from (seed, epoch,
index), so variants with the same seed see the same batches with the same masked positions.

The output folder holds ``tokenizer/``, one pretraining output per ``<variant>/seed<k>/`` (with
``ablation_run.json``: its flags, and the wall time and peak memory of each process; ``pretrain.log``; the
optional ``probe/``) and the report (:mod:`.ablation_report`). A run with ``all_results.json`` and ``final/``
is finished: the same command skips it, and resumes an interrupted one from its latest checkpoint.

Torch-free: the command line parses and checks the variants with it first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from briskbert.errors import USER_ERROR_EXIT_CODE, CommandFailed, SettingError, UserError
from briskbert.files import file_digest, staged_folder, write_atomic
from briskbert.processes import briskbert_argv, to_argv

ACCEPTED_FORMS = (
    "a preset name (bert-tiny), a config JSON file (my_config.json), NAME:PRESET (bert:bert-tiny) or "
    "NAME:PRESET:field=value,field=value (rope:bert-tiny:position_embedding_type=rope)"
)
RUN_RECORD = "ablation_run.json"
PROBE_DIR = "probe"
RESULTS_FILE = "all_results.json"
HISTORY_FILE = "log_history.jsonl"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class AblationInterrupted(RuntimeError):
    """The user stopped a run; its checkpoint is saved and the same command resumes it."""


# ---------------------------------------------------------------------------------------------- variants
@dataclass(frozen=True)
class Variant:
    """One configuration to compare: a preset name or config JSON, plus config fields to override."""

    name: str
    config_name: str
    overrides: dict = field(default_factory=dict)

    def __post_init__(self):
        if not _NAME.match(self.name):
            raise SettingError(
                "configs",
                f"variant name {self.name!r} must be a folder name (letters, digits, '.', '_', "
                f"'-'); accepted forms: {ACCEPTED_FORMS}.",
            )

    def pretrain_flags(self) -> list[str]:
        overrides = {"config_overrides": format_overrides(self.overrides)} if self.overrides else {}
        return to_argv(config_name=self.config_name, **overrides)


def _malformed(text: str, why: str) -> UserError:
    return SettingError("configs", f"entry {text!r}: {why}; accepted forms: {ACCEPTED_FORMS}.")


def parse_overrides(text: str, entry: str) -> dict:
    """'a=1,b=rope,c=true' -> {'a': 1, 'b': 'rope', 'c': True}: values are JSON where they parse as JSON."""
    overrides = {}
    for item in text.split(","):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not _FIELD.match(key) or not value:
            raise _malformed(entry, f"{item.strip()!r} is not field=value")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def format_overrides(overrides: dict) -> str:
    """The inverse of :func:`parse_overrides`, as ``briskbert pretrain --config_overrides`` reads it."""
    items = []
    for key, value in overrides.items():
        text = json.dumps(value)
        if isinstance(value, str):
            try:
                json.loads(value)
            except json.JSONDecodeError:
                text = value  # not JSON: read back as the same string
        if "," in text:
            raise UserError(
                f"config field {key}: the value {text!r} contains a comma, which cannot be passed."
            )
        items.append(f"{key}={text}")
    return ",".join(items)


def parse_variant(text: str, shared_overrides: dict | None = None) -> Variant:
    """One ``--configs`` entry (see :data:`ACCEPTED_FORMS`); ``shared_overrides`` apply first."""
    shared = dict(shared_overrides or {})
    if text.endswith(".json") or Path(text).is_file():
        return Variant(Path(text).stem, text, shared)
    parts = text.split(":")
    if len(parts) > 3 or any(not part.strip() for part in parts):
        raise _malformed(text, "expected at most three non-empty ':'-separated parts")
    if len(parts) == 1:
        return Variant(text, text, shared)
    overrides = parse_overrides(parts[2], text) if len(parts) == 3 else {}
    return Variant(parts[0], parts[1], {**shared, **overrides})


def parse_variants(texts: list[str], shared_overrides: dict | None = None) -> list[Variant]:
    variants = [parse_variant(text, shared_overrides) for text in texts]
    names = [variant.name for variant in variants]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SettingError(
            "configs",
            f"the variant name(s) {repeated} appear more than once; give each variant its own "
            "name with NAME:PRESET[:field=value,...].",
        )
    return variants


def check_variants(variants: list[Variant]) -> None:
    """Build every variant's config (without weights), so that an unknown preset, file, field or value fails
    before any run starts. Imports transformers."""
    from briskbert.modeling import PRESETS, BriskBertConfig

    fields = {name for name in BriskBertConfig().to_dict() if not name.startswith("_")}
    for variant in variants:
        where = f"variant {variant.name!r}"
        if variant.config_name in PRESETS:
            base = dict(PRESETS[variant.config_name])
        elif Path(variant.config_name).is_file():
            base = BriskBertConfig.from_json_file(variant.config_name).to_dict()
        else:
            raise SettingError(
                "configs",
                f"{where}: {variant.config_name!r} is neither a preset ({', '.join(sorted(PRESETS))}) nor a "
                f"config JSON file; accepted forms: {ACCEPTED_FORMS}.",
            )
        unknown = sorted(set(variant.overrides) - fields)
        if unknown:
            raise SettingError(
                "configs",
                f"{where}: unknown config field(s) {unknown}; BriskBertConfig has {sorted(fields)}.",
            )
        try:
            format_overrides(variant.overrides)
            BriskBertConfig(**{**base, **variant.overrides})
        except (UserError, ValueError, TypeError) as error:
            raise SettingError("configs", f"{where}: {error}") from None


# ------------------------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class Probe:
    """A short classification fine-tune of every pretrained variant (``briskbert finetune-classification``)."""

    train_file: str
    validation_file: str
    extra_args: tuple[str, ...] = ()
    metric: str = "eval_accuracy"


@dataclass(frozen=True)
class AblationPlan:
    """Everything one ablation runs. ``pretrain_args`` go unchanged to every run; without ``tokenizer_name``
    a WordPiece tokenizer is trained once on ``train_file``."""

    output_dir: Path
    variants: list[Variant]
    seeds: list[int]
    pretrain_args: list[str]
    tokenizer_name: str | None = None
    train_file: str | None = None
    vocab_size: int = 30522
    max_seq_length: int = 128
    max_train_steps: int | None = None
    max_train_seconds: float | None = None
    probe: Probe | None = None
    launcher: tuple[str, ...] = tuple(briskbert_argv())  # how a briskbert subcommand is started

    def run_dir(self, variant: Variant, seed: int) -> Path:
        return self.output_dir / variant.name / f"seed{seed}"

    def tokenizer_dir(self) -> Path:
        return Path(self.tokenizer_name or self.output_dir / "tokenizer")

    def pretrain_argv(self, variant: Variant, seed: int) -> list[str]:
        argv = ["pretrain", *self.pretrain_args, *to_argv(tokenizer_name=self.tokenizer_dir())]
        if self.max_train_steps is not None:
            argv += to_argv(max_train_steps=self.max_train_steps)
        return [*argv, *variant.pretrain_flags(), *to_argv(seed=seed, output_dir=self.run_dir(variant, seed))]


# ---------------------------------------------------------------------------------------------- processes
@dataclass
class Segment:
    """One process of a run (a run has several when it was interrupted and resumed)."""

    argv: list[str]
    returncode: int
    wall_time_s: float
    peak_rss_mib: float  # the process's own maximum resident set size (Linux: ru_maxrss)
    stopped_at_time_limit: bool = False


@dataclass
class RunRecord:
    """``ablation_run.json``: the flags a run was started with, and what each of its processes cost."""

    argv: list[str]
    segments: list[Segment] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> RunRecord | None:
        if not path.is_file():
            return None
        raw = json.loads(path.read_text())
        return cls(raw["argv"], [Segment(**segment) for segment in raw["segments"]])

    def save(self, path: Path) -> None:
        write_atomic(path, json.dumps(asdict(self), indent=2))

    @property
    def wall_time_s(self) -> float:
        return sum(segment.wall_time_s for segment in self.segments)

    @property
    def peak_rss_mib(self) -> float:
        return max((segment.peak_rss_mib for segment in self.segments), default=float("nan"))


def run_process(
    argv: list[str], log_path: Path, time_limit_s: float | None = None, progress=None, history_path=None
) -> Segment:
    """Run ``argv`` with its output appended to ``log_path``, measuring its wall time and peak memory.

    ``os.wait4`` gives the peak memory of this one child (``RUSAGE_CHILDREN`` would give the maximum over all
    children so far). At ``time_limit_s`` the child gets SIGTERM: the training loop finishes the step, saves
    a checkpoint and exits. ``progress`` (a tqdm bar) follows the last step logged in ``history_path``.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start, stopped = time.perf_counter(), False
    with log_path.open("a") as log:
        print(f"$ {shlex.join(argv)}", file=log, flush=True)
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            while True:
                pid, status, usage = os.wait4(process.pid, os.WNOHANG)
                if pid:
                    break
                if time_limit_s is not None and not stopped and time.perf_counter() - start > time_limit_s:
                    process.send_signal(signal.SIGTERM)
                    stopped = True
                _follow_progress(progress, history_path)
                time.sleep(0.5)
        except KeyboardInterrupt:
            # SIGTERM asks the loop to checkpoint and stop, also when only this process was signalled; unlike
            # a second SIGINT, it never aborts a checkpoint in progress.
            process.send_signal(signal.SIGTERM)
            os.wait4(process.pid, 0)
            raise AblationInterrupted(
                f"interrupted (pretraining saves a checkpoint first; its log: {log_path})"
            ) from None
    _follow_progress(progress, history_path)
    wall_time_s, peak_rss_mib = round(time.perf_counter() - start, 2), round(usage.ru_maxrss / 1024, 1)  # KiB
    return Segment(argv, os.waitstatus_to_exitcode(status), wall_time_s, peak_rss_mib, stopped)


def read_history(path: Path) -> list[dict]:
    """The entries of a run's ``log_history.jsonl``."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _follow_progress(progress, history_path: Path | None) -> None:
    if progress is None or not history_path.is_file():
        return
    step = max((entry.get("step", 0) for entry in read_history(history_path)), default=0)
    if step > progress.n:
        progress.update(step - progress.n)


def _check(what: str, segment: Segment, log_path: Path) -> None:
    """Stop on a failed process, with the end of its log; a run stopped by a user error (exit 2) is one too."""
    if segment.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-15:])
        error = UserError if segment.returncode == USER_ERROR_EXIT_CODE else CommandFailed
        raise error(f"{what} failed (exit code {segment.returncode}); the end of {log_path}:\n{tail}")


# ------------------------------------------------------------------------------------------------- runs
def is_finished(run_dir: Path) -> bool:
    return (run_dir / RESULTS_FILE).is_file() and (run_dir / "final" / "config.json").is_file()


def latest_checkpoint_step(run_dir: Path) -> int | None:
    steps = [int(m.group(1)) for p in run_dir.glob("step_*") if (m := re.fullmatch(r"step_(\d+)", p.name))]
    return max(steps, default=None)


def tokenizer_sha256(folder: Path) -> str:
    """The sha256 of the file that defines a tokenizer's vocabulary and pipeline."""
    for name in ("tokenizer.json", "vocab.txt"):
        if (folder / name).is_file():
            return file_digest(folder / name)
    raise FileNotFoundError(f"{folder}: no tokenizer.json or vocab.txt; is it a tokenizer folder?")


def prepare_tokenizer(plan: AblationPlan) -> Path:
    """The one tokenizer every run uses: the given folder, or a WordPiece vocabulary trained once."""
    folder = plan.tokenizer_dir()
    if plan.tokenizer_name or (folder / "tokenizer.json").is_file():
        tokenizer_sha256(folder)
        return folder
    print(f"Training the shared tokenizer ({plan.vocab_size} tokens) into {folder}", flush=True)
    log_path = plan.output_dir / "tokenizer.log"
    with staged_folder(folder) as staged:  # nothing half-written under the folder's name
        settings = to_argv(
            files=plan.train_file,
            vocab_size=plan.vocab_size,
            model_max_length=plan.max_seq_length,
            output_dir=staged,
            no_progress=True,
        )
        segment = run_process([*plan.launcher, "train-tokenizer", *settings], log_path)
        _check("Training the tokenizer", segment, log_path)
    return folder


def run_pretraining(plan: AblationPlan, variant: Variant, seed: int) -> RunRecord:
    """Pretrain one variant with one seed, unless it already finished; resume it if it was interrupted."""
    run_dir = plan.run_dir(variant, seed)
    argv = plan.pretrain_argv(variant, seed)
    record = RunRecord.load(run_dir / RUN_RECORD) or RunRecord(argv)
    if record.argv != argv:
        raise UserError(
            f"{run_dir} was run with other flags ({shlex.join(record.argv)}); use another output_dir, or "
            "delete that folder to run it again."
        )
    if is_finished(run_dir):
        print(f"  {variant.name} seed {seed}: finished before, skipped", flush=True)
        return record
    record.save(run_dir / RUN_RECORD)
    time_left = None
    if plan.max_train_seconds is not None:
        time_left = max(plan.max_train_seconds - record.wall_time_s, 1.0)
    from tqdm.auto import tqdm

    with tqdm(total=plan.max_train_steps, desc=f"{variant.name} seed {seed}", dynamic_ncols=True) as bar:
        segment = _run_segment(
            plan, record, run_dir, to_argv(resume_from_checkpoint="latest"), time_left, bar
        )
    if not is_finished(run_dir) and segment.stopped_at_time_limit:
        # The time budget ran out. A short last process resumes from the checkpoint with a budget of one more
        # step, so the loop ends the way every run ends: final evaluation, final/ folder, all_results.json.
        step = latest_checkpoint_step(run_dir)
        if step is None:
            raise CommandFailed(
                f"{variant.name} seed {seed}: max_train_seconds {plan.max_train_seconds:g} ran out before the "
                f"first optimizer step; raise it."
            )
        extra = to_argv(resume_from_checkpoint="latest", max_train_steps=step + 1)
        _run_segment(plan, record, run_dir, extra, None, None)
    if not is_finished(run_dir):
        raise AblationInterrupted(f"{variant.name} seed {seed} stopped before the end of its budget")
    return record


def _run_segment(plan, record: RunRecord, run_dir: Path, extra: list[str], time_left, bar) -> Segment:
    log_path = run_dir / "pretrain.log"
    argv = [*plan.launcher, *record.argv, *extra]
    segment = run_process(argv, log_path, time_left, bar, run_dir / HISTORY_FILE)
    record.segments.append(segment)
    record.save(run_dir / RUN_RECORD)
    # Stopped at the time limit, a run saves a checkpoint and exits (0, or 128 + SIGTERM); stopped before
    # training began, it just dies. The caller looks for the checkpoint either way.
    if not segment.stopped_at_time_limit:
        _check(f"Pretraining {run_dir}", segment, log_path)
    return segment


def run_probe(plan: AblationPlan, run_dir: Path, seed: int) -> Path:
    """Fine-tune the run's final model on the probe's classification data (skipped when done before)."""
    probe_dir = run_dir / PROBE_DIR
    if (probe_dir / RESULTS_FILE).is_file():
        return probe_dir
    probe, log_path = plan.probe, run_dir / "probe.log"
    data = to_argv(train_file=probe.train_file, validation_file=probe.validation_file)
    argv = [*plan.launcher, "finetune-classification", *to_argv(model_name_or_path=run_dir / "final"), *data]
    argv += [*probe.extra_args, *to_argv(seed=seed, output_dir=probe_dir)]
    _check(f"The fine-tuning probe of {run_dir}", run_process(argv, log_path), log_path)
    return probe_dir


def run_ablation(plan: AblationPlan) -> tuple[dict[tuple[str, int], RunRecord], Path]:
    """Run every variant x seed in turn (skipping finished runs): each run's record, keyed by (variant name,
    seed), and the tokenizer folder they share."""
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_folder = prepare_tokenizer(plan)
    records: dict[tuple[str, int], RunRecord] = {}
    total = len(plan.variants) * len(plan.seeds)
    for index, (variant, seed) in enumerate((v, s) for v in plan.variants for s in plan.seeds):
        changes = ", ".join(f"{key}={value}" for key, value in variant.overrides.items())
        described = variant.config_name + (f" ({changes})" if changes else "")
        print(f"[{index + 1}/{total}] {variant.name} seed {seed}: {described}", flush=True)
        records[variant.name, seed] = run_pretraining(plan, variant, seed)
        if plan.probe is not None:
            run_probe(plan, plan.run_dir(variant, seed), seed)
    return records, tokenizer_folder
