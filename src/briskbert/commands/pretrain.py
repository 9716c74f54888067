"""Pretrain a briskbert encoder with masked language modelling (+ next sentence prediction).

    briskbert pretrain --train_file corpus.txt --config_name bert-small --vocab_size 30522 \\
        --max_seq_length 128 --packing_mode full-sentences --preprocessing_num_workers 2 \\
        --per_device_train_batch_size 32 --max_train_steps 10000 --output_dir runs/mlm

The corpus is tokenized once, in parallel, into a cached memory-mapped store (memory does not grow with
the corpus): a second or resumed run with the same corpus and tokenizer starts at once. Flag names follow
transformers' ``run_mlm_no_trainer.py`` where they overlap.
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.tasks.pretraining_settings import (
    MaskingSettings,
    PretrainingData,
    PretrainingModel,
    PretrainingSettings,
)


def main(argv: list[str] | None = None):
    data, model, masking, config = parse(
        __doc__,
        PretrainingData,
        PretrainingModel,
        MaskingSettings,
        TrainingConfig,
        argv=argv,
        learning_rate=5e-4,
        weight_decay=0.01,
    )
    settings = PretrainingSettings(data, model, masking)
    from briskbert.commands.training_run import train
    from briskbert.training.tasks.pretraining import PretrainingTask

    return train(PretrainingTask(settings), config)
