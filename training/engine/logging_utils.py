"""Training logs: the :class:`MetricsLog` every entry goes through (JSON lines, console, trackers), the PNG of
the curves and the progress of the steps."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from time import monotonic

from tqdm.auto import tqdm

from briskbert.files import atomic_file, write_atomic

logger = logging.getLogger(__name__)

LOG_FILE = "log_history.jsonl"
RESULTS_FILE = "all_results.json"
CURVES_FILE = "training_curves.png"

# Evaluation entries that are sizes, not quality: kept in the logs, left out of plots and card metrics.
COUNTER_SUFFIXES = ("_runtime_s", "_tokens", "_samples", "_count", "_examples")


class MetricsLog:
    """Log entries (dicts with a ``step``), mirrored to ``log_history.jsonl`` and the ``tracker``, evaluations
    printed (on the main process), and the sums of the steps since the last training entry."""

    def __init__(self, output_dir: str | Path, is_main_process: bool, tracker=None):
        self.path = Path(output_dir) / LOG_FILE
        self.is_main_process = is_main_process
        self.tracker = tracker
        self.history: list[dict] = []
        self.sums, self.start = [0.0, 0.0, 0.0], time.time()

    def add(self, loss_sum: float, items: float, tokens: float) -> None:
        self.sums = [total + value for total, value in zip(self.sums, (loss_sum, items, tokens))]

    def log_training(self, state, batches_per_epoch: int | None, learning_rate: float, grad_norm) -> dict:
        """Append the entry of the steps up to ``state`` (a ``TrainingState``) and start the next interval."""
        (loss_sum, items, tokens), now = self.sums, time.time()
        epoch = state.epoch + (state.batches_in_epoch / batches_per_epoch if batches_per_epoch else 0.0)
        entry = {
            "step": state.global_step,
            "epoch": round(epoch, 4),
            "loss": loss_sum / items if items else float("nan"),
            "learning_rate": learning_rate,
            "grad_norm": float(grad_norm) if grad_norm is not None else None,
            "tokens_per_s": round(tokens / max(now - self.start, 1e-9), 1),
            "tokens_seen": state.tokens_seen,
            "elapsed_s": round(state.wall_time_s, 2),
        }
        self.sums, self.start = [0.0, 0.0, 0.0], now
        self.append(entry)
        return entry

    def restore(self, up_to_step: int) -> None:
        """Keep the entries up to the checkpoint's step (0: a new run), dropping a killed write's partial line."""
        entries = []
        lines = self.path.read_text().splitlines() if self.path.is_file() else []
        for number, line in enumerate(lines, start=1):
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning(f"{self.path}: line {number} is not complete JSON (a killed write?); dropped.")
        self.history = [e for e in entries if e.get("step", 0) <= up_to_step]
        if self.is_main_process:
            write_atomic(self.path, "".join(json.dumps(e) + "\n" for e in self.history))

    def append(self, entry: dict) -> None:
        self.history.append(entry)
        if self.tracker is not None:
            values = {key: value for key, value in entry.items() if key != "step" and value is not None}
            self.tracker.log(values, step=entry["step"])
        if not self.is_main_process:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")
        shown = [
            f"{key} {value:.4g}"
            for key, value in entry.items()
            if key.startswith("eval_")
            and not key.endswith(COUNTER_SUFFIXES)
            and isinstance(value, (int, float))
        ]
        if shown:  # "step 40 | eval_loss 2.3451 | eval_accuracy 0.8125"
            tqdm.write(" | ".join([f"step {entry['step']}", *shown]))  # above a progress bar

    def last_evaluation(self) -> dict:
        """The metrics of the latest evaluation (without ``step``), empty when there was none."""
        for entry in reversed(self.history):
            if any(key.startswith("eval_") for key in entry):
                return {key: value for key, value in entry.items() if key != "step"}
        return {}


def progress_bar(total: int, initial: int = 0, disable: bool = False, stream=None):
    """tqdm's bar on a terminal; plain :class:`ProgressLines` in a file or a pipe (no carriage returns)."""
    stream = stream or sys.stderr
    if disable or (hasattr(stream, "isatty") and stream.isatty()):
        return tqdm(
            total=total, initial=initial, disable=disable, desc="training", dynamic_ncols=True, file=stream
        )
    return ProgressLines(total, initial, stream)


