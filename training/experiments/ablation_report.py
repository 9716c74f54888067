"""The report of an ablation: ``results.json``, ``results.md`` and ``curves.png``, from what each run's
pretraining wrote and what the harness measured (``ablation_run.json``); per variant the mean and the sample
standard deviation over seeds (0 with one seed)."""

from __future__ import annotations

import json
import math
import shlex
import statistics
from pathlib import Path
from typing import NamedTuple

from briskbert.files import file_digest, write_atomic
from briskbert.training.experiments.ablation import AblationSettings, tokenizer_definition, wall_time_s
from briskbert.training.tasks.pretraining_settings import parse_config_overrides


class Column(NamedTuple):
    key: str  # in each run's numbers
    header: str
    digits: int
    better: str | None = None  # "lower", "higher", or None (a property, not a score)
    scale: float = 1.0


COLUMNS = (
    Column("parameters", "parameters (M)", 3, scale=1e-6),
    Column("non_embedding_parameters", "non-embedding (M)", 3, scale=1e-6),
    Column("eval_loss", "val. MLM loss", 3, "lower"),
    Column("eval_accuracy", "val. accuracy (%)", 1, "higher", scale=100),
    Column("eval_perplexity", "val. perplexity", 1, "lower"),
    Column("train_tokens_per_s", "train tokens/s", 0, "higher"),
    Column("peak_rss_mib", "peak RSS (MiB)", 0, "lower"),
    Column("wall_time_s", "wall time (s)", 0, "lower"),
)
PROBE_COLUMN = Column("probe_metric", "probe accuracy (%)", 1, "higher", scale=100)
# What the report takes from each run's all_results.json.
RUN_RESULTS = ("eval_loss", "eval_accuracy", "eval_perplexity", "train_tokens_per_s", "train_runtime_s",
               "train_steps", "tokens_seen")  # fmt: skip


def count_parameters(model_dir: Path) -> tuple[int, int]:
    """(all, non-embedding) parameters of a saved model, from its safetensors headers. Embeddings are the token,
    position and token-type tables and an untied output decoder; tied weights are stored (and counted) once."""
    from safetensors import safe_open

    total = embedding = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="numpy") as weights:
            for name in weights.keys():
                size = math.prod(weights.get_slice(name).get_shape())
                total += size
                module = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else ""
                if module.endswith("_embeddings") or name.endswith("decoder.weight"):
                    embedding += size
    return total, total - embedding


def validation_curve(history: list[dict]) -> list[dict]:
    """Validation loss at each evaluation, with the training tokens and wall time reached by then (interpolated
    between the logged training steps around it)."""
    import numpy as np

    train = [e for e in history if "tokens_seen" in e]
    steps = [0] + [e["step"] for e in train]
    tokens = [0] + [e["tokens_seen"] for e in train]
    seconds = [0.0] + [e.get("elapsed_s", float("nan")) for e in train]
    return [
        {
            "step": e["step"],
            "tokens": float(np.interp(e["step"], steps, tokens)),
            "elapsed_s": float(np.interp(e["step"], steps, seconds)),
            "eval_loss": e["eval_loss"],
        }
        for e in history
        if "eval_loss" in e
    ]


def read_run(run_dir: Path, record: dict, probe: bool) -> dict:
    """One run's numbers: what pretraining wrote plus what the harness measured."""
    results = json.loads((run_dir / "all_results.json").read_text())
    history = (run_dir / "log_history.jsonl").read_text().splitlines()
    parameters, non_embedding = count_parameters(run_dir / "final")
    run = {
        "parameters": parameters,
        "non_embedding_parameters": non_embedding,
        **{key: results.get(key) for key in RUN_RESULTS},
        "peak_rss_mib": max((segment["peak_rss_mib"] for segment in record["segments"]), default=None),
        "wall_time_s": round(wall_time_s(record), 1),
        "processes": len(record["segments"]),
        "command": shlex.join(["briskbert", *record["argv"]]),
        "curve": validation_curve([json.loads(line) for line in history if line.strip()]),
    }
    if probe:
        probe_results = json.loads((run_dir / "probe" / "all_results.json").read_text())
        run["probe_metric"] = probe_results.get("eval_accuracy")
    return run


def spread(values: list) -> dict:
    """Mean and sample standard deviation over seeds (0 with one seed), leaving out missing values."""
    numbers = [float(v) for v in values if v is not None]
    if not numbers:
        return {"mean": None, "spread": None, "n": 0}
    deviation = statistics.stdev(numbers) if len(numbers) > 1 else 0.0
    return {"mean": statistics.fmean(numbers), "spread": deviation, "n": len(numbers)}


