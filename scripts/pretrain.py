#!/usr/bin/env python
"""Pretrain a briskbert encoder with masked-language modelling (+ optional next sentence prediction).

    python scripts/pretrain.py --train_file data/wikitext2_excerpt.txt --config_name bert-tiny \
        --vocab_size 2000 --max_seq_length 128 --packing --max_train_steps 200 --output_dir runs/tiny
    accelerate launch --num_processes 2 scripts/pretrain.py ...       # same flags, several processes
    accelerate launch --config_file configs/accelerate/ddp.yaml scripts/pretrain.py ...

All flags: ``python scripts/pretrain.py --help``. Data preparation, masking and the training loop live in
the ``training`` package (``training/pretraining.py``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from training.pretraining import main  # noqa: E402

if __name__ == "__main__":
    main()
