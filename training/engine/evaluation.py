"""Evaluation during and at the end of a run: the task's metrics (``eval_`` prefixed, with ``eval_loss`` from
the model's own loss when the task reports none) and the best model kept in ``output_dir/best``."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch

from briskbert.errors import SettingError
from briskbert.training.engine.checkpointing import TrainingState, save_model_folder
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.engine.logging_utils import MetricsLog
from briskbert.training.engine.task import Task


def evaluation_loop(model, dataloader, accelerator, batch_fn: Callable[[dict, object], dict]) -> dict:
    """``batch_fn(batch, outputs)``'s per-example tensors over every eval batch, gathered and concatenated on CPU."""
    collected: dict[str, list] = {}
    with torch.no_grad():
        for batch in dataloader:
            outputs = model(**batch)
            stats = accelerator.gather_for_metrics(batch_fn(batch, outputs))
            for key, value in stats.items():
                collected.setdefault(key, []).append(value.detach().float().cpu())
    return {key: torch.cat(values) for key, values in collected.items()}


def majority_class(labels: list) -> tuple[object, float]:
    """The most frequent of ``labels`` and its share: the accuracy of answering it for every example."""
    label, count = Counter(labels).most_common(1)[0]
    return label, count / len(labels)


def not_above_baseline(name: str, value: float, baseline: float, baseline_is: str) -> str | None:
    """One line (a task's ``verdict``) when metric ``name`` is not above what ``baseline_is`` scores."""
    if value > baseline:
        return None
    return f"{name} {value:.4f} is not above {baseline:.4f}, what {baseline_is} scores on the same evaluation data"


class _LossRecorder:
    """A forward hook summing the model's own loss weighted by ``count_items`` (``eval_loss`` beside metrics)."""

    def __init__(self, count_items, device):
        self.count_items = count_items
        self.totals = torch.zeros(2, dtype=torch.float64, device=device)

    def __call__(self, module, args, kwargs, outputs) -> None:
        loss = getattr(outputs, "loss", None)
        items = float(self.count_items(kwargs)) if loss is not None else 0.0
        if items:
            self.totals[0] += loss.detach().double() * items
            self.totals[1] += items


class Evaluation:
    """Evaluate, log, track the best model: the one place where the loop does all four."""

    def __init__(self, config: TrainingConfig, dataloader, task: Task, tokenizer=None):
        self.dataloader, self.task, self.tokenizer = dataloader, task, tokenizer
        self.metric_name, self.higher_is_better = config.metric_name, config.higher_metric_is_better
        self.best_dir = Path(config.output_dir) / "best"

    def __call__(self, accelerator, model, state: TrainingState, log: MetricsLog) -> None:
        metrics = self.evaluate(accelerator, model)
        log.append({"step": state.global_step, **metrics})
        if self.metric_name is None:
            return
        value = metrics.get(self.metric_name)
        if value is None:
            raise SettingError(
                "metric_for_best_model",
                f"{self.metric_name} is not among the evaluation metrics {sorted(metrics)}; pick one of them.",
            )
        best = state.best_metric
        if math.isfinite(value) and (
            best is None or (value > best if self.higher_is_better else value < best)
        ):
            state.best_metric, state.best_step = value, state.global_step
            save_model_folder(accelerator, model, self.tokenizer, self.best_dir)

    def evaluate(self, accelerator, model) -> dict:
        """The task's evaluation in eval mode without gradients -> ``eval_*`` metrics (+ ``eval_loss``)."""
        start = time.time()
        recorder = _LossRecorder(self.task.count_items, accelerator.device)
        hook = model.register_forward_hook(recorder, with_kwargs=True)
        model.eval()
        try:
            with torch.no_grad():
                raw = self.task.evaluate(model, self.dataloader, accelerator)
                if raw is None:  # the loss alone, which the recorder sums
                    for batch in self.dataloader:
                        model(**batch)
                    raw = {}
        finally:
            hook.remove()
            model.train()
        raw = dict(raw)
        if "loss" not in raw and "eval_loss" not in raw:
            loss_sum, items = accelerator.reduce(recorder.totals, "sum").tolist()
            if items or not raw:
                raw["loss"] = loss_sum / items if items else float("nan")
        metrics = {(k if k.startswith("eval_") else f"eval_{k}"): float(v) for k, v in raw.items()}
        metrics["eval_runtime_s"] = round(time.time() - start, 3)
        return metrics
