"""Architecture ablations at equal budget: every variant x seed is an ordinary ``briskbert pretrain`` process
given one shared tokenizer, so only the config and the seed change (order and masks are keyed on the seed).
``<variant>/seed<k>/`` is a pretraining output plus ``ablation_run.json`` (its command, and the wall time and peak
memory of each of its processes). Run again, finished runs are skipped and an interrupted one resumes.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from briskbert.errors import USER_ERROR_EXIT_CODE, CommandFailed, SettingError, UserError
from briskbert.files import staged_folder, write_atomic
from briskbert.processes import briskbert_argv, to_argv
from briskbert.training.tasks.pretraining_settings import parse_config_overrides
from briskbert.training.tasks.settings import check_at_least, helped

ACCEPTED_FORMS = (
    "a preset name (bert-tiny), a config JSON file (my_config.json), NAME:PRESET (bert:bert-tiny) or "
    "NAME:PRESET:field=value,field=value (rope:bert-tiny:position_embedding_type=rope)"
)
RUN_RECORD = "ablation_run.json"
TEXT_SUFFIXES = (".txt", ".text", ".raw")  # what `briskbert train-tokenizer --files` reads
DEFAULT_PROBE_ARGS = shlex.join(
    to_argv(
        max_train_samples=2000,
        max_eval_samples=500,
        num_train_epochs=1,
        max_seq_length=64,
        per_device_train_batch_size=32,
        learning_rate="1e-4",
    )
)


class AblationInterrupted(RuntimeError):
    """The user stopped a run; its checkpoint is saved and the same command resumes it."""


class Variant(NamedTuple):
    """One configuration to compare: a preset name or config JSON, and the config fields it overrides."""

    name: str  # its folder's
    config_name: str
    overrides: str  # field=value,... as `briskbert pretrain --config_overrides` reads them


def parse_variants(texts: list[str], shared_overrides: str | None) -> list[Variant]:
    """The ``configs`` entries (:data:`ACCEPTED_FORMS`); ``shared_overrides`` apply before each one's own."""
    variants = []
    for text in texts:
        if text.endswith(".json") or Path(text).is_file():
            parts = [Path(text).stem, text]
        else:
            parts = text.split(":") if ":" in text else [text, text]
        if len(parts) > 3 or not all(part.strip() for part in parts):
            raise malformed(text, "expected at most three non-empty ':'-separated parts")
        name, config_name, own = (*parts, "")[:3]
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise malformed(
                text, f"variant name {name!r} must be a folder name (letters, digits, '.', '_', '-')"
            )
        try:
            parse_config_overrides(own)
        except SettingError as error:
            raise malformed(text, error.problem.rstrip(".")) from None
        variants.append(Variant(name, config_name, ",".join(filter(None, (shared_overrides, own)))))
    names = [variant.name for variant in variants]
    if repeated := sorted({name for name in names if names.count(name) > 1}):
        raise SettingError(
            "configs",
            f"the variant name(s) {repeated} appear more than once; give each variant its own name with "
            "NAME:PRESET[:field=value,...].",
        )
    return variants


def malformed(text: str, why: str) -> SettingError:
    return SettingError("configs", f"entry {text!r}: {why}; accepted forms: {ACCEPTED_FORMS}.")


