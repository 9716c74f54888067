"""Every training job on two processes (``accelerate launch``, CPU, gloo) trains like one process at the same
global batch; all two-process runs share one launch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hub_fixtures import free_port

from briskbert.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
XQUAD = str(DATA / "xquad_en_excerpt.json")
STSB_TRAIN = str(DATA / "stsb_train_excerpt.tsv")
STSB_DEV = str(DATA / "stsb_dev_excerpt.tsv")
COMMON = ["--max_train_steps", "3", "--logging_steps", "1", "--learning_rate", "1e-3", "--seed", "5"]

# name: (command and its data flags, per-process batch sizes on two processes; one process gets twice as many,
# loss tolerance). The fine-tuning jobs agree to 2e-4 relative, the retrieval jobs to 1e-5.
RUNS = {
    "classification": (
        ["finetune-classification", "--train_file", str(DATA / "sst2_train_excerpt.tsv")],
        {"--per_device_train_batch_size": 4}, 2e-4,
    ),
    "ner": (
        ["finetune-ner", "--train_file", str(DATA / "conll2003_train_excerpt.txt")],
        {"--per_device_train_batch_size": 4}, 2e-4,
    ),
    "qa": (
        ["finetune-qa", "--train_file", XQUAD, "--max_seq_length", "128", "--doc_stride", "32"],
        {"--per_device_train_batch_size": 4}, 2e-4,
    ),
    "in-batch and hard negatives": (
        ["finetune-embeddings", "--train_file", XQUAD, "--train_articles", "0:3", "--symmetric",
         "--mine_hard_negatives", "--validation_file", XQUAD, "--validation_articles", "3:4",
         "--max_seq_length", "64"],
        {"--per_device_train_batch_size": 4}, 1e-5,
    ),
    "cached gradients": (
        ["finetune-embeddings", "--train_file", XQUAD, "--train_articles", "0:3", "--symmetric",
         "--mini_batch_size", "3", "--max_seq_length", "64"],
        {"--per_device_train_batch_size": 4}, 1e-5,
    ),
    "scored pairs (CoSENT)": (
        ["finetune-embeddings", "--train_file", STSB_TRAIN, "--validation_file", STSB_DEV, "--max_seq_length", "64"],
        # CoSENT's validation loss compares the pairs of an evaluation batch: the global batches must match
        # too, and divide the 300 validation pairs (no padding batches).
        {"--per_device_train_batch_size": 8, "--per_device_eval_batch_size": 10}, 1e-5,
    ),
    "re-ranker": (
        ["finetune-reranker", "--train_file", XQUAD, "--train_articles", "0:3", "--num_negatives", "2",
         "--max_seq_length", "64"],
        {"--per_device_train_batch_size": 2}, 1e-5,
    ),
}  # fmt: skip

WORKER = """
import json, sys
from briskbert.cli import main
for argv in json.loads(open(sys.argv[1]).read()):
    assert main(argv) == 0, argv
"""


@pytest.fixture(scope="module")
def encoder(tmp_path_factory, tokenizer, tiny_model) -> str:
    """bert-tiny's layers, narrower (quicker steps), with dropout off (so two processes draw no different masks)."""
    from briskbert.modeling import BriskBertForMaskedLM

    folder = tmp_path_factory.mktemp("two_processes") / "encoder"
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = tiny_model(BriskBertForMaskedLM, hidden_size=32, intermediate_size=64, **no_dropout)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _argv(name: str, encoder: str, output_dir: Path, processes: int) -> list[str]:
    """The run's flags for ``processes`` processes: the per-process batches of the same global batches."""
    command, batches, _ = RUNS[name]
    sizes = [str(value) for flag, size in batches.items() for value in (flag, size * 2 // processes)]
    return [*command, *sizes, "--model_name_or_path", encoder, "--output_dir", str(output_dir), *COMMON]


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory, encoder):
    """Every run of RUNS in one `accelerate launch` of two CPU processes (one start-up for all of them)."""
    folder = tmp_path_factory.mktemp("two-processes")
    outputs = {name: folder / f"run{number}" for number, name in enumerate(RUNS)}
    argvs = [_argv(name, encoder, outputs[name], processes=2) for name in RUNS]
    (folder / "runs.json").write_text(json.dumps(argvs))
    (folder / "worker.py").write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.update(CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
         "--main_process_port", str(free_port()), str(folder / "worker.py"), str(folder / "runs.json")],
        capture_output=True, text=True, timeout=1800, cwd=folder, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return outputs


def _log(output_dir: Path) -> tuple[list[float], dict]:
    entries = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    losses = [entry["loss"] for entry in entries if "loss" in entry]
    evaluation = next((entry for entry in reversed(entries) if "eval_runtime_s" in entry), {})
    return losses, {
        key: value for key, value in evaluation.items() if key.startswith("eval_") and key != "eval_runtime_s"
    }


# Slow (a few minutes in all, one launch for every run): the only check of the DDP path, that every training
# job runs on several processes at all and trains as one process does on the global batch.
@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_two_processes_train_like_one_at_the_same_global_batch(name, two_process_runs, encoder, tmp_path):
    facts = json.loads((two_process_runs[name] / "final" / "training_facts.json").read_text())
    assert facts["num_processes"] == 2
    assert cli(_argv(name, encoder, tmp_path / "one", processes=1)) == 0
    one_losses, one_metrics = _log(tmp_path / "one")
    two_losses, two_metrics = _log(two_process_runs[name])
    assert len(one_losses) == len(two_losses) == 3
    assert two_losses == pytest.approx(one_losses, rel=RUNS[name][2])
    assert one_losses[0] != one_losses[-1]  # the weights moved: equal losses are no frozen model's accident
    assert two_metrics.keys() == one_metrics.keys()
    for metric, value in one_metrics.items():
        # Spearman ranks the similarities: float rounding that swaps two near-equal ones moves it by up to
        # 6 * 2n / (n^3 - n), about 1.3e-4 for the 300 validation pairs; the other metrics move by rounding only.
        tolerance = 1e-3 if "spearman" in metric else 1e-5
        assert two_metrics[metric] == pytest.approx(value, abs=tolerance), metric
