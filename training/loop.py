"""The one Accelerate training loop every briskbert script uses.

A script parses its flags (``add_training_arguments`` adds the shared ones, named as in transformers'
``*_no_trainer.py`` examples), builds its task pieces and calls :func:`run`::

    import argparse
    from briskbert.training import add_training_arguments, create_accelerator, run, seed_everything

    parser = add_training_arguments(argparse.ArgumentParser())
    parser.add_argument("--my_task_flag", ...)
    args = parser.parse_args()
    accelerator = create_accelerator(args)        # before data preparation: main_process_first() etc.
    seed_everything(args.seed)                    # before building the model, so its init is seeded
    model = ...; tokenizer = ...; train_ds = ...; eval_ds = ...
    result = run(
        args, accelerator=accelerator, model=model, tokenizer=tokenizer,
        train_dataset=train_ds, data_collator=collator,            # list[dict] -> dict of tensors
        eval_dataset=eval_ds, eval_collator=eval_collator,          # default: data_collator
        evaluate_fn=my_evaluate,                                    # (model, dataloader, accelerator) -> dict
        count_items=lambda batch: (batch["labels"] != -100).sum(),  # items the model's loss is a mean over
        card_facts={"task": "fill-mask", "pipeline_tag": "fill-mask", "datasets": [...]},
    )

What :func:`run` does, in order: validates the arguments and data (clear errors before any step),
builds AdamW with weight decay skipping biases, norms and embeddings by module type
(:mod:`training.optim`), the learning-rate schedule (``--lr_scheduler_type``, transformers names and
``warmup_stable_decay``), prepares model/optimizer/data with Accelerate (DDP, FSDP, DeepSpeed, mixed
precision), optionally resumes from a checkpoint, then trains:

* **Accumulation with window-level loss normalisation.** One optimizer step consumes a window of
  ``--gradient_accumulation_steps`` micro-batches (fewer at the end of an epoch). The window is fetched
  first, ``count_items`` is summed over it and over all processes (``N``), and each micro-batch's loss is
  rescaled to ``mean_loss * n_batch / N`` (= summed loss / ``N``), so the gradient equals that of one big
  batch whatever the split into micro-batches and processes. Gradient sync is skipped with
  ``accelerator.no_sync`` on all but the last micro-batch of the window (what ``accelerator.accumulate``
  does, but aligned with the window instead of a global counter). Models therefore only need to return
  a loss that is a mean over the items ``count_items`` counts (their own ``num_items_in_batch`` support is
  not needed). Then gradient clipping (``--max_grad_norm``), optimizer and scheduler step.
* **Data order** is a shuffle seeded by ``seed + epoch`` (independent of process count; Accelerate shards
  it). If the collator (or train dataset) has ``set_epoch(epoch)`` it is called at every epoch start, so
  masking can be redrawn each time a sequence is seen while staying reproducible.
* **Logging** every ``--logging_steps``: loss (token/item weighted over the logging interval), learning
  rate, gradient norm, tokens/s, tokens seen -> ``log_history.jsonl``, trackers (``--report_to``), tqdm.
* **Evaluation** every ``--eval_steps`` (and at the end): the model is put in eval mode and
  ``evaluate_fn(model, eval_dataloader, accelerator)`` is called under ``torch.no_grad()``; use
  :func:`evaluation_loop` inside it (it gathers per-example tensors with ``gather_for_metrics``). Keys are
  prefixed with ``eval_``. Without ``evaluate_fn`` the loop reports the item-weighted ``eval_loss``.
  With ``--metric_for_best_model`` the best model is saved to ``output_dir/best``.
* **Checkpoints** every ``--checkpointing_steps`` (an int or ``epoch``) to ``output_dir/step_{N}``, keeping
  the last ``--checkpoints_total_limit``: model, optimizer, scheduler, RNG states and the data position
  (:mod:`training.checkpointing`). ``--resume_from_checkpoint PATH|latest`` continues exactly: on CPU the
  resumed run produces the same subsequent losses as an uninterrupted one.
* **Interruption**: Ctrl-C or SIGTERM finishes the current optimizer step, saves a checkpoint and returns
  (``TrainResult.interrupted``); a second Ctrl-C aborts immediately.
* **Outputs** in ``--output_dir``: ``all_results.json`` (final metrics, steps, tokens, wall time),
  ``log_history.jsonl`` (one JSON object per logged step/evaluation), ``training_curves.png``, and
  ``final/``: ``save_pretrained`` model (config, safetensors, remote code), tokenizer and
  ``training_facts.json`` (schema in :mod:`training.facts`), loadable with ``trust_remote_code=True``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler

from .checkpointing import load_checkpoint, resolve_checkpoint, save_checkpoint
from .facts import framework_versions, hardware_description, write_training_facts
from .logging_utils import (
    COUNTER_SUFFIXES,
    CURVES_FILE,
    MetricsLog,
    parse_report_to,
    plot_curves,
    write_results,
)
from .optim import SCHEDULER_NAMES, create_optimizer, create_scheduler


# --------------------------------------------------------------------------------------------- arguments
def add_training_arguments(parser: argparse.ArgumentParser, **defaults) -> argparse.ArgumentParser:
    """Add the shared optimisation / checkpoint / logging flags; ``defaults`` overrides any default."""
    g = parser.add_argument_group("training (shared loop)")
    g.add_argument(
        "--output_dir",
        type=str,
        required="output_dir" not in defaults,
        help="Where checkpoints, logs, curves and the final model folder go.",
    )
    g.add_argument("--per_device_train_batch_size", type=int, default=8)
    g.add_argument("--per_device_eval_batch_size", type=int, default=8)
    g.add_argument("--learning_rate", type=float, default=5e-5)
    g.add_argument("--weight_decay", type=float, default=0.0)
    g.add_argument("--adam_beta1", type=float, default=0.9)
    g.add_argument("--adam_beta2", type=float, default=0.999)
    g.add_argument("--adam_epsilon", type=float, default=1e-8)
    g.add_argument("--num_train_epochs", type=float, default=3.0)
    g.add_argument(
        "--max_train_steps",
        type=int,
        default=None,
        help="Total optimizer steps; overrides --num_train_epochs.",
    )
    g.add_argument("--gradient_accumulation_steps", type=int, default=1)
    g.add_argument("--lr_scheduler_type", type=str, default="linear", choices=SCHEDULER_NAMES)
    g.add_argument("--num_warmup_steps", type=int, default=None)
    g.add_argument(
        "--warmup_ratio",
        type=float,
        default=None,
        help="Warm-up as a fraction of total steps (instead of --num_warmup_steps).",
    )
    g.add_argument(
        "--decay_ratio",
        type=float,
        default=0.2,
        help="warmup_stable_decay only: fraction of steps spent in the final decay.",
    )
    g.add_argument("--max_grad_norm", type=float, default=1.0, help="0 disables clipping.")
    g.add_argument("--seed", type=int, default=42)
    g.add_argument(
        "--mixed_precision",
        type=str,
        default=None,
        choices=["no", "fp16", "bf16", "fp8"],
        help="Default: what `accelerate config`/launch says, else no.",
    )
    g.add_argument(
        "--checkpointing_steps",
        type=str,
        default=None,
        help="Save a checkpoint every N optimizer steps, or 'epoch'.",
    )
    g.add_argument(
        "--checkpoints_total_limit", type=int, default=None, help="Keep only the last K checkpoints."
    )
    g.add_argument(
        "--resume_from_checkpoint", type=str, default=None, help="A checkpoint folder or 'latest'."
    )
    g.add_argument(
        "--report_to", type=str, default="none", help="none, all, tensorboard, trackio (comma list)."
    )
    g.add_argument("--gradient_checkpointing", action="store_true")
    g.add_argument("--torch_compile", action="store_true")
    g.add_argument("--eval_steps", type=int, default=None, help="Evaluate every N steps (and at the end).")
    g.add_argument(
        "--metric_for_best_model",
        type=str,
        default=None,
        help="e.g. eval_loss or eval_accuracy: keep the best model in output_dir/best.",
    )
    g.add_argument(
        "--greater_is_better",
        type=lambda s: s.lower() in ("1", "true", "yes"),
        default=None,
        help="Default: false for *loss / *perplexity metrics, true otherwise.",
    )
    g.add_argument("--logging_steps", type=int, default=10)
    g.add_argument("--dataloader_num_workers", type=int, default=0)
    parser.set_defaults(**defaults)
    return parser


def validate_training_arguments(args) -> None:
    """Contradictory or impossible values -> ``ValueError`` naming the flag, before anything is built."""

    def bad(msg):
        raise ValueError(msg)

    for name in (
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "logging_steps",
    ):
        if getattr(args, name) < 1:
            bad(f"--{name} must be >= 1, got {getattr(args, name)}.")
    if args.learning_rate <= 0:
        bad(f"--learning_rate must be > 0, got {args.learning_rate}.")
    if args.max_train_steps is not None and args.max_train_steps < 1:
        bad(f"--max_train_steps must be >= 1, got {args.max_train_steps}.")
    if args.max_train_steps is None and args.num_train_epochs <= 0:
        bad(f"--num_train_epochs must be > 0 (or give --max_train_steps), got {args.num_train_epochs}.")
    if args.num_warmup_steps is not None and args.warmup_ratio is not None:
        bad("Give either --num_warmup_steps or --warmup_ratio, not both.")
    if args.warmup_ratio is not None and not 0 <= args.warmup_ratio < 1:
        bad(f"--warmup_ratio must be in [0, 1), got {args.warmup_ratio}.")
    if args.num_warmup_steps is not None and args.num_warmup_steps < 0:
        bad(f"--num_warmup_steps must be >= 0, got {args.num_warmup_steps}.")
    if args.checkpointing_steps is not None and args.checkpointing_steps != "epoch":
        if not str(args.checkpointing_steps).isdigit() or int(args.checkpointing_steps) < 1:
            bad(
                f"--checkpointing_steps must be a positive integer or 'epoch', got {args.checkpointing_steps!r}."
            )
    if args.eval_steps is not None and args.eval_steps < 1:
        bad(f"--eval_steps must be >= 1, got {args.eval_steps}.")
    if args.greater_is_better is not None and args.metric_for_best_model is None:
        bad("--greater_is_better needs --metric_for_best_model.")
    if not 0 < args.decay_ratio <= 1:
        bad(f"--decay_ratio must be in (0, 1], got {args.decay_ratio}.")
    parse_report_to(args.report_to)


# ------------------------------------------------------------------------------------------ accelerator
def create_accelerator(args):
    """The Accelerator for this run (mixed precision, trackers, torch.compile via the dynamo plugin)."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, TorchDynamoPlugin

    kwargs = {}
    if args.torch_compile:
        kwargs["dynamo_plugin"] = TorchDynamoPlugin(backend="inductor", dynamic=True)
    trackers = parse_report_to(args.report_to)
    # Several processes without a GPU (`accelerate launch --multi_gpu --num_processes 2` on a CPU machine,
    # i.e. torchrun): Accelerate only picks its multi-CPU (gloo) mode when told it runs on CPU.
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        kwargs["cpu"] = True
    return Accelerator(
        mixed_precision=args.mixed_precision,
        log_with=trackers or None,
        project_dir=args.output_dir,
        dataloader_config=DataLoaderConfiguration(even_batches=True),
        **kwargs,
    )


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    from accelerate.utils import set_seed

    set_seed(seed)


