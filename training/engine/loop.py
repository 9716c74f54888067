"""The one Accelerate training loop every job runs: ``run(task, config)``. A step's loss is the mean over the
items (``Task.count_items``) of its whole window on all processes: one big batch however it is split."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from accelerate.utils import set_seed as seed_everything
from torch.utils.data import DataLoader, IterableDataset, Sampler

from briskbert.errors import SettingError
from briskbert.files import write_atomic
from briskbert.training.engine.checkpointing import (
    RunIdentity,
    TrainingDiverged,
    TrainingState,
    check_finite_weights,
    check_output_dir,
    check_steps_left,
    checkpoint_to_resume,
    clear_previous_run,
    last_good_checkpoint,
    load_checkpoint,
    refuse_non_finite_weights,
    remove_partial_folders,
    save_checkpoint,
    save_model_folder,
    weights_file,
)
from briskbert.training.engine.config import TrainingConfig, TrainingSetupError
from briskbert.training.engine.evaluation import Evaluation
from briskbert.training.engine.facts import (
    FACTS_FILE,
    BestMetric,
    RunFacts,
    TrainingFacts,
    framework_versions,
    hardware_description,
)
from briskbert.training.engine.logging_utils import (
    COUNTER_SUFFIXES,
    CURVES_FILE,
    RESULTS_FILE,
    MetricsLog,
    plot_curves,
    progress_bar,
)
from briskbert.training.engine.optim import create_optimizer, create_scheduler
from briskbert.training.engine.signals import SignalCatcher, report
from briskbert.training.engine.task import Task, TaskInputs, count_examples


def create_accelerator(config: TrainingConfig):
    """The run's Accelerator, as ``config`` asks for it."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, TorchDynamoPlugin

    kwargs = {}
    if config.torch_compile:
        kwargs["dynamo_plugin"] = TorchDynamoPlugin(backend="inductor", dynamic=True)
    # torchrun on a CPU machine: Accelerate only picks its multi-CPU (gloo) mode when told it runs on CPU
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        kwargs["cpu"] = True
    return Accelerator(
        mixed_precision=config.mixed_precision,
        log_with=None if config.report_to == "none" else config.report_to.split(","),
        project_dir=config.output_dir,
        # non_blocking: a pinned batch's copy to the GPU overlaps the step (make_dataloader pins them)
        dataloader_config=DataLoaderConfiguration(even_batches=True, non_blocking=True),
        **kwargs,
    )


@dataclass
class TrainResult:
    global_step: int
    metrics: dict  # final evaluation (eval_*), empty without an eval dataset
    output_dir: Path
    final_dir: Path
    history: list = field(default_factory=list)
    best_metric: dict | None = None
    facts: TrainingFacts | None = None  # what final/training_facts.json holds