def build_results(settings: AblationSettings, records: dict) -> dict:
    columns = COLUMNS + ((PROBE_COLUMN,) if settings.finetune_probe else ())
    shared_tokenizer = tokenizer_definition(settings.tokenizer_dir)
    variants = []
    for variant in settings.variants:
        runs = {}
        for seed in settings.seeds:
            run_dir = Path(settings.output_dir) / variant.name / f"seed{seed}"
            runs[str(seed)] = read_run(run_dir, records[variant.name, seed], bool(settings.finetune_probe))
            # another tokenizer would not be a fair comparison
            if tokenizer_definition(run_dir / "final") != shared_tokenizer:
                raise RuntimeError(
                    f"{variant.name} seed {seed} saved a tokenizer that differs from the shared one in "
                    f"{settings.tokenizer_dir}."
                )
        variants.append(
            {
                "name": variant.name,
                "config_name": variant.config_name,
                "config_overrides": parse_config_overrides(variant.overrides),
                "summary": {c.key: spread([run[c.key] for run in runs.values()]) for c in columns},
                "runs": runs,
            }
        )
    best = {}  # per scored column, the variant(s) with the best mean
    for column in (c for c in columns if c.better):
        means = {v["name"]: v["summary"][column.key]["mean"] for v in variants}
        if means := {name: mean for name, mean in means.items() if mean is not None}:
            target = (min if column.better == "lower" else max)(means.values())
            best[column.key] = [name for name, mean in means.items() if mean == target]
    probe = settings.finetune_probe and {
        "train_file": settings.finetune_probe,
        "validation_file": settings.probe_validation_file,
        "extra_args": shlex.split(settings.probe_args),
        "metric": "eval_accuracy",
    }
    return {
        "variants": variants,
        "best": best,
        "seeds": settings.seeds,
        "max_train_steps": settings.steps,
        "max_train_seconds": settings.max_train_seconds,
        "tokenizer": {
            "path": str(settings.tokenizer_dir),
            "sha256": file_digest(settings.tokenizer_dir / "tokenizer.json"),
        },
        "probe": probe or None,
    }


def markdown_table(results: dict) -> str:
    """The per-variant table, best mean per scored column in bold."""
    keys = {key for v in results["variants"] for key in v["summary"]}
    columns = [c for c in (*COLUMNS, PROBE_COLUMN) if c.key in keys]
    lines = [
        "| variant | config | " + " | ".join(c.header for c in columns) + " |",
        "|---|---|" + "---:|" * len(columns),
    ]
    for variant in results["variants"]:
        config = variant["config_name"] + "".join(
            f", {k}={v}" for k, v in variant["config_overrides"].items()
        )
        cells = []
        for column in columns:
            summary = variant["summary"][column.key]
            text = "–" if summary["mean"] is None else f"{summary['mean'] * column.scale:,.{column.digits}f}"
            if summary["n"] > 1 and column.better is not None:
                text += f" ± {summary['spread'] * column.scale:,.{column.digits}f}"
            best = variant["name"] in results["best"].get(column.key, [])
            cells.append(f"**{text}**" if best and summary["mean"] is not None else text)
        lines.append(f"| {variant['name']} | {config} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_curves(results: dict, path: Path) -> None:
    """Validation loss against training tokens and against wall time: the mean over seeds per variant,
    the band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for variant in results["variants"]:
        curves = [run["curve"] for run in variant["runs"].values() if run["curve"]]
        if not curves:
            continue
        length = min(len(curve) for curve in curves)
        loss = np.array([[point["eval_loss"] for point in curve[:length]] for curve in curves])
        for axis, key in zip(axes, ("tokens", "elapsed_s")):
            x = np.mean([[point[key] for point in curve[:length]] for curve in curves], axis=0)
            (line,) = axis.plot(x, loss.mean(0), marker="o", markersize=3, label=variant["name"])
            if len(curves) > 1:
                axis.fill_between(x, loss.min(0), loss.max(0), color=line.get_color(), alpha=0.15)
    axes[0].set_xlabel("training tokens")
    axes[1].set_xlabel("wall time (s)")
    for axis in axes:
        axis.set_ylabel("validation MLM loss")
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend()
    seeds = len(results["seeds"])
    band = " (band: min–max)" if seeds > 1 else ""
    fig.suptitle(f"Validation MLM loss, mean over {seeds} seed{'s' if seeds > 1 else ''}{band}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(settings: AblationSettings, records: dict) -> dict:
    """Write ``results.json``, ``results.md`` and ``curves.png`` into the output folder; returns the results."""
    results, out = build_results(settings, records), Path(settings.output_dir)
    write_atomic(out / "results.json", json.dumps(results, indent=2))
    seeds = ", ".join(map(str, results["seeds"]))
    table = (
        "# Ablation results\n\n"
        + markdown_table(results)
        + f"\nMean ± sample standard deviation over the seeds {seeds}; **bold**: the best mean per column "
        "(parameter counts are not scored). Validation metrics are over all masked tokens of the validation "
        "set, masked identically for every run; wall time is the whole pretraining process; peak RSS is "
        f"the process's maximum resident memory. Every run used the tokenizer with sha256 "
        f"{results['tokenizer']['sha256'][:16]}….\n"
    )
    write_atomic(out / "results.md", table)
    plot_curves(results, out / "curves.png")
    return results