class ProgressLines:
    """``training: step 30/60 (50%), 12 s, about 12 s left, loss 2.31`` every tenth of the run (and at least every
    5 minutes); a step's postfix is set before its ``update``."""

    def __init__(self, total: int, initial: int, stream):
        self.total, self.n, self.first, self.stream = total, initial, initial, stream
        self.start = self.last_line = monotonic()
        self.every, self.postfix = max(1, math.ceil(total / 10)), ""

    def set_postfix(self, refresh: bool = True, **values) -> None:
        self.postfix = ", ".join(f"{key} {value}" for key, value in values.items())

    def update(self, n: int = 1) -> None:
        self.n, now = self.n + n, monotonic()
        if self.n % self.every and self.n < self.total and now - self.last_line < 300:
            return
        self.last_line, elapsed = now, now - self.start
        line = (
            f"training: step {self.n}/{self.total} ({100 * self.n // max(self.total, 1)}%), {elapsed:.0f} s"
        )
        if self.first < self.n < self.total:
            line += f", about {elapsed / (self.n - self.first) * (self.total - self.n):.0f} s left"
        print(line + (f", {self.postfix}" if self.postfix else ""), file=self.stream, flush=True)

    def close(self) -> None:
        pass


def _series(history: list[dict], key: str) -> list[tuple[int, float]]:
    return [
        (e["step"], e[key]) for e in history if isinstance(e.get(key), (int, float)) and math.isfinite(e[key])
    ]


def _is_size(key: str) -> bool:
    """A count or size, not a quality (``eval_runtime_s``, SQuAD's ``eval_total``, ``eval_num_unanswered``)."""
    name = key.removeprefix("eval_")
    return key.endswith(COUNTER_SUFFIXES) or name.rpartition("_")[2] == "total" or name.startswith("num_")


def curve_figure(history: list[dict]):
    """The losses, then a panel per validation metric evaluated more than once (at most six), by optimizer step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    keys = sorted({k for e in history for k in e if k.startswith("eval_") and not _is_size(k)})
    losses = [k for k in keys if k.endswith("loss")]
    metrics = [k for k in keys if not k.endswith(("loss", "perplexity")) and len(_series(history, k)) >= 2]
    metrics = sorted(metrics, key=lambda k: (k.count("_"), k))[:6]
    panels = 1 + len(metrics)
    columns = min(panels, 3)
    rows = math.ceil(panels / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.6 * rows), squeeze=False)
    loss_axis = axes.flat[0]
    train = _series(history, "loss")
    if train:  # markers while the points are few enough to see (a lone point is no line)
        loss_axis.plot(
            *zip(*train), label="training loss", linewidth=1, marker="." if len(train) <= 40 else None
        )
    for key in losses:
        loss_axis.plot(*zip(*_series(history, key)), marker="o", label=key.replace("eval_", "validation "))
    loss_axis.set_title("Training and validation loss")
    loss_axis.set_ylabel("loss")
    if loss_axis.get_legend_handles_labels()[0]:
        loss_axis.legend(loc="best")  # where it covers the fewest points (a lone validation point included)
    for axis, key in zip(axes.flat[1:], metrics):
        axis.plot(*zip(*_series(history, key)), marker="o", color="tab:green")
        axis.set_title(f"Validation {key.removeprefix('eval_')}")
        axis.set_ylabel(key.removeprefix("eval_"))
    for axis in axes.flat[panels:]:
        axis.set_visible(False)
    for axis in axes.flat[:panels]:
        axis.set_xlabel("optimizer step")
        axis.set_xlim(left=0)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_curves(history: list[dict], path: str | Path) -> None:
    """Write :func:`curve_figure` as a PNG, whole or not at all."""
    import matplotlib.pyplot as plt

    fig = curve_figure(history)
    try:
        with atomic_file(path) as partial:
            fig.savefig(partial, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