def run(
    task: Task, config: TrainingConfig, *, accelerator=None, callbacks: Iterable[Callable[[dict], None]] = ()
) -> TrainResult:
    """Train what ``task`` builds; ``callbacks`` get each training log entry on the main process."""
    # An output_dir holding another run is refused before any model or data is built.
    check_output_dir(config.output_dir, config.resume_from_checkpoint, config.overwrite_output_dir)
    accelerator = accelerator or create_accelerator(config)
    seed_everything(config.seed)  # before building: the model's initialisation is seeded
    inputs = task.build(accelerator, config)
    check_datasets(inputs.train_dataset, inputs.eval_dataset, config)
    check_finite_weights(inputs.model, "the model to train")
    seed_everything(config.seed)  # dropout and data draws do not depend on what building drew
    output_dir = Path(config.output_dir)
    identity = RunIdentity.of_run(
        config, inputs.model, inputs.train_dataset, inputs.eval_dataset, accelerator.num_processes
    )
    checkpoint = checkpoint_to_resume(config, identity)
    parts = prepare(config, accelerator, inputs)
    check_steps_left(config, checkpoint, parts.max_train_steps)  # before the folder is touched
    model, optimizer, scheduler = parts.model, parts.optimizer, parts.scheduler
    evaluation = None
    if parts.eval_dataloader is not None:
        evaluation = Evaluation(config, parts.eval_dataloader, task, inputs.tokenizer)
    log, state = _open_run(config, accelerator, checkpoint, inputs)
    progress = progress_bar(parts.max_train_steps, state.global_step, not accelerator.is_local_main_process)
    windows = accumulation_windows(
        parts.train_dataloader, state, config.gradient_accumulation_steps, accelerator, parts.epoch_listeners
    )
    eval_every = config.eval_interval(parts.max_train_steps)
    log_every = config.log_interval(parts.max_train_steps)
    stop_signal, last_checkpoint = 0, checkpoint
    # The loss, gradient norm and counters stay on the device; the host reads them (and waits for the device)
    # only to log, evaluate or checkpoint. Until then it runs ahead, queueing steps.
    guard = DivergenceGuard(accelerator, optimizer, output_dir, state.global_step)
    # The steps' loss sum, items, tokens and examples since the host last read them (_read).
    unread = torch.zeros(4, dtype=torch.float64, device=accelerator.device)
    max_norm = config.max_grad_norm if config.max_grad_norm > 0 else math.inf  # 0: measured, not clipped
    model.train()
    with SignalCatcher() as signals:
        try:
            while state.global_step < parts.max_train_steps:
                step_start = time.perf_counter()  # the run's time counts training steps only
                totals, grad_norm = _train_step(
                    accelerator, model, optimizer, next(windows), task.count_items, guard, max_norm
                )
                scheduler.step()  # once per optimizer step (not prepared: Accelerate would step it per process)
                state.global_step += 1
                state.wall_time_s += time.perf_counter() - step_start
                unread += totals
                step, last_step = state.global_step, state.global_step == parts.max_train_steps
                if step % log_every == 0 or last_step:
                    _read(unread, state, log, guard)
                    lr = scheduler.get_last_lr()[0]
                    entry = log.log_training(state, parts.batches_per_epoch, lr, grad_norm)
                    progress.set_postfix(loss=f"{entry['loss']:.4f}", lr=f"{lr:.2e}", refresh=False)
                    if accelerator.is_main_process:
                        for callback in callbacks:
                            callback(entry)
                progress.update(1)
                if evaluation is not None and (last_step or (eval_every and step % eval_every == 0)):
                    _read(unread, state, log, guard)
                    evaluation(accelerator, model, state, log)
                stop_signal = signals.received(accelerator)
                if stop_signal or _checkpoint_due(config.checkpointing_steps, state, parts.batches_per_epoch):
                    _read(unread, state, log, guard)
                    refuse_non_finite_weights(accelerator, model, f"step_{step}", output_dir)
                    last_checkpoint = save_checkpoint(
                        accelerator, output_dir, state, identity, config.checkpoints_total_limit
                    )
                if stop_signal:
                    break
        except Exception:
            _finish_logs(accelerator, log, output_dir)  # a run stopped by an error still draws its curves
            raise
        finally:
            progress.close()
    if stop_signal:
        _finish_logs(accelerator, log, output_dir)
        processes, main = accelerator.num_processes, accelerator.is_main_process
        raise report(stop_signal, last_checkpoint, state.global_step, processes, main)
    return _finish(config, accelerator, parts, inputs.tokenizer, state, log, task)


def _open_run(
    config, accelerator, checkpoint: Path | None, inputs: TaskInputs
) -> tuple[MetricsLog, TrainingState]:
    """Prepare the output folder, restore the checkpoint and the log, start the trackers."""
    output_dir = Path(config.output_dir)
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        remove_partial_folders(output_dir)
    if checkpoint is None and config.overwrite_output_dir:  # where the models and tokenizer came from stays
        loaded = [*inputs.model.modules(), inputs.tokenizer]
        sources = [obj.name_or_path for obj in loaded if getattr(obj, "name_or_path", None)]
        clear_previous_run(output_dir, sources, accelerator.is_main_process)
    accelerator.wait_for_everyone()
    tracker = accelerator if accelerator.log_with else None
    log = MetricsLog(output_dir, accelerator.is_main_process, tracker=tracker)
    state = TrainingState()
    if checkpoint is not None:
        accelerator.print(f"Resuming from {checkpoint}")
        state = load_checkpoint(accelerator, checkpoint)
        check_finite_weights(inputs.model, weights_file(checkpoint), "resume_from_checkpoint")
    log.restore(state.global_step)
    if tracker is not None:
        scalars = {k: v for k, v in asdict(config).items() if isinstance(v, (int, float, str, bool))}
        accelerator.init_trackers(output_dir.resolve().name or "briskbert", config=scalars)
    return log, state