# ------------------------------------------------------------------------------------------------ data
class EpochShuffleSampler(Sampler[int]):
    """A permutation of ``range(n)`` seeded by ``seed + epoch``: reproducible, and the same whatever the
    number of processes (Accelerate shards the batches of this one order)."""

    def __init__(self, num_samples: int, seed: int):
        self.num_samples, self.seed, self.epoch = num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.num_samples, generator=generator).tolist())


def _dataloader(dataset, collator, batch_size, sampler, num_workers) -> DataLoader:
    # An own generator: creating an iterator then never draws from the global torch RNG, which would
    # otherwise shift dropout masks between an uninterrupted and a resumed run.
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collator,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0),
    )


def _count_tokens(batch: dict) -> int:
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    if "input_ids" in batch:
        return batch["input_ids"].numel()
    return 0


def count_examples(batch: dict) -> int:
    """Default ``count_items``: examples in the batch (right for losses averaged over examples)."""
    first = next(v for v in batch.values() if isinstance(v, torch.Tensor))
    return first.shape[0]


# ------------------------------------------------------------------------------------------ evaluation
def evaluation_loop(model, dataloader, accelerator, batch_fn: Callable[[dict, object], dict]) -> dict:
    """Forward every eval batch under ``no_grad``; ``batch_fn(batch, outputs)`` returns a dict of
    per-example tensors (first dimension = examples of the batch, same trailing shape on every process),
    which are gathered across processes with ``accelerator.gather_for_metrics`` (duplicates added to
    even out the last batch are dropped) and concatenated on CPU."""
    collected: dict[str, list] = {}
    with torch.no_grad():
        for batch in dataloader:
            outputs = model(**batch)
            stats = accelerator.gather_for_metrics(batch_fn(batch, outputs))
            for key, value in stats.items():
                collected.setdefault(key, []).append(value.detach().float().cpu())
    return {key: torch.cat(values) for key, values in collected.items()}