@dataclass(frozen=True)
class AblationSettings:
    """Every flag of ``briskbert ablate`` (those it does not define go unchanged to every pretraining run)."""

    configs: list[str] = field(metadata={"help": "The variants (see above).", "metavar": "VARIANT"})
    output_dir: str = field(metadata={"help": "Where the runs, the table and the plot go."})
    seeds: list[int] = field(
        default_factory=lambda: [42], metadata={"help": "Every variant runs once per seed."}
    )
    config_overrides: str | None = helped(
        "field=value,... for every variant, before its own: num_hidden_layers=4"
    )
    launcher: str | None = helped("How each run starts (default: this Python's -m briskbert); see above.")
    train_file: str | None = helped("Training text, passed to every run.")
    tokenizer_name: str | None = helped("A tokenizer folder (default: train one into output_dir/tokenizer).")
    vocab_size: int = helped("Size of the tokenizer trained once.", 30522)
    max_seq_length: int = 128
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_train_steps: int | None = helped("Optimizer steps per run.")
    max_train_tokens: int | None = helped("Or tokens per run: batch x accumulation x max_seq_length a step.")
    max_train_seconds: float | None = helped(
        "Also stop each run after this long (one more step, then the final eval)."
    )
    finetune_probe: str | None = helped(
        "Fine-tune each variant on this classification file; report its accuracy.", metavar="TRAIN_FILE"
    )
    probe_validation_file: str | None = helped("The probe's validation file.")
    probe_args: str = helped("Further finetune-classification flags.", DEFAULT_PROBE_ARGS)
    variants: list[Variant] = field(init=False)

    def __post_init__(self):
        if len(set(self.seeds)) != len(self.seeds):
            raise SettingError("seeds", f"must be distinct, got {self.seeds}.")
        parse_config_overrides(self.config_overrides)
        if self.tokenizer_name is None and self.train_file is None:
            raise SettingError(
                "train_file", "(a tokenizer is trained on it once) or tokenizer_name: give one."
            )
        for name in ("train_file", "finetune_probe", "probe_validation_file"):
            if getattr(self, name) and not Path(getattr(self, name)).is_file():
                raise SettingError(name, f"{getattr(self, name)}: no such file.")
        if self.tokenizer_name is None and Path(self.train_file).suffix.lower() not in TEXT_SUFFIXES:
            raise SettingError(
                "train_file",
                f"{self.train_file}: the shared tokenizer can only be trained on a text file; "
                "train one with `briskbert train-tokenizer` and give it as tokenizer_name.",
            )
        if self.tokenizer_name and not (Path(self.tokenizer_name) / "tokenizer.json").is_file():
            raise SettingError(
                "tokenizer_name",
                f"{self.tokenizer_name} has no tokenizer.json, which each run's saved tokenizer is checked "
                "against; save the tokenizer with save_pretrained or train one with `briskbert train-tokenizer`.",
            )
        if self.max_train_steps is not None and self.max_train_tokens is not None:
            raise SettingError("max_train_steps", "or max_train_tokens: give one, not both.")
        check_at_least(self, 1, "max_train_steps", "max_train_tokens")
        if self.max_train_seconds is not None and self.max_train_seconds <= 0:
            raise SettingError("max_train_seconds", f"must be positive, got {self.max_train_seconds}.")
        if bool(self.finetune_probe) != bool(self.probe_validation_file):
            raise SettingError("finetune_probe", "and probe_validation_file go together.")
        object.__setattr__(self, "variants", parse_variants(self.configs, self.config_overrides))

    @property
    def steps(self) -> int | None:
        """Optimizer steps per run; from max_train_tokens over the sequence slots of a step (exact with packing)."""
        if self.max_train_tokens is None:
            return self.max_train_steps
        slots = self.per_device_train_batch_size * self.gradient_accumulation_steps * self.max_seq_length
        return math.ceil(self.max_train_tokens / slots)

    @property
    def tokenizer_dir(self) -> Path:
        return Path(self.tokenizer_name or Path(self.output_dir) / "tokenizer")

    def command(self, job: str, *args: str) -> list[str]:
        """How a briskbert job is started: the launcher, then the job and its flags."""
        launcher = shlex.split(self.launcher) if self.launcher else briskbert_argv()
        return [*launcher, job, *args]


def check_variants(settings: AblationSettings) -> None:
    """Build every variant's config as its pretraining will (without weights), so that an unknown preset, file,
    field or value fails before any run starts. Imports torch."""
    from briskbert.training.tasks.pretraining import build_config
    from briskbert.training.tasks.pretraining_settings import PretrainingModel

    for variant in settings.variants:
        model = PretrainingModel(config_name=variant.config_name, config_overrides=variant.overrides or None)
        try:
            build_config(model, settings.vocab_size, 0, settings.max_seq_length)
        except SettingError as error:
            forms = f"; accepted forms: {ACCEPTED_FORMS}" if error.field == "config_name" else ""
            problem = f"variant {variant.name!r}: {error.problem.rstrip('.')}{forms}."
            raise SettingError("configs", problem) from None
        except (ValueError, TypeError) as error:
            raise SettingError("configs", f"variant {variant.name!r}: {error}") from None