def check_datasets(train_dataset, eval_dataset, config: TrainingConfig) -> None:
    """Refuse training and evaluation sets the run cannot use, naming the setting to change."""
    if isinstance(train_dataset, IterableDataset):
        if config.max_train_steps is None:
            raise SettingError(
                "max_train_steps", "is needed: a streaming (iterable) training set has no length."
            )
        if config.checkpointing_steps == "epoch":
            raise SettingError(
                "checkpointing_steps", "must be a number: a streaming training set has no epochs."
            )
    elif len(train_dataset) == 0:
        raise TrainingSetupError("The training dataset is empty.")
    elif len(train_dataset) < config.per_device_train_batch_size:
        raise SettingError(
            "per_device_train_batch_size",
            f"{config.per_device_train_batch_size} is more than the {len(train_dataset)} examples of the "
            "training dataset (fewer than one batch); add data or lower the batch size.",
        )
    if eval_dataset is None and config.metric_for_best_model:
        raise SettingError("metric_for_best_model", f"{config.metric_for_best_model} needs evaluation data.")
    if eval_dataset is not None and not isinstance(eval_dataset, IterableDataset) and len(eval_dataset) == 0:
        raise TrainingSetupError("The evaluation dataset is empty.")


@dataclass
class Prepared:
    """What the loop builds before the first step, prepared by Accelerate."""

    model: object
    optimizer: object
    scheduler: object
    train_dataloader: object
    eval_dataloader: object
    max_train_steps: int
    batches_per_epoch: int | None  # this process's batches per epoch; None for streamed data
    epoch_listeners: list  # sampler, collator, dataset: whichever has set_epoch(epoch)


def prepare(config: TrainingConfig, accelerator, inputs: TaskInputs) -> Prepared:
    """Dataloaders, optimizer, schedule; everything handed to Accelerate."""
    model, train_dataset, data_collator = inputs.model, inputs.train_dataset, inputs.data_collator
    if accelerator.distributed_type.value == "DEEPSPEED" and config.gradient_accumulation_steps > 1:
        raise SettingError(
            "gradient_accumulation_steps",
            "must be 1 under DeepSpeed, which runs its own gradient accumulation that this loop's "
            "window-normalised accumulation does not drive: use a larger per_device_train_batch_size or more "
            "processes (or DDP/FSDP).",
        )
    streamed = isinstance(train_dataset, IterableDataset)
    sampler = None if streamed else EpochShuffleSampler(len(train_dataset), config.seed)
    workers = config.dataloader_num_workers
    train_dataloader = make_dataloader(
        train_dataset, data_collator, config.per_device_train_batch_size, sampler, workers
    )
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    betas = (config.adam_beta1, config.adam_beta2)
    optimizer = create_optimizer(model, config.learning_rate, config.weight_decay, betas, config.adam_epsilon)
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    eval_dataloader = None
    if inputs.eval_dataset is not None:
        eval_collator = inputs.eval_collator or data_collator
        batch_size = config.per_device_eval_batch_size
        eval_dataloader = make_dataloader(inputs.eval_dataset, eval_collator, batch_size, None, workers)
        eval_dataloader = accelerator.prepare(eval_dataloader)
    batches_per_epoch = None if streamed else len(train_dataloader)
    max_train_steps = config.max_train_steps  # check_datasets refused a streamed set without it
    if max_train_steps is None:
        steps_per_epoch = math.ceil(batches_per_epoch / config.gradient_accumulation_steps)
        max_train_steps = math.ceil(config.num_train_epochs * steps_per_epoch)
    warmup = config.num_warmup_steps_for(max_train_steps)
    scheduler = create_scheduler(
        optimizer, config.lr_scheduler_type, warmup, max_train_steps, config.decay_ratio
    )
    accelerator.register_for_checkpointing(scheduler)  # checkpoints hold its state
    accelerator.print(
        f"Training: {'streamed' if streamed else len(train_dataset)} examples, {max_train_steps} steps, "
        f"global batch {_global_batch_size(config, accelerator)} ({config.per_device_train_batch_size} x "
        f"{accelerator.num_processes} processes x {config.gradient_accumulation_steps} accumulation)"
    )
    listeners = [obj for obj in (sampler, data_collator, train_dataset) if hasattr(obj, "set_epoch")]
    loaders = (train_dataloader, eval_dataloader)
    return Prepared(model, optimizer, scheduler, *loaders, max_train_steps, batches_per_epoch, listeners)


def _global_batch_size(config: TrainingConfig, accelerator) -> int:
    return config.per_device_train_batch_size * accelerator.num_processes * config.gradient_accumulation_steps


class EpochShuffleSampler(Sampler[int]):
    """A permutation of ``range(n)`` seeded by ``seed + epoch``, the same whatever the number of processes."""

    def __init__(self, num_samples: int, seed: int):
        self.num_samples, self.seed, self.epoch = num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.num_samples, generator=generator).tolist())


