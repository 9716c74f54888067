"""The report of an ablation: ``results.json``, ``results.md`` and ``curves.png``, from what each run's
pretraining wrote and what the harness measured (``ablation_run.json``); per variant the mean and the sample
standard deviation over seeds (0 with one seed)."""

from __future__ import annotations

import json
import math
import shlex
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from briskbert.files import write_atomic
from briskbert.training.experiments.ablation import (
    HISTORY_FILE,
    PROBE_DIR,
    RESULTS_FILE,
    AblationPlan,
    RunRecord,
    read_history,
    tokenizer_sha256,
)


@dataclass(frozen=True)
class Column:
    """A column of the table: the per-run key, its header, how to print it, and which way is better."""

    key: str
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
RUN_RESULTS = (
    "eval_loss", "eval_accuracy", "eval_perplexity", "train_tokens_per_s", "train_runtime_s", "train_steps",
    "tokens_seen",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------- one run
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


def read_run(run_dir: Path, record: RunRecord, probe_metric: str | None) -> dict:
    """One run's numbers: what pretraining wrote plus what the harness measured."""
    results = json.loads((run_dir / RESULTS_FILE).read_text())
    history = read_history(run_dir / HISTORY_FILE)
    parameters, non_embedding = count_parameters(run_dir / "final")
    run = {
        "parameters": parameters,
        "non_embedding_parameters": non_embedding,
        **{key: results.get(key) for key in RUN_RESULTS},
        "peak_rss_mib": record.peak_rss_mib,
        "wall_time_s": round(record.wall_time_s, 1),
        "processes": len(record.segments),
        "tokenizer_sha256": tokenizer_sha256(run_dir / "final"),
        "command": shlex.join(["briskbert", *record.argv]),
        "curve": validation_curve(history),
    }
    if probe_metric is not None:
        probe_results = json.loads((run_dir / PROBE_DIR / RESULTS_FILE).read_text())
        run["probe_metric"] = probe_results.get(probe_metric)
    return run


# ------------------------------------------------------------------------------------------ aggregation
def spread(values: list) -> dict:
    """Mean and sample standard deviation over seeds (None values, e.g. a missing metric, are left out)."""
    numbers = [float(v) for v in values if v is not None]
    if not numbers:
        return {"mean": None, "spread": None, "n": 0}
    deviation = statistics.stdev(numbers) if len(numbers) > 1 else 0.0
    return {"mean": statistics.fmean(numbers), "spread": deviation, "n": len(numbers)}


def best_variants(summaries: dict[str, dict], columns: tuple[Column, ...]) -> dict[str, list[str]]:
    """Per scored column, the variant(s) with the best mean."""
    best = {}
    for column in columns:
        means = {
            name: s[column.key]["mean"] for name, s in summaries.items() if s[column.key]["mean"] is not None
        }
        if column.better is None or not means:
            continue
        target = (min if column.better == "lower" else max)(means.values())
        best[column.key] = [name for name, mean in means.items() if mean == target]
    return best


def build_results(plan: AblationPlan, records: dict, tokenizer_folder: Path) -> dict:
    probe_metric = plan.probe.metric if plan.probe else None
    columns = COLUMNS + ((PROBE_COLUMN,) if plan.probe else ())
    runs = {
        variant.name: {
            seed: read_run(plan.run_dir(variant, seed), records[variant.name, seed], probe_metric)
            for seed in plan.seeds
        }
        for variant in plan.variants
    }
    shared_sha256 = tokenizer_sha256(tokenizer_folder)
    for name, by_seed in runs.items():  # a run on another tokenizer would not be a fair comparison
        for seed, run in by_seed.items():
            if run["tokenizer_sha256"] != shared_sha256:
                raise RuntimeError(
                    f"{name} seed {seed} saved a tokenizer that differs from the shared one "
                    f"(sha256 {run['tokenizer_sha256'][:12]} vs {shared_sha256[:12]})."
                )
    summaries = {
        name: {c.key: spread([run[c.key] for run in by_seed.values()]) for c in columns}
        for name, by_seed in runs.items()
    }
    return {
        "variants": [
            {
                "name": variant.name,
                "config_name": variant.config_name,
                "config_overrides": variant.overrides,
                "summary": summaries[variant.name],
                "runs": {str(seed): run for seed, run in runs[variant.name].items()},
            }
            for variant in plan.variants
        ],
        "best": best_variants(summaries, columns),
        "seeds": plan.seeds,
        "max_train_steps": plan.max_train_steps,
        "max_train_seconds": plan.max_train_seconds,
        "pretrain_args": plan.pretrain_args,
        "tokenizer": {"path": str(tokenizer_folder), "sha256": shared_sha256},
        "probe": asdict(plan.probe) if plan.probe else None,
    }


# --------------------------------------------------------------------------------------------- outputs
def _cell(summary: dict, column: Column, best: bool) -> str:
    if summary["mean"] is None:
        return "–"
    text = f"{summary['mean'] * column.scale:,.{column.digits}f}"
    if summary["n"] > 1 and column.better is not None:
        text += f" ± {summary['spread'] * column.scale:,.{column.digits}f}"
    return f"**{text}**" if best else text


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
        cells = [
            _cell(variant["summary"][c.key], c, variant["name"] in results["best"].get(c.key, []))
            for c in columns
        ]
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
    fig.suptitle(
        f"Validation MLM loss, mean over {seeds} seed{'s' if seeds > 1 else ''}"
        + (" (band: min–max)" if seeds > 1 else "")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    plan: AblationPlan, records: dict[tuple[str, int], RunRecord], tokenizer_folder: Path
) -> dict:
    """Write ``results.json``, ``results.md`` and ``curves.png`` into the plan's output folder."""
    results = build_results(plan, records, tokenizer_folder)
    write_atomic(plan.output_dir / "results.json", json.dumps(results, indent=2))
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
    write_atomic(plan.output_dir / "results.md", table)
    plot_curves(results, plan.output_dir / "curves.png")
    return results