def tokenizer_definition(folder: Path) -> dict:
    """``folder``'s tokenizer as the tokenizers library reads it: a copy saved by transformers differs in bytes
    (its layout), never in this."""
    from tokenizers import Tokenizer

    return json.loads(Tokenizer.from_file(str(folder / "tokenizer.json")).to_str())


def run_ablation(settings: AblationSettings, extra: list[str]) -> dict[tuple[str, int], dict]:
    """Train the shared tokenizer, then every variant x seed in turn (skipping finished runs, with the probe
    when asked for); returns each run's record (``ablation_run.json``) by (variant name, seed)."""
    Path(settings.output_dir).mkdir(parents=True, exist_ok=True)
    prepare_tokenizer(settings)
    shared = to_argv(train_file=settings.train_file) if settings.train_file else []
    shared += to_argv(
        max_seq_length=settings.max_seq_length,
        per_device_train_batch_size=settings.per_device_train_batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
    )
    shared += [*extra, *to_argv(tokenizer_name=settings.tokenizer_dir)]
    shared += to_argv(max_train_steps=settings.steps) if settings.steps else []
    records, runs = {}, [(variant, seed) for variant in settings.variants for seed in settings.seeds]
    for index, (variant, seed) in enumerate(runs, 1):
        changes = f" ({variant.overrides})" if variant.overrides else ""
        print(f"[{index}/{len(runs)}] {variant.name} seed {seed}: {variant.config_name}{changes}", flush=True)
        model = to_argv(config_name=variant.config_name)
        model += to_argv(config_overrides=variant.overrides) if variant.overrides else []
        run_dir = Path(settings.output_dir) / variant.name / f"seed{seed}"
        argv = ["pretrain", *shared, *model, *to_argv(seed=seed, output_dir=run_dir)]
        records[variant.name, seed] = run_pretraining(settings, argv, run_dir, f"{variant.name} seed {seed}")
        if settings.finetune_probe and not (run_dir / "probe" / "all_results.json").is_file():
            data = to_argv(train_file=settings.finetune_probe, validation_file=settings.probe_validation_file)
            job = to_argv(model_name_or_path=run_dir / "final", seed=seed, output_dir=run_dir / "probe")
            probe = ["finetune-classification", *data, *shlex.split(settings.probe_args), *job]
            log = run_dir / "probe.log"
            check(f"The fine-tuning probe of {run_dir}", run_process(settings.command(*probe), log), log)
    return records


def prepare_tokenizer(settings: AblationSettings) -> None:
    """The one tokenizer every run uses: the given folder, or a WordPiece vocabulary trained once."""
    folder = settings.tokenizer_dir
    if settings.tokenizer_name or (folder / "tokenizer.json").is_file():
        return
    print(f"Training the shared tokenizer ({settings.vocab_size} tokens) into {folder}", flush=True)
    with staged_folder(folder) as staged:  # nothing half-written under the folder's name
        flags = to_argv(
            files=settings.train_file,
            vocab_size=settings.vocab_size,
            model_max_length=settings.max_seq_length,
            output_dir=staged,
            no_progress=True,
        )
        log = Path(settings.output_dir) / "tokenizer.log"
        check("Training the tokenizer", run_process(settings.command("train-tokenizer", *flags), log), log)


def is_finished(run_dir: Path) -> bool:
    return (run_dir / "all_results.json").is_file() and (run_dir / "final" / "config.json").is_file()