def make_dataloader(dataset, collator, batch_size, sampler, num_workers: int | None) -> DataLoader:
    """Batches prepared in ``num_workers`` processes (default: up to 4 per process on a GPU machine, none on CPU,
    whose cores run the model); the same batches whatever their number."""
    if num_workers is None:
        num_workers = 0
        if torch.cuda.is_available():
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            num_workers = max(0, min(4, cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1")) - 1))
    # An own generator: an iterator never draws from the global RNG (a resume keeps the same dropout masks).
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collator,
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available(),
        generator=torch.Generator().manual_seed(0),
    )


def accumulation_windows(
    dataloader, state: TrainingState, accumulation_steps: int, accelerator, epoch_listeners: Iterable = ()
) -> Iterator[list[dict]]:
    """The micro-batches of one optimizer step at a time, without end, from and moving ``state``'s data position."""
    while True:
        for listener in epoch_listeners:
            listener.set_epoch(state.epoch)
        batches = dataloader
        if state.batches_in_epoch:
            batches = accelerator.skip_first_batches(dataloader, state.batches_in_epoch)
        if hasattr(batches, "set_epoch"):  # Accelerate's loaders re-set their sampler's epoch on iter()
            batches.set_epoch(state.epoch)
        iterator = iter(batches)
        while window := list(itertools.islice(iterator, accumulation_steps)):
            state.batches_in_epoch += len(window)
            yield window
        state.epoch += 1
        state.batches_in_epoch = 0


def _on_device(value, device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=torch.float64)
    return torch.full((), float(value), dtype=torch.float64, device=device)


def _count_tokens(batch: dict) -> torch.Tensor | int:
    if "attention_mask" in batch:
        return batch["attention_mask"].sum()
    return batch["input_ids"].numel() if "input_ids" in batch else 0


def _train_step(accelerator, model, optimizer, window, count_items, guard, max_norm):
    """One optimizer step over ``window`` -> (all processes' ``[loss x items, items, tokens, examples]``, the
    gradient norm), both left on the device."""
    device = accelerator.device
    counts = [_on_device(count_items(batch), device) for batch in window]
    total = accelerator.reduce(torch.stack(counts).sum(), "sum")
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    for i, (batch, items) in enumerate(zip(window, counts)):
        # Sync gradients across processes only on the last micro-batch of the window.
        sync = contextlib.nullcontext() if i == len(window) - 1 else accelerator.no_sync(model)
        with sync:
            loss = model(**batch).loss
            loss = torch.where(items > 0, loss, torch.zeros_like(loss))  # a mean over no items is NaN
            # This batch's mean loss -> its share of the window's sum; DDP averages over processes.
            accelerator.backward(loss * (items / total).to(loss.dtype) * accelerator.num_processes)
        loss_sum += loss.detach() * items
    tokens = sum(_on_device(_count_tokens(batch), device) for batch in window)
    examples = _on_device(sum(count_examples(batch) for batch in window), device)
    totals = accelerator.reduce(torch.stack([loss_sum, torch.stack(counts).sum(), tokens, examples]), "sum")
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_norm)
    guard.flag(totals, grad_norm)  # a NaN/inf loss or gradient (or no items) is never applied
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return totals, grad_norm


class DivergenceGuard:
    """Nothing non-finite is applied, without waiting for the device at each step: :meth:`flag` marks a bad step
    there, the optimizer skips it and every later one (``found_inf``), and :meth:`raise_if_diverged` reports it."""

    def __init__(self, accelerator, optimizer, output_dir: Path, first_step: int):
        self.optimizer = getattr(optimizer, "optimizer", optimizer)  # inside Accelerate's wrapper
        self.scaled = accelerator.scaler is not None
        self.on_device = self.scaled or getattr(self.optimizer, "_step_supports_amp_scaling", False)
        self.output_dir = output_dir
        self.step = torch.full((), float(first_step), dtype=torch.float64, device=accelerator.device)
        self.first = torch.zeros(4, dtype=torch.float64, device=accelerator.device)  # step (0: none), totals

    def flag(self, totals, grad_norm) -> None:
        """Check a step's ``totals`` (loss x items, items, ...) and ``grad_norm`` before it is applied."""
        self.step += 1
        loss_sum, items = totals[0], totals[1]
        norm = torch.zeros_like(loss_sum)
        if grad_norm is not None and not self.scaled:
            norm = grad_norm.to(torch.float64)
        bad = ~torch.isfinite(loss_sum) | ~torch.isfinite(norm) | (items == 0)
        record = torch.stack([self.step, loss_sum, items, norm])
        self.first = torch.where(bad & (self.first[0] == 0), record, self.first)
        if not self.on_device:
            self.raise_if_diverged()
        elif not self.scaled:  # the scaler sets found_inf itself
            self.optimizer.found_inf = (self.first[0] != 0).to(torch.float32)

    def raise_if_diverged(self) -> None:
        step, loss_sum, items, norm = self.first.tolist()
        if step == 0:
            return
        if items == 0:
            raise TrainingSetupError(
                "An accumulation window has no items to compute a loss on (count_items returned 0 for "
                "every batch, e.g. no masked tokens)."
            )
        name, value = ("loss", loss_sum) if not math.isfinite(loss_sum) else ("gradient norm", norm)
        raise TrainingDiverged(
            f"the training {name} became {value} at step {int(step)}, so training stopped before applying it; "
            f"{last_good_checkpoint(self.output_dir)}. Lower learning_rate, keep max_grad_norm above 0, and "
            "check the data for extreme values."
        )


