"""The data a run is handed, checked before anything is prepared: one error line naming what to change
(a :class:`~briskbert.errors.SettingError` names the setting)."""

from __future__ import annotations

from torch.utils.data import IterableDataset

from briskbert.errors import SettingError
from briskbert.training.engine.config import TrainingConfig, TrainingSetupError


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