def run_pretraining(settings: AblationSettings, argv: list[str], run_dir: Path, label: str) -> dict:
    """Pretrain one variant with one seed unless it finished before, resuming an interrupted run; its record."""
    path = run_dir / RUN_RECORD
    record = json.loads(path.read_text()) if path.is_file() else {"argv": argv, "segments": []}
    if record["argv"] != argv:
        raise UserError(
            f"{run_dir} was run with other flags ({shlex.join(record['argv'])}); use another output_dir, or "
            "delete that folder to run it again."
        )
    if is_finished(run_dir):
        print(f"  {label}: finished before, skipped", flush=True)
        return record
    write_atomic(path, json.dumps(record, indent=2))
    resume = [*argv, *to_argv(resume_from_checkpoint="latest")]
    budget = settings.max_train_seconds
    time_left = None if budget is None else max(budget - wall_time_s(record), 1.0)
    from tqdm.auto import tqdm

    with tqdm(total=settings.steps, desc=label, dynamic_ncols=True) as bar:
        stopped = run_segment(settings, record, run_dir, resume, time_left, bar)
    if stopped and not is_finished(run_dir):
        # The time budget ran out. A short last process resumes from the checkpoint with a budget of one more
        # step, so the run ends the way every run ends: final evaluation, final/ folder, all_results.json.
        steps = [int(p.name[5:]) for p in run_dir.glob("step_*") if p.name[5:].isdigit()]
        if not steps:
            raise CommandFailed(
                f"{label}: max_train_seconds {settings.max_train_seconds:g} ran out before the first optimizer "
                "step; raise it."
            )
        run_segment(settings, record, run_dir, [*resume, *to_argv(max_train_steps=max(steps) + 1)])
    if not is_finished(run_dir):
        raise AblationInterrupted(f"{label} stopped before the end of its budget")
    return record


def run_segment(settings, record: dict, run_dir: Path, argv: list[str], time_limit_s=None, bar=None) -> bool:
    """One pretraining process of a run, added to its record; whether it was stopped at the time limit (then it
    saves a checkpoint and exits, or dies before training began: the caller looks for the checkpoint). ``bar``
    (tqdm) follows the last step the run has logged."""
    log, history = run_dir / "pretrain.log", run_dir / "log_history.jsonl"

    def follow():
        if bar is None or not history.is_file():
            return
        try:
            lines = history.read_text().splitlines()
            logged = max((json.loads(line).get("step", 0) for line in lines if line.strip()), default=0)
        except json.JSONDecodeError:  # a line the run is writing right now: read it at the next poll
            return
        bar.update(max(logged - bar.n, 0))

    ran = run_process(settings.command(*argv), log, time_limit_s, follow)
    record["segments"].append(ran)
    write_atomic(run_dir / RUN_RECORD, json.dumps(record, indent=2))
    if not ran["stopped_at_time_limit"]:
        check(f"Pretraining {run_dir}", ran, log)
    return ran["stopped_at_time_limit"]


def wall_time_s(record: dict) -> float:
    return sum(segment["wall_time_s"] for segment in record["segments"])


def run_process(argv: list[str], log_path: Path, time_limit_s: float | None = None, poll=None) -> dict:
    """Run ``argv`` with its output appended to ``log_path``: its exit code, wall time and peak memory. At
    ``time_limit_s`` it gets SIGTERM (the loop finishes the step, saves a checkpoint and exits); ``poll()`` is
    called while it runs."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start, stopped = time.perf_counter(), False
    with log_path.open("a") as log:
        print(f"$ {shlex.join(argv)}", file=log, flush=True)
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            # wait4: the peak memory of this one child (RUSAGE_CHILDREN is the maximum over all children so far)
            while not (waited := os.wait4(process.pid, os.WNOHANG))[0]:
                if time_limit_s is not None and not stopped and time.perf_counter() - start > time_limit_s:
                    process.send_signal(signal.SIGTERM)
                    stopped = True
                if poll is not None:
                    poll()
                time.sleep(0.5)
        except KeyboardInterrupt:
            # SIGTERM asks the loop to checkpoint and stop; unlike a second SIGINT, it never aborts a checkpoint.
            process.send_signal(signal.SIGTERM)
            os.wait4(process.pid, 0)
            raise AblationInterrupted(
                f"interrupted (pretraining saves a checkpoint first; its log: {log_path})"
            ) from None
    _, status, usage = waited
    return {
        "argv": argv,
        "returncode": os.waitstatus_to_exitcode(status),
        "wall_time_s": round(time.perf_counter() - start, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # ru_maxrss is in KiB
        "stopped_at_time_limit": stopped,
    }


def check(what: str, ran: dict, log_path: Path) -> None:
    """Stop on a failed process, with the end of its log; a run stopped by a user error (exit 2) is one too."""
    if ran["returncode"] != 0:
        tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-15:])
        error = UserError if ran["returncode"] == USER_ERROR_EXIT_CODE else CommandFailed
        raise error(f"{what} failed (exit code {ran['returncode']}); the end of {log_path}:\n{tail}")