def _read(unread: torch.Tensor, state: TrainingState, log: MetricsLog, guard: DivergenceGuard) -> None:
    """Stop a run that diverged, else move the steps' ``unread`` totals into the counters and the log."""
    start = time.perf_counter()  # the wait for the device's queued steps is training time
    guard.raise_if_diverged()
    loss_sum, items, tokens, examples = unread.tolist()
    unread.zero_()
    state.wall_time_s += time.perf_counter() - start
    log.add(loss_sum, items, tokens)
    state.items_seen += int(items)
    state.tokens_seen += int(tokens)
    state.examples_seen += int(examples)


def _checkpoint_due(every: int | str | None, state: TrainingState, batches_per_epoch: int | None) -> bool:
    if every == "epoch":
        return state.batches_in_epoch == batches_per_epoch
    return every is not None and state.global_step % every == 0


def _finish(
    config, accelerator, parts: Prepared, tokenizer, state: TrainingState, log: MetricsLog, task: Task
) -> TrainResult:
    """Final model folder with its training facts, ``all_results.json``, curves; trackers closed."""
    output_dir = Path(config.output_dir)
    metrics = log.last_evaluation()
    best = BestMetric(config.metric_name, state.best_metric, state.best_step) if config.metric_name else None
    epochs = None
    if parts.batches_per_epoch:
        epochs = round(state.epoch + state.batches_in_epoch / parts.batches_per_epoch, 4)
    run_facts = RunFacts(
        metrics={k: v for k, v in metrics.items() if not k.endswith(COUNTER_SUFFIXES)},
        best_metric=best,
        train_steps=state.global_step,
        epochs=epochs,
        tokens_seen=state.tokens_seen,
        examples_seen=state.examples_seen,
        global_batch_size=_global_batch_size(config, accelerator),
        num_warmup_steps=config.num_warmup_steps_for(parts.max_train_steps),
        mixed_precision=accelerator.mixed_precision,
        hardware=hardware_description(accelerator),
        num_processes=accelerator.num_processes,
        wall_time_s=round(state.wall_time_s, 3),
        framework_versions=framework_versions(),
        **{
            name: getattr(config, name)
            for name in ("learning_rate", "lr_scheduler_type", "weight_decay", "seed")
        },
    )
    facts = TrainingFacts(job=task.facts(), run=run_facts)
    final_dir = output_dir / "final"
    save_model_folder(accelerator, parts.model, tokenizer, final_dir, facts)
    best_metric = asdict(best) if best else None  # as all_results.json and TrainResult show it
    if accelerator.is_main_process:
        counters = ("train_steps", "epochs", "tokens_seen", "examples_seen", "global_batch_size")
        results = {
            **metrics,
            **{key: getattr(run_facts, key) for key in counters},
            "best_metric": best_metric,
            "train_loss": next((e["loss"] for e in reversed(log.history) if "loss" in e), None),
            "train_runtime_s": round(state.wall_time_s, 2),
            "train_tokens_per_s": round(state.tokens_seen / max(state.wall_time_s, 1e-9), 1),
        }
        write_atomic(output_dir / RESULTS_FILE, json.dumps(results, indent=2, sort_keys=True))
    _finish_logs(accelerator, log, output_dir)
    accelerator.print(
        f"Saved the model to {final_dir} ({FACTS_FILE}); metrics in "
        f"{output_dir / RESULTS_FILE}, curves in {output_dir / CURVES_FILE}."
    )
    return TrainResult(state.global_step, metrics, output_dir, final_dir, log.history, best_metric, facts)


def _finish_logs(accelerator, log: MetricsLog, output_dir: Path) -> None:
    if accelerator.is_main_process and log.history:
        try:
            plot_curves(log.history, output_dir / CURVES_FILE)
        except Exception as error:  # a plot must never cost the run
            accelerator.print(f"Could not draw {CURVES_FILE}: {error}")
    if log.tracker is not None:
        accelerator.end_training()
