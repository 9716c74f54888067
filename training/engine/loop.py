"""The one Accelerate training loop every briskbert job runs.

A job is a :class:`~briskbert.training.engine.task.Task` (it builds the model and data, counts the items
its loss is a mean over, evaluates, and states its card facts); a command parses its flags into the
job's settings and a :class:`TrainingConfig` and calls :func:`run`::

    config = TrainingConfig(output_dir="runs/x", max_train_steps=1000)  # checked: a UserError naming the flag
    result = run(ClassificationTask(model_source, data_source, labels), config)
    result.final_dir, result.metrics, result.facts  # the saved model, its last evaluation, its card facts

What :func:`run` does: checks the data, builds AdamW with weight decay skipping biases, norms and
embeddings by module type (:mod:`training.engine.optim`) and the learning-rate schedule, prepares everything
with Accelerate (DDP, FSDP, DeepSpeed, mixed precision), optionally resumes, then trains:

* **Accumulation with window-level loss normalisation.** One optimizer step consumes a window of
  ``--gradient_accumulation_steps`` micro-batches (:func:`accumulation_windows`; fewer at the end of an
  epoch). The task's ``count_items`` is summed over the window and over all processes (``N``) first, and each
  micro-batch's loss is rescaled to ``mean_loss * n_batch / N``, so the gradient equals that of one big
  batch whatever the split into micro-batches and processes. Gradients are synced only on the last
  micro-batch. Models only need to return a loss that is a mean over the items ``count_items`` counts.
* **Data order** is a shuffle seeded by ``seed + epoch`` (independent of the process count; Accelerate
  shards it). Collators and datasets with ``set_epoch(epoch)`` hear about every new epoch.
* **One log** (:class:`training.engine.logging_utils.MetricsLog`) takes every entry: training loss (weighted by
  items over the logging interval), learning rate, gradient norm, tokens/s every ``--logging_steps``,
  and each evaluation. It writes ``log_history.jsonl``, feeds the ``--report_to`` trackers and prints
  evaluations to the console.
* **Evaluation** every ``--eval_steps`` (default: about ten times in runs of 20+ steps) and at the end:
  the task's ``evaluate(model, eval_dataloader, accelerator)`` under ``torch.no_grad()`` in eval mode
  (use :func:`evaluation_loop` inside it). Keys get an ``eval_`` prefix; ``eval_loss`` is added from the
  model's own loss when the task does not report one. With ``--metric_for_best_model`` the best
  model is kept in ``output_dir/best``.
* **Checkpoints** every ``--checkpointing_steps`` (a number or ``epoch``) to ``output_dir/step_{N}``,
  written whole or not at all, the last ``--checkpoints_total_limit`` kept (:mod:`training.engine.checkpointing`).
  ``--resume_from_checkpoint PATH|latest`` continues exactly (on CPU the resumed run's losses equal an
  uninterrupted run's) and only the same run: other arguments, data or model are refused, named.
* **Interruption**: Ctrl-C or SIGTERM finishes the current optimizer step, saves a checkpoint, prints
  the command that resumes, and exits 130 (SIGINT) or 143 (SIGTERM) by raising
  :class:`TrainingInterrupted`; a second Ctrl-C aborts at once.
* **Divergence**: a non-finite loss (or, outside fp16 loss scaling, gradient norm) stops the run
  before the optimizer applies it, with one error line (:class:`TrainingDiverged`, exit status 2); the
  checkpoints written before stay, and nothing with non-finite weights is ever saved (every save checks).
  A model or checkpoint to train from that already holds NaN or inf weights is refused, named.
* **Outputs** in ``--output_dir``: ``all_results.json``, ``log_history.jsonl``, ``training_curves.png``
  and ``final/`` (``save_pretrained`` model with remote code, tokenizer, ``training_facts.json``: the
  job's :class:`~briskbert.hub_cards.facts.JobFacts` and what the loop measured).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler

from briskbert.hub_cards.facts import (
    FACTS_FILE,
    BestMetric,
    RunFacts,
    TrainingFacts,
    framework_versions,
    hardware_description,
    write_training_facts,
)
from briskbert.training.engine.checkpointing import (
    RunIdentity,
    TrainingState,
    check_output_dir,
    check_overwrite_spares_inputs,
    check_same_run,
    checkpoint_dirs,
    clear_previous_run,
    dataset_fingerprint,
    load_checkpoint,
    partial_folder,
    publish_folder,
    remove_partial_folders,
    resolve_checkpoint,
    resume_command,
    save_checkpoint,
)
from briskbert.training.engine.config import TrainingConfig, TrainingSetupError
from briskbert.training.engine.finite import (
    TrainingDiverged,
    check_finite_weights,
    non_finite_parameter,
    weights_file,
)
from briskbert.training.engine.logging_utils import (
    COUNTER_SUFFIXES,
    CURVES_FILE,
    RESULTS_FILE,
    MetricsLog,
    plot_curves,
    write_results,
)
from briskbert.training.engine.optim import create_optimizer, create_scheduler
from briskbert.training.engine.task import Task, TaskInputs, count_examples


# ------------------------------------------------------------------------------------------ accelerator
def create_accelerator(config: TrainingConfig):
    """The Accelerator for this run (mixed precision, trackers, torch.compile via the dynamo plugin).

    Call it first: it also refuses an ``output_dir`` that holds another run, before any data is prepared.
    """
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, TorchDynamoPlugin

    check_output_dir(config.output_dir, config.resume_from_checkpoint, config.overwrite_output_dir)
    kwargs = {}
    if config.torch_compile:
        kwargs["dynamo_plugin"] = TorchDynamoPlugin(backend="inductor", dynamic=True)
    # Several processes without a GPU (`accelerate launch --multi_gpu --num_processes 2` on a CPU machine,
    # i.e. torchrun): Accelerate only picks its multi-CPU (gloo) mode when told it runs on CPU.
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        kwargs["cpu"] = True
    return Accelerator(
        mixed_precision=config.mixed_precision,
        log_with=config.trackers or None,
        project_dir=config.output_dir,
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


def accumulation_windows(
    dataloader, state: TrainingState, accumulation_steps: int, accelerator, epoch_listeners: Iterable = ()
) -> Iterator[list[dict]]:
    """Yield the micro-batches of one optimizer step at a time, epoch after epoch, without end.

    Starts at ``state``'s data position (a resumed run skips the batches it already consumed) and moves
    it: ``state.batches_in_epoch`` counts this process's batches yielded in ``state.epoch``. The last
    window of an epoch may be short. ``epoch_listeners`` (sampler, collator, dataset) hear each epoch.
    """
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
        if state.batches_in_epoch == 0:
            raise TrainingSetupError("The training data yielded no batches.")
        state.epoch += 1
        state.batches_in_epoch = 0


def _count_tokens(batch: dict) -> int:
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    if "input_ids" in batch:
        return batch["input_ids"].numel()
    return 0


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


class _LossRecorder:
    """A forward hook summing the model's own loss over evaluation batches, weighted by ``count_items``:
    gives ``eval_loss`` (and the validation curve) to task evaluations that only compute metrics."""

    def __init__(self, count_items, device):
        self.count_items = count_items
        self.totals = torch.zeros(2, dtype=torch.float64, device=device)

    def __call__(self, module, args, kwargs, outputs) -> None:
        loss = getattr(outputs, "loss", None)
        items = float(self.count_items(kwargs)) if loss is not None else 0.0
        if items:
            self.totals[0] += loss.detach().double() * items
            self.totals[1] += items


@dataclass
class Evaluation:
    """Evaluate, log, track the best model: the one place where the loop does all four."""

    dataloader: object
    task: Task
    metric_name: str | None  # --metric_for_best_model, eval_ prefixed
    higher_is_better: bool
    best_dir: Path
    tokenizer: object = None

    def __call__(self, accelerator, model, state: TrainingState, log: MetricsLog) -> None:
        metrics = self.evaluate(accelerator, model)
        log.append({"step": state.global_step, **metrics})
        if self.metric_name is None:
            return
        value = metrics.get(self.metric_name)
        if value is None:
            raise TrainingSetupError(
                f"--metric_for_best_model {self.metric_name} is not among the evaluation metrics "
                f"{sorted(metrics)}; pick one of them."
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
                if raw is None:
                    raw = evaluate_loss(model, self.dataloader, accelerator, self.task.count_items)
        finally:
            hook.remove()
            model.train()
        raw = dict(raw)
        if "loss" not in raw and "eval_loss" not in raw:
            loss_sum, items = accelerator.reduce(recorder.totals, "sum").tolist()
            if items:
                raw["loss"] = loss_sum / items
        metrics = {(k if k.startswith("eval_") else f"eval_{k}"): float(v) for k, v in raw.items()}
        metrics["eval_runtime_s"] = round(time.time() - start, 3)
        return metrics


# ----------------------------------------------------------------------------------------- interruption
class TrainingInterrupted(SystemExit):
    """Raised by :func:`run` after a SIGINT/SIGTERM once the checkpoint is saved: exits the process with
    128 + the signal number (130, 143), as a shell reports a process the signal ended."""

    def __init__(self, signal_number: int, checkpoint: Path, command: str):
        super().__init__(128 + signal_number)
        self.signal_number, self.checkpoint, self.command = signal_number, checkpoint, command


class _SignalCatcher:
    """First Ctrl-C / SIGTERM: remembered, so the loop stops after the current optimizer step. A second
    Ctrl-C aborts at once."""

    def __init__(self):
        self.signal_number = 0
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signal_number and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_number = signum

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not in the main thread: no handlers, no stopping
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def received(self, accelerator) -> int:
        """The signal any process received (0: none); all processes then stop at the same step."""
        if accelerator.num_processes == 1:
            return self.signal_number
        flag = torch.tensor(float(self.signal_number), device=accelerator.device)
        return int(accelerator.reduce(flag, "max").item())


# ---------------------------------------------------------------------------------------------- result
@dataclass
class TrainResult:
    global_step: int
    metrics: dict  # final evaluation (eval_*), empty without an eval dataset
    output_dir: Path
    final_dir: Path
    history: list = field(default_factory=list)
    best_metric: dict | None = None
    facts: TrainingFacts | None = None  # what final/training_facts.json holds


@dataclass
class _Prepared:
    """What :func:`run` builds before the first step, prepared by Accelerate."""

    model: object
    optimizer: object
    scheduler: object
    train_dataloader: object
    eval_dataloader: object
    max_train_steps: int
    num_warmup_steps: int
    batches_per_epoch: int | None  # this process's batches per epoch; None for streamed data
    global_batch_size: int
    epoch_listeners: list  # sampler, collator, dataset: whichever has set_epoch(epoch)


# ------------------------------------------------------------------------------------------------- run
def run(
    task: Task,
    config: TrainingConfig,
    *,
    accelerator=None,
    callbacks: Iterable[Callable[[dict], None]] = (),
) -> TrainResult:
    """Train what ``task`` builds as described in the module docstring.

    ``accelerator``: one made by :func:`create_accelerator` (default: made here). ``callbacks`` are
    called with each training log entry (a dict with ``step``, ``loss``, ...) on the main process.
    """
    task.check(config)
    check_output_dir(config.output_dir, config.resume_from_checkpoint, config.overwrite_output_dir)
    accelerator = accelerator or create_accelerator(config)
    seed_everything(config.seed)  # before building: the model's initialisation is seeded
    inputs = task.build(accelerator, config)
    _check_datasets(inputs.train_dataset, inputs.eval_dataset, config)
    check_finite_weights(inputs.model, "the model to train")
    seed_everything(config.seed)  # dropout and data draws do not depend on what building drew
    output_dir = Path(config.output_dir)
    identity = _run_identity(config, inputs.model, inputs.train_dataset, inputs.eval_dataset)
    checkpoint = _checkpoint_to_resume(config, identity)
    if checkpoint is None and config.overwrite_output_dir:
        check_overwrite_spares_inputs(output_dir, _input_sources(inputs))
    parts = _prepare(config, accelerator, inputs)
    model, optimizer, scheduler = parts.model, parts.optimizer, parts.scheduler
    evaluation = _evaluation(config, parts, task, inputs.tokenizer)
    log, state = _open_run(config, accelerator, output_dir, checkpoint, model)
    progress = _progress_bar(accelerator, state.global_step, parts.max_train_steps)
    windows = accumulation_windows(
        parts.train_dataloader, state, config.gradient_accumulation_steps, accelerator, parts.epoch_listeners
    )
    eval_every = config.eval_interval(parts.max_train_steps)
    log_every = config.log_interval(parts.max_train_steps)
    interval = _LogInterval()
    stop_signal, last_checkpoint = 0, checkpoint
    model.train()
    with _SignalCatcher() as signals, _closing_logs_on_error(accelerator, log, output_dir, progress):
        while state.global_step < parts.max_train_steps:
            step_start = time.perf_counter()  # the run's time counts training steps only (see TrainingState)
            window = next(windows)
            totals = _accumulate_gradients(accelerator, model, window, task.count_items)
            totals = accelerator.reduce(totals, "sum")  # all processes: loss x items, items, tokens, examples
            # Clip to --max_grad_norm (0: no clipping; the norm is still measured, for the log and the check).
            max_norm = config.max_grad_norm if config.max_grad_norm > 0 else math.inf
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_norm)
            # A NaN/inf loss or gradient is never applied: the weights stay those of the last step.
            _refuse_divergence(accelerator, totals[0], grad_norm, state.global_step + 1, output_dir)
            optimizer.step()
            scheduler.step()  # once per optimizer step (not prepared: Accelerate would step it per process)
            optimizer.zero_grad(set_to_none=True)
            state.global_step += 1
            state.wall_time_s += time.perf_counter() - step_start
            _count_window(state, interval, totals.cpu())
            progress.update(1)

            step, last_step = state.global_step, state.global_step == parts.max_train_steps
            if step % log_every == 0 or last_step:
                entry = interval.entry(state, parts, scheduler.get_last_lr()[0], grad_norm)
                log.append(entry)
                progress.set_postfix(loss=f"{entry['loss']:.4f}", lr=f"{entry['learning_rate']:.2e}")
                if accelerator.is_main_process:
                    for callback in callbacks:
                        callback(entry)
            if evaluation is not None and (last_step or (eval_every and step % eval_every == 0)):
                evaluation(accelerator, model, state, log)
            stop_signal = signals.received(accelerator)
            if stop_signal or _checkpoint_due(config.checkpointing_steps, state, parts.batches_per_epoch):
                _refuse_non_finite_weights(accelerator, model, f"step_{step}", output_dir)
                last_checkpoint = save_checkpoint(
                    accelerator, output_dir, state, identity, config.checkpoints_total_limit
                )
            if stop_signal:
                break
    progress.close()
    if stop_signal:
        _finish_logs(accelerator, log, output_dir)
        raise _interrupted(accelerator, stop_signal, last_checkpoint, state.global_step)
    result = _finish(config, accelerator, parts, inputs.tokenizer, state, log, task)
    task.after_training(result, accelerator)
    return result


@contextlib.contextmanager
def _closing_logs_on_error(accelerator, log: MetricsLog, output_dir: Path, progress):
    """A run stopped by an error still closes its progress bar, draws its curves and ends its trackers."""
    try:
        yield
    except Exception:
        progress.close()
        _finish_logs(accelerator, log, output_dir)
        raise


def _refuse_divergence(accelerator, loss_sum: torch.Tensor, grad_norm, step: int, output_dir: Path) -> None:
    """Stop before the optimizer applies a NaN/inf loss or gradient norm (the same verdict on every process:
    both are reduced). Under fp16 loss scaling an inf gradient is the scaler's cue to skip the step, so only
    the loss counts there."""
    what, value = "loss", float(loss_sum)
    if math.isfinite(value) and grad_norm is not None and accelerator.scaler is None:
        what, value = "gradient norm", float(grad_norm)
    if not math.isfinite(value):
        raise TrainingDiverged(
            f"the training {what} became {value} at step {step}, so training stopped before applying it; "
            f"{_last_good(output_dir)}. Lower --learning_rate, keep --max_grad_norm above 0, and check the "
            "data for extreme values."
        )


def _refuse_non_finite_weights(accelerator, model, what: str, output_dir: Path) -> None:
    """Never save NaN/inf weights as ``what`` (a checkpoint, best/ or final/); all processes agree."""
    local = torch.tensor(float(non_finite_parameter(model) is not None), device=accelerator.device)
    if accelerator.reduce(local, "max").item():
        raise TrainingDiverged(
            f"the weights became NaN or infinite, so {what} was not saved; {_last_good(output_dir)}. "
            "Lower --learning_rate and keep --max_grad_norm above 0."
        )


def _last_good(output_dir: Path) -> str:
    checkpoints = checkpoint_dirs(output_dir)
    if checkpoints:
        return f"the last good checkpoint is {checkpoints[-1]}"
    return "no checkpoint was saved before (--checkpointing_steps saves them)"


# ------------------------------------------------------------------------------------------- internals
def _run_identity(config: TrainingConfig, model, train_dataset, eval_dataset) -> RunIdentity:
    parameters = sum(p.numel() for p in model.parameters())
    return RunIdentity(
        arguments=config.run_defining_arguments(),
        train_data=dataset_fingerprint(train_dataset),
        eval_data=dataset_fingerprint(eval_dataset),
        model=f"{type(model).__name__} with {parameters:,} parameters",
    )


def _checkpoint_to_resume(config: TrainingConfig, identity: RunIdentity) -> Path | None:
    """The checkpoint ``--resume_from_checkpoint`` names, checked to belong to this run; None: start anew."""
    if not config.resume_from_checkpoint:
        return None
    checkpoint = resolve_checkpoint(config.resume_from_checkpoint, config.output_dir)
    if checkpoint is not None:
        check_same_run(checkpoint, identity)
    return checkpoint


def _progress_bar(accelerator, initial: int, total: int):
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        disable=not accelerator.is_local_main_process,
        desc="training",
        dynamic_ncols=True,
    )


def _prepare(config, accelerator, inputs: TaskInputs) -> _Prepared:
    """Dataloaders, optimizer, schedule; everything handed to Accelerate."""
    model, train_dataset, data_collator = inputs.model, inputs.train_dataset, inputs.data_collator
    if accelerator.distributed_type.value == "DEEPSPEED" and config.gradient_accumulation_steps > 1:
        raise TrainingSetupError(
            "DeepSpeed runs its own gradient accumulation, which this loop's window-normalised "
            "accumulation does not drive: use --gradient_accumulation_steps 1 with a larger "
            "--per_device_train_batch_size or more processes (or DDP/FSDP)."
        )
    streamed = isinstance(train_dataset, IterableDataset)
    sampler = None if streamed else EpochShuffleSampler(len(train_dataset), config.seed)
    train_dataloader = _dataloader(
        train_dataset,
        data_collator,
        config.per_device_train_batch_size,
        sampler,
        config.dataloader_num_workers,
    )
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = create_optimizer(
        model,
        config.learning_rate,
        config.weight_decay,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
    )
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    eval_dataloader = None
    if inputs.eval_dataset is not None:
        eval_dataloader = accelerator.prepare(
            _dataloader(
                inputs.eval_dataset,
                inputs.eval_collator or data_collator,
                config.per_device_eval_batch_size,
                None,
                config.dataloader_num_workers,
            )
        )
    batches_per_epoch = None if streamed else len(train_dataloader)
    if streamed:
        max_train_steps = config.max_train_steps
    else:
        steps_per_epoch = math.ceil(batches_per_epoch / config.gradient_accumulation_steps)
        max_train_steps = config.max_train_steps or math.ceil(config.num_train_epochs * steps_per_epoch)
    warmup = config.num_warmup_steps_for(max_train_steps)
    scheduler = create_scheduler(
        optimizer, config.lr_scheduler_type, warmup, max_train_steps, config.decay_ratio
    )
    accelerator.register_for_checkpointing(scheduler)  # checkpoints hold its state
    global_batch_size = (
        config.per_device_train_batch_size * accelerator.num_processes * config.gradient_accumulation_steps
    )
    accelerator.print(
        f"Training: {'streamed' if streamed else len(train_dataset)} examples, {max_train_steps} steps, "
        f"global batch {global_batch_size} ({config.per_device_train_batch_size} x "
        f"{accelerator.num_processes} processes x {config.gradient_accumulation_steps} accumulation)"
    )
    return _Prepared(
        model,
        optimizer,
        scheduler,
        train_dataloader,
        eval_dataloader,
        max_train_steps,
        warmup,
        batches_per_epoch,
        global_batch_size,
        [obj for obj in (sampler, data_collator, train_dataset) if hasattr(obj, "set_epoch")],
    )


def _evaluation(config, parts: _Prepared, task: Task, tokenizer) -> Evaluation | None:
    if parts.eval_dataloader is None:
        if config.metric_for_best_model:
            raise TrainingSetupError(
                f"--metric_for_best_model {config.metric_for_best_model} needs an evaluation dataset."
            )
        return None
    return Evaluation(
        dataloader=parts.eval_dataloader,
        task=task,
        metric_name=config.metric_name,
        higher_is_better=config.higher_metric_is_better,
        best_dir=Path(config.output_dir) / "best",
        tokenizer=tokenizer,
    )


def _input_sources(inputs: TaskInputs) -> list[str]:
    """Where the models (a distillation's teacher included) and the tokenizer were loaded from."""
    models = [module for module in inputs.model.modules() if getattr(module, "name_or_path", None)]
    names = [module.name_or_path for module in models]
    return names + (
        [inputs.tokenizer.name_or_path] if getattr(inputs.tokenizer, "name_or_path", None) else []
    )


def _open_run(
    config, accelerator, output_dir: Path, checkpoint: Path | None, model
) -> tuple[MetricsLog, TrainingState]:
    """Prepare the output folder, restore the checkpoint and the log, start the trackers."""
    from tqdm.auto import tqdm

    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        remove_partial_folders(output_dir)
        if checkpoint is None and config.overwrite_output_dir:
            clear_previous_run(output_dir)
    accelerator.wait_for_everyone()
    tracker = accelerator if accelerator.log_with else None
    log = MetricsLog(output_dir, accelerator.is_main_process, tracker=tracker, echo=tqdm.write)
    if checkpoint is None:
        state = TrainingState()
        log.start_fresh()
    else:
        accelerator.print(f"Resuming from {checkpoint}")
        state = load_checkpoint(accelerator, checkpoint)
        check_finite_weights(model, f"--resume_from_checkpoint {weights_file(checkpoint)}")
        log.restore(state.global_step)
    if tracker is not None:
        scalars = {k: v for k, v in asdict(config).items() if isinstance(v, (int, float, str, bool))}
        accelerator.init_trackers(output_dir.resolve().name or "briskbert", config=scalars)
    return log, state


def _accumulate_gradients(accelerator, model, window: list[dict], count_items) -> torch.Tensor:
    """Forward/backward over one accumulation window -> this process's
    ``[sum of loss x items, items, tokens, examples]``."""
    counts = [float(count_items(batch)) for batch in window]
    total = float(
        accelerator.reduce(torch.tensor(sum(counts), dtype=torch.float64, device=accelerator.device), "sum")
    )
    if total == 0:
        raise TrainingSetupError(
            "An accumulation window has no items to compute a loss on (count_items returned 0 for "
            "every batch, e.g. no masked tokens)."
        )
    loss_sum = 0.0
    for i, (batch, items) in enumerate(zip(window, counts)):
        # Sync gradients across processes only on the last micro-batch of the window.
        sync = contextlib.nullcontext() if i == len(window) - 1 else accelerator.no_sync(model)
        with sync:
            loss = model(**batch).loss
            if items == 0:
                loss = loss.nan_to_num() * 0.0
            # This batch's mean loss -> its share of the window's sum. DDP averages gradients over
            # processes, hence the factor num_processes.
            accelerator.backward(loss * (items / total) * accelerator.num_processes)
        loss_sum += float(loss.detach()) * items
    tokens = sum(_count_tokens(batch) for batch in window)
    examples = sum(count_examples(batch) for batch in window)
    return torch.tensor(
        [loss_sum, sum(counts), tokens, examples], dtype=torch.float64, device=accelerator.device
    )


class _LogInterval:
    """Sums over the steps since the last training log entry (loss x items, items, tokens)."""

    def __init__(self):
        self.totals = torch.zeros(3, dtype=torch.float64)
        self.start = time.time()

    def entry(self, state: TrainingState, parts: _Prepared, learning_rate: float, grad_norm) -> dict:
        loss_sum, items, tokens = self.totals.tolist()
        now = time.time()
        epoch = state.epoch + (
            state.batches_in_epoch / parts.batches_per_epoch if parts.batches_per_epoch else 0.0
        )
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
        self.totals.zero_()
        self.start = now
        return entry


def _count_window(state: TrainingState, interval: _LogInterval, totals: torch.Tensor) -> None:
    """Add one optimizer step's totals (all processes) to the run's counters and the log interval."""
    loss_sum, items, tokens, examples = totals.tolist()
    interval.totals += torch.tensor([loss_sum, items, tokens], dtype=torch.float64)
    state.items_seen += int(items)
    state.tokens_seen += int(tokens)
    state.examples_seen += int(examples)


def _checkpoint_due(every: int | str | None, state: TrainingState, batches_per_epoch: int | None) -> bool:
    if every == "epoch":
        return state.batches_in_epoch == batches_per_epoch
    return every is not None and state.global_step % every == 0


def _interrupted(accelerator, signal_number: int, checkpoint: Path, step: int) -> TrainingInterrupted:
    command = resume_command(sys.orig_argv, checkpoint)
    if accelerator.is_main_process:
        launcher = (
            " (launched the same way, e.g. with accelerate launch)" if accelerator.num_processes > 1 else ""
        )
        print(
            f"\nInterrupted by {signal.Signals(signal_number).name} at step {step}; the checkpoint is "
            f"{checkpoint}. Resume with{launcher}:\n  {command}",
            file=sys.stderr,
        )
    return TrainingInterrupted(signal_number, checkpoint, command)


def _finish(
    config, accelerator, parts: _Prepared, tokenizer, state: TrainingState, log: MetricsLog, task: Task
) -> TrainResult:
    """Final model folder with its training facts, ``all_results.json``, curves; trackers closed."""
    output_dir = Path(config.output_dir)
    metrics = log.last_evaluation()
    best = None
    if config.metric_name:
        best = {"name": config.metric_name, "value": state.best_metric, "step": state.best_step}
    train_losses = [e["loss"] for e in log.history if "loss" in e]
    epochs = None
    if parts.batches_per_epoch:
        epochs = round(state.epoch + state.batches_in_epoch / parts.batches_per_epoch, 4)
    run_facts = RunFacts(
        metrics={k: v for k, v in metrics.items() if not k.endswith(COUNTER_SUFFIXES)},
        best_metric=BestMetric(**best) if best else None,
        train_steps=state.global_step,
        epochs=epochs,
        tokens_seen=state.tokens_seen,
        examples_seen=state.examples_seen,
        global_batch_size=parts.global_batch_size,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler_type,
        num_warmup_steps=parts.num_warmup_steps,
        weight_decay=config.weight_decay,
        mixed_precision=accelerator.mixed_precision,
        seed=config.seed,
        hardware=hardware_description(accelerator),
        num_processes=accelerator.num_processes,
        wall_time_s=round(state.wall_time_s, 3),
        framework_versions=framework_versions(),
    )
    facts = TrainingFacts(job=task.facts(), run=run_facts)
    final_dir = output_dir / "final"
    save_model_folder(accelerator, parts.model, tokenizer, final_dir, facts)
    if accelerator.is_main_process:
        write_results(
            output_dir,
            {
                **metrics,
                **{key: getattr(run_facts, key) for key in RESULT_COUNTERS},
                "best_metric": best,
                "train_loss": train_losses[-1] if train_losses else None,
                "train_runtime_s": round(state.wall_time_s, 2),
                "train_tokens_per_s": round(state.tokens_seen / max(state.wall_time_s, 1e-9), 1),
            },
        )
    _finish_logs(accelerator, log, output_dir)
    accelerator.print(
        f"Saved the model to {final_dir} (model card README.md, {FACTS_FILE}); metrics in "
        f"{output_dir / RESULTS_FILE}, curves in {output_dir / CURVES_FILE}."
    )
    return TrainResult(state.global_step, metrics, output_dir, final_dir, log.history, best, facts)


# The run's counters that all_results.json repeats next to the final metrics.
RESULT_COUNTERS = ("train_steps", "epochs", "tokens_seen", "examples_seen", "global_batch_size")


@contextlib.contextmanager
def own_class(model):
    """FSDP2 gives a sharded model a class of torch's own, a subclass of the model's; ``save_pretrained`` copies
    the remote-code files of the class it sees, so during a save the model wears its own class again."""
    sharded_class = type(model)
    model.__class__ = next(cls for cls in sharded_class.__mro__ if not cls.__module__.startswith("torch."))
    try:
        yield model
    finally:
        model.__class__ = sharded_class


def save_model_folder(
    accelerator, model, tokenizer, folder: Path, facts: TrainingFacts | None = None
) -> None:
    """``save_pretrained`` model (+ tokenizer, + ``training_facts.json``), written whole or not at all;
    never with NaN or infinite weights."""
    accelerator.wait_for_everyone()
    _refuse_non_finite_weights(accelerator, model, f"{folder.name}/", folder.parent)
    unwrapped = accelerator.unwrap_model(model)
    # Sharded engines need their weights gathered; otherwise save_pretrained handles tied weights itself.
    sharded = accelerator.distributed_type.value in ("FSDP", "DEEPSPEED")
    state_dict = accelerator.get_state_dict(model) if sharded else None
    if accelerator.is_main_process:
        partial = partial_folder(folder)
        partial.mkdir(parents=True, exist_ok=True)
        with own_class(unwrapped):
            unwrapped.save_pretrained(partial, state_dict=state_dict, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(partial)
        if facts is not None:
            write_training_facts(partial, facts)
            _write_card(partial, repo_id=f"your-namespace/{folder.parent.resolve().name}")
        publish_folder(partial, folder)
    accelerator.wait_for_everyone()


def _write_card(folder: Path, repo_id: str) -> None:
    """The model card (README.md) of a final folder, as a publish would render it for ``repo_id``."""
    from briskbert.hub_cards.card import write_card

    try:
        write_card(folder, repo_id)
    except Exception as error:  # a card must never cost the run; publishing renders it again
        print(f"Could not write the model card into {folder.name}: {error}", file=sys.stderr)


def _finish_logs(accelerator, log: MetricsLog, output_dir: Path) -> None:
    if accelerator.is_main_process and log.history:
        try:
            plot_curves(log.history, output_dir / CURVES_FILE)
        except Exception as error:  # a plot must never cost the run
            accelerator.print(f"Could not draw {CURVES_FILE}: {error}")
    if log.tracker is not None:
        accelerator.end_training()


def _check_datasets(train_dataset, eval_dataset, config: TrainingConfig) -> None:
    if train_dataset is None:
        raise TrainingSetupError("No training dataset was given.")
    if isinstance(train_dataset, IterableDataset):
        if config.max_train_steps is None:
            raise TrainingSetupError(
                "A streaming (iterable) training set has no length: give --max_train_steps."
            )
        if config.checkpointing_steps == "epoch":
            raise TrainingSetupError(
                "A streaming training set has no epochs: give --checkpointing_steps a number."
            )
    else:
        n = len(train_dataset)
        if n == 0:
            raise TrainingSetupError("The training dataset is empty.")
        if n < config.per_device_train_batch_size:
            raise TrainingSetupError(
                f"The training dataset has {n} examples, fewer than one batch (--per_device_train_batch_size "
                f"{config.per_device_train_batch_size}); add data or lower the batch size."
            )
    if eval_dataset is not None and not isinstance(eval_dataset, IterableDataset) and len(eval_dataset) == 0:
        raise TrainingSetupError("The evaluation dataset is empty.")