def evaluate_loss(model, dataloader, accelerator, count_items) -> dict:
    """Default evaluation: the loss weighted by ``count_items`` over the whole evaluation set."""
    totals = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
    with torch.no_grad():
        for batch in dataloader:
            n = float(count_items(batch))
            if n:
                totals += torch.tensor(
                    [model(**batch).loss.item() * n, n], dtype=torch.float64, device=accelerator.device
                )
    totals = accelerator.reduce(totals, "sum")
    return {"loss": (totals[0] / totals[1]).item() if totals[1] else float("nan")}


# ---------------------------------------------------------------------------------------------- result
@dataclass
class TrainResult:
    global_step: int
    metrics: dict  # final evaluation (eval_*), empty without an eval dataset
    output_dir: Path
    final_dir: Path | None  # None when interrupted
    interrupted: bool = False
    history: list = field(default_factory=list)
    best_metric: dict | None = None


class _StopRequest:
    """First Ctrl-C / SIGTERM: stop after the current optimizer step (checkpoint saved). Second: abort."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread
                pass
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ------------------------------------------------------------------------------------------------- run
def run(
    args,
    *,
    model,
    train_dataset,
    data_collator,
    tokenizer=None,
    eval_dataset=None,
    eval_collator=None,
    evaluate_fn: Callable | None = None,
    count_items: Callable[[dict], int] | None = None,
    card_facts: dict | None = None,
    accelerator=None,
    callbacks: Iterable[Callable[[dict], None]] = (),
) -> TrainResult:
    """Train ``model`` on ``train_dataset`` as described in the module docstring.

    ``count_items(batch)`` counts what the model's loss is a mean over (masked tokens for MLM, examples
    for classification; default: examples). ``callbacks`` are called with each train log entry (a dict
    with ``step``, ``loss``, ...) after every optimizer step, on the main process.
    """
    validate_training_arguments(args)
    count_items = count_items or count_examples
    _validate_datasets(train_dataset, eval_dataset, args)
    accelerator = accelerator or create_accelerator(args)
    if accelerator.distributed_type.value == "DEEPSPEED" and args.gradient_accumulation_steps > 1:
        raise ValueError(
            "DeepSpeed runs its own gradient accumulation, which this loop's window-normalised "
            "accumulation does not drive: use --gradient_accumulation_steps 1 with a larger "
            "--per_device_train_batch_size or more processes (or DDP/FSDP)."
        )
    seed_everything(args.seed)
    output_dir = Path(args.output_dir)
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)

    # Data.
    iterable = isinstance(train_dataset, IterableDataset)
    sampler = None if iterable else EpochShuffleSampler(len(train_dataset), args.seed)
    train_dataloader = _dataloader(
        train_dataset, data_collator, args.per_device_train_batch_size, sampler, args.dataloader_num_workers
    )
    eval_dataloader = None
    if eval_dataset is not None:
        eval_dataloader = _dataloader(
            eval_dataset,
            eval_collator or data_collator,
            args.per_device_eval_batch_size,
            None,
            args.dataloader_num_workers,
        )

    # Model and optimizer.
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = create_optimizer(
        model,
        args.learning_rate,
        args.weight_decay,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    if eval_dataloader is not None:
        eval_dataloader = accelerator.prepare(eval_dataloader)

    # Steps. The scheduler is stepped once per optimizer step (not prepared: Accelerate would step it
    # num_processes times) and registered so checkpoints hold its state.
    if iterable:
        if args.max_train_steps is None:
            raise ValueError("A streaming (iterable) training set has no length: give --max_train_steps.")
        steps_per_epoch = None
        max_train_steps = args.max_train_steps
    else:
        steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
        max_train_steps = args.max_train_steps or math.ceil(args.num_train_epochs * steps_per_epoch)
    warmup = args.num_warmup_steps
    if warmup is None:
        warmup = round((args.warmup_ratio or 0.0) * max_train_steps)
    scheduler = create_scheduler(optimizer, args.lr_scheduler_type, warmup, max_train_steps, args.decay_ratio)
    accelerator.register_for_checkpointing(scheduler)

    metric_name = args.metric_for_best_model
    if metric_name and not metric_name.startswith("eval_"):
        metric_name = "eval_" + metric_name
    greater_is_better = args.greater_is_better
    if metric_name and greater_is_better is None:
        greater_is_better = not metric_name.endswith(("loss", "perplexity"))
    if metric_name and eval_dataloader is None:
        raise ValueError(f"--metric_for_best_model {args.metric_for_best_model} needs an evaluation dataset.")

    # Resume.
    state = {
        "global_step": 0,
        "epoch": 0,
        "batches_in_epoch": 0,
        "tokens_seen": 0,
        "items_seen": 0,
        "examples_seen": 0,
        "wall_time_s": 0.0,
        "best_metric": None,
        "best_step": None,
    }
    log = MetricsLog(output_dir, accelerator.is_main_process)
    checkpoint = (
        resolve_checkpoint(args.resume_from_checkpoint, output_dir) if args.resume_from_checkpoint else None
    )
    if checkpoint is not None:
        accelerator.print(f"Resuming from {checkpoint}")
        state.update(load_checkpoint(accelerator, checkpoint))
        log.restore(state["global_step"])
    else:
        log.start_fresh()

    trackers = parse_report_to(args.report_to)
    if trackers:
        accelerator.init_trackers(output_dir.name or "briskbert", config=_tracker_config(args))

    def evaluate() -> dict:
        model.eval()
        start = time.time()
        with torch.no_grad():
            if evaluate_fn is not None:
                raw = evaluate_fn(model, eval_dataloader, accelerator)
            else:
                raw = evaluate_loss(model, eval_dataloader, accelerator, count_items)
        model.train()
        metrics = {(k if k.startswith("eval_") else f"eval_{k}"): float(v) for k, v in raw.items()}
        metrics["eval_runtime_s"] = round(time.time() - start, 3)
        return metrics

    def save_best(metrics: dict) -> None:
        value = metrics.get(metric_name)
        if value is None:
            raise KeyError(
                f"--metric_for_best_model {metric_name} is not among the evaluation metrics "
                f"{sorted(metrics)}."
            )
        best = state["best_metric"]
        if best is None or (value > best if greater_is_better else value < best):
            state["best_metric"], state["best_step"] = value, state["global_step"]
            _save_model_folder(accelerator, model, tokenizer, output_dir / "best")

    def checkpoint_now() -> None:
        save_checkpoint(
            accelerator,
            output_dir,
            dict(state, wall_time_s=state["wall_time_s"] + elapsed()),
            args.checkpoints_total_limit,
        )

    # Train.
    total_batch = (
        args.per_device_train_batch_size * accelerator.num_processes * args.gradient_accumulation_steps
    )
    accelerator.print(
        f"Training: {len(train_dataset) if not iterable else 'streamed'} examples, {max_train_steps} steps, "
        f"global batch {total_batch} ({args.per_device_train_batch_size} x {accelerator.num_processes} processes "
        f"x {args.gradient_accumulation_steps} accumulation)"
    )
    from tqdm.auto import tqdm

    progress = tqdm(
        total=max_train_steps,
        initial=state["global_step"],
        disable=not accelerator.is_local_main_process,
        desc="training",
        dynamic_ncols=True,
    )
    t0 = time.time()

    def elapsed() -> float:
        return time.time() - t0

    every = int(args.checkpointing_steps) if str(args.checkpointing_steps or "").isdigit() else None
    window_totals = torch.zeros(
        4, dtype=torch.float64
    )  # loss*items, items, tokens, examples (this log interval)
    interval_start, last_metrics, interrupted = time.time(), {}, False
    model.train()
    with _StopRequest() as stop:
        while state["global_step"] < max_train_steps and not interrupted:
            epoch = state["epoch"]
            for obj in (sampler, data_collator, train_dataset):
                if hasattr(obj, "set_epoch"):
                    obj.set_epoch(epoch)
            dataloader = train_dataloader
            if state["batches_in_epoch"]:
                dataloader = accelerator.skip_first_batches(train_dataloader, state["batches_in_epoch"])
            if hasattr(dataloader, "set_epoch"):  # Accelerate's loaders re-set the sampler's epoch on iter()
                dataloader.set_epoch(epoch)
            batches = iter(dataloader)
            exhausted = False
            while state["global_step"] < max_train_steps:
                window = []
                for _ in range(args.gradient_accumulation_steps):
                    try:
                        window.append(next(batches))
                    except StopIteration:
                        exhausted = True
                        break
                if not window:
                    break
                state["batches_in_epoch"] += len(window)
                loss_sum, counts = _train_window(accelerator, model, window, count_items)
                if args.max_grad_norm and args.max_grad_norm > 0:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                else:
                    grad_norm = None
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                state["global_step"] += 1
                progress.update(1)

                totals = accelerator.reduce(
                    torch.tensor([loss_sum, *counts], dtype=torch.float64, device=accelerator.device), "sum"
                ).cpu()
                window_totals += totals
                state["items_seen"] += int(totals[1])
                state["tokens_seen"] += int(totals[2])
                state["examples_seen"] += int(totals[3])
                step = state["global_step"]
                entry = None
                if step % args.logging_steps == 0 or step == max_train_steps:
                    now = time.time()
                    entry = {
                        "step": step,
                        "epoch": round(
                            epoch
                            + (state["batches_in_epoch"] / len(train_dataloader) if not iterable else 0.0),
                            4,
                        ),
                        "loss": float(window_totals[0] / window_totals[1])
                        if window_totals[1]
                        else float("nan"),
                        "learning_rate": scheduler.get_last_lr()[0],
                        "grad_norm": float(grad_norm) if grad_norm is not None else None,
                        "tokens_per_s": round(float(window_totals[2]) / max(now - interval_start, 1e-9), 1),
                        "tokens_seen": state["tokens_seen"],
                        "elapsed_s": round(state["wall_time_s"] + elapsed(), 2),
                    }
                    window_totals.zero_()
                    interval_start = now
                    log.append(entry)
                    progress.set_postfix(loss=f"{entry['loss']:.4f}", lr=f"{entry['learning_rate']:.2e}")
                    if trackers:
                        accelerator.log(
                            {f"train/{k}": v for k, v in entry.items() if k != "step" and v is not None},
                            step=step,
                        )
                if entry is not None and accelerator.is_main_process:
                    for callback in callbacks:
                        callback(entry)

                if (
                    eval_dataloader is not None
                    and args.eval_steps
                    and step % args.eval_steps == 0
                    and step != max_train_steps
                ):
                    last_metrics = evaluate()
                    log.append({"step": step, **last_metrics})
                    if trackers:
                        accelerator.log(last_metrics, step=step)
                    if metric_name:
                        save_best(last_metrics)
                if every and step % every == 0:
                    checkpoint_now()
                if _stop_everywhere(accelerator, stop.requested):
                    accelerator.print(f"\nInterrupted: saving a checkpoint at step {step} before exiting.")
                    if not (every and step % every == 0):
                        checkpoint_now()
                    interrupted = True
                    break
                if exhausted:
                    break
            if interrupted or state["global_step"] >= max_train_steps and not exhausted:
                break
            # The data ran out: next epoch.
            if state["batches_in_epoch"] == 0:
                raise ValueError("The training data yielded no batches.")
            state["epoch"] += 1
            state["batches_in_epoch"] = 0
            if args.checkpointing_steps == "epoch":
                checkpoint_now()
    progress.close()
    state["wall_time_s"] += elapsed()

    if interrupted:
        _finish_logs(accelerator, log, output_dir)
        if trackers:
            accelerator.end_training()
        return TrainResult(state["global_step"], last_metrics, output_dir, None, True, log.history)

    if eval_dataloader is not None:
        last_metrics = evaluate()
        log.append({"step": state["global_step"], **last_metrics})
        if trackers:
            accelerator.log(last_metrics, step=state["global_step"])
        if metric_name:
            save_best(last_metrics)
    best = (
        {"name": metric_name, "value": state["best_metric"], "step": state["best_step"]}
        if metric_name
        else None
    )

    train_losses = [e["loss"] for e in log.history if "loss" in e]
    epochs = None if iterable else state["epoch"] + state["batches_in_epoch"] / len(train_dataloader)
    results = {
        **last_metrics,
        "train_loss": train_losses[-1] if train_losses else None,
        "train_steps": state["global_step"],
        "epochs": round(epochs, 4) if epochs is not None else None,
        "tokens_seen": state["tokens_seen"],
        "examples_seen": state["examples_seen"],
        "train_runtime_s": round(state["wall_time_s"], 2),
        "train_tokens_per_s": round(state["tokens_seen"] / max(state["wall_time_s"], 1e-9), 1),
        "global_batch_size": total_batch,
        "best_metric": best,
    }
    final_dir = output_dir / "final"
    facts = {
        "metrics": {k: v for k, v in last_metrics.items() if not k.endswith(COUNTER_SUFFIXES)},
        "best_metric": best,
        "train_steps": state["global_step"],
        "epochs": results["epochs"],
        "tokens_seen": state["tokens_seen"],
        "examples_seen": state["examples_seen"],
        "global_batch_size": total_batch,
        "learning_rate": args.learning_rate,
        "lr_scheduler_type": args.lr_scheduler_type,
        "num_warmup_steps": warmup,
        "weight_decay": args.weight_decay,
        "mixed_precision": accelerator.mixed_precision,
        "seed": args.seed,
        "hardware": hardware_description(accelerator),
        "num_processes": accelerator.num_processes,
        "wall_time_s": round(state["wall_time_s"], 1),
        "framework_versions": framework_versions(),
        **(card_facts or {}),
    }
    _save_model_folder(accelerator, model, tokenizer, final_dir, facts)
    if accelerator.is_main_process:
        write_results(output_dir, results)
    _finish_logs(accelerator, log, output_dir)
    if trackers:
        accelerator.end_training()
    return TrainResult(state["global_step"], last_metrics, output_dir, final_dir, False, log.history, best)


# ------------------------------------------------------------------------------------------- internals
def _train_window(accelerator, model, window: list[dict], count_items) -> tuple[float, list[float]]:
    """Forward/backward over one accumulation window; returns (sum of loss*items, [items, tokens, examples])."""
    counts = [float(count_items(b)) for b in window]
    total = accelerator.reduce(
        torch.tensor(sum(counts), dtype=torch.float64, device=accelerator.device), "sum"
    )
    total = float(total)
    if total == 0:
        raise ValueError(
            "An accumulation window has no items to compute a loss on (count_items returned 0 for "
            "every batch, e.g. no masked tokens)."
        )
    loss_sum = 0.0
    for i, (batch, n) in enumerate(zip(window, counts)):
        last = i == len(window) - 1
        sync = contextlib.nullcontext() if last else accelerator.no_sync(model)
        with sync:
            outputs = model(**batch)
            loss = outputs.loss
            if n == 0:
                loss = loss.nan_to_num() * 0.0
            # Mean over this batch's items -> share of the window's sum. DDP averages gradients over
            # processes, hence the factor num_processes. Accelerate divides by its own accumulation
            # steps (1 here, as this loop does the accumulation).
            accelerator.backward(loss * (n / total) * accelerator.num_processes)
        loss_sum += float(loss.detach()) * n
    tokens = sum(_count_tokens(b) for b in window)
    examples = sum(count_examples(b) for b in window)
    return loss_sum, [sum(counts), float(tokens), float(examples)]


def _stop_everywhere(accelerator, requested: bool) -> bool:
    if accelerator.num_processes == 1:
        return requested
    flag = accelerator.reduce(torch.tensor(float(requested), device=accelerator.device), "max")
    return bool(flag.item())


def _save_model_folder(accelerator, model, tokenizer, folder: Path, facts: dict | None = None) -> None:
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    # Sharded engines need their weights gathered; otherwise save_pretrained handles tied weights itself.
    sharded = accelerator.distributed_type.value in ("FSDP", "DEEPSPEED")
    state_dict = accelerator.get_state_dict(model) if sharded else None
    if accelerator.is_main_process:
        folder.mkdir(parents=True, exist_ok=True)
        unwrapped.save_pretrained(folder, state_dict=state_dict, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        if facts is not None:
            write_training_facts(folder, facts)
    accelerator.wait_for_everyone()


def _finish_logs(accelerator, log: MetricsLog, output_dir: Path) -> None:
    if accelerator.is_main_process and log.history:
        try:
            plot_curves(log.history, output_dir / CURVES_FILE)
        except Exception as error:  # a plot must never cost the run
            accelerator.print(f"Could not draw {CURVES_FILE}: {error}")


def _tracker_config(args) -> dict:
    return {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}


def _validate_datasets(train_dataset, eval_dataset, args) -> None:
    if train_dataset is None:
        raise ValueError("No training dataset was given.")
    if not isinstance(train_dataset, IterableDataset):
        n = len(train_dataset)
        if n == 0:
            raise ValueError("The training dataset is empty.")
        if n < args.per_device_train_batch_size:
            raise ValueError(
                f"The training dataset has {n} examples, fewer than one batch "
                f"(--per_device_train_batch_size {args.per_device_train_batch_size}); add data or lower the batch size."
            )
    if eval_dataset is not None and not isinstance(eval_dataset, IterableDataset) and len(eval_dataset) == 0:
        raise ValueError("The evaluation dataset is empty.")
