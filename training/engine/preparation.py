"""What the loop builds before its first step: the data checked, the dataloaders, the optimizer and the
learning-rate schedule, everything handed to Accelerate, and the run's step count."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch.utils.data import IterableDataset

from briskbert.errors import SettingError
from briskbert.training.engine.batches import EpochShuffleSampler, make_dataloader
from briskbert.training.engine.config import TrainingConfig, TrainingSetupError
from briskbert.training.engine.optim import create_optimizer, create_scheduler
from briskbert.training.engine.task import TaskInputs


def check_datasets(train_dataset, eval_dataset, config: TrainingConfig) -> None:
    """Refuse a missing, empty or too small training set, a streamed one without a step count or checkpointed
    by epoch, and an empty evaluation set."""
    if train_dataset is None:
        raise TrainingSetupError("No training dataset was given.")
    if isinstance(train_dataset, IterableDataset):
        if config.max_train_steps is None:
            raise SettingError(
                "max_train_steps", "is needed: a streaming (iterable) training set has no length."
            )
        if config.checkpointing_steps == "epoch":
            raise SettingError(
                "checkpointing_steps", "must be a number: a streaming training set has no epochs."
            )
    else:
        n = len(train_dataset)
        if n == 0:
            raise TrainingSetupError("The training dataset is empty.")
        if n < config.per_device_train_batch_size:
            raise SettingError(
                "per_device_train_batch_size",
                f"{config.per_device_train_batch_size} is more than the {n} examples of the training dataset "
                "(fewer than one batch); add data or lower the batch size.",
            )
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
    num_warmup_steps: int
    batches_per_epoch: int | None  # this process's batches per epoch; None for streamed data
    global_batch_size: int
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
    train_dataloader = make_dataloader(
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
            make_dataloader(
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
    return Prepared(
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


def input_sources(inputs: TaskInputs) -> list[str]:
    """Where the models (a distillation's teacher included) and the tokenizer were loaded from."""
    models = [module for module in inputs.model.modules() if getattr(module, "name_or_path", None)]
    names = [module.name_or_path for module in models]
    return names + (
        [inputs.tokenizer.name_or_path] if getattr(inputs.tokenizer, "name_or_path", None) else []
    )
