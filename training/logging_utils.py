"""Training logs: a JSON-lines history, ``all_results.json``, a PNG of the curves, optional trackers."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

LOG_FILE = "log_history.jsonl"
RESULTS_FILE = "all_results.json"
CURVES_FILE = "training_curves.png"

# Evaluation entries that are sizes, not quality: kept in the logs, left out of plots and card metrics.
COUNTER_SUFFIXES = ("_runtime_s", "_tokens", "_samples", "_count", "_examples")

TRACKER_MODULES = {"tensorboard": "tensorboard", "trackio": "trackio"}


def parse_report_to(report_to: str) -> list[str]:
    """``--report_to`` ("none", "all", or a comma-separated list) -> tracker names; clear error if missing."""
    names = [name.strip() for name in (report_to or "none").split(",") if name.strip()]
    if names in ([], ["none"]):
        return []
    if names == ["all"]:
        return [n for n, mod in TRACKER_MODULES.items() if importlib.util.find_spec(mod) is not None]
    for name in names:
        if name not in TRACKER_MODULES:
            raise ValueError(
                f"--report_to {name!r} is not supported; use none, all, {', '.join(TRACKER_MODULES)}."
            )
        if importlib.util.find_spec(TRACKER_MODULES[name]) is None:
            raise ValueError(f"--report_to {name} needs the {name} package: pip install {name}.")
    return names


class MetricsLog:
    """Append-only history of log entries (dicts with a ``step``), mirrored to ``log_history.jsonl``."""

    def __init__(self, output_dir: str | Path, enabled: bool):
        self.path = Path(output_dir) / LOG_FILE
        self.enabled = enabled
        self.history: list[dict] = []

    def restore(self, up_to_step: int) -> None:
        """On resume: keep the entries up to the checkpoint's step (a killed run may have logged more)."""
        if self.path.is_file():
            entries = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
            self.history = [e for e in entries if e.get("step", 0) <= up_to_step]
        if self.enabled:
            self.path.write_text("".join(json.dumps(e) + "\n" for e in self.history))

    def start_fresh(self) -> None:
        self.history = []
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")

    def append(self, entry: dict) -> None:
        self.history.append(entry)
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(entry) + "\n")


def write_results(output_dir: str | Path, results: dict) -> None:
    Path(output_dir, RESULTS_FILE).write_text(json.dumps(results, indent=2, sort_keys=True))


def plot_curves(history: list[dict], path: str | Path) -> None:
    """Training loss and every ``eval_*`` metric against the optimizer step (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(e["step"], e["loss"]) for e in history if "loss" in e and math.isfinite(e["loss"])]
    eval_keys = sorted(
        {k for e in history for k in e if k.startswith("eval_") and not k.endswith(COUNTER_SUFFIXES)}
    )
    loss_keys = [k for k in eval_keys if k.endswith("loss")]
    other_keys = [k for k in eval_keys if k not in loss_keys and not k.endswith("perplexity")]
    fig, axes = plt.subplots(1, 2 if other_keys else 1, figsize=(11 if other_keys else 6, 4), squeeze=False)
    ax = axes[0][0]
    if train:
        ax.plot(*zip(*train), label="train loss", linewidth=1)
    for key in loss_keys:
        points = [(e["step"], e[key]) for e in history if key in e]
        ax.plot(*zip(*points), marker="o", label=key.replace("eval_", "validation "))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title("Training and validation loss")
    ax.grid(alpha=0.3)
    ax.legend()
    if other_keys:
        ax = axes[0][1]
        for key in other_keys:
            points = [(e["step"], e[key]) for e in history if key in e]
            ax.plot(*zip(*points), marker="o", label=key.replace("eval_", "validation "))
        ax.set_xlabel("optimizer step")
        ax.set_title("Validation metrics")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
