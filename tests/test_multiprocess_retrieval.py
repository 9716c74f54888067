# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""The retrieval losses across processes: gathered embeddings carry the gradient of the whole loss (two gloo
processes), and the cached-gradient path replays the dropout of its first pass."""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from test_retrieval import PAIRS

from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.retrieval.dense import embed_batch
from briskbert.retrieval.settings import EmbeddingSettings
from briskbert.training.retrieval.embeddings import DualEncoder, PairCollator

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
    """Each process ends with the gradient one process would have for its rows of the whole loss."""
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
def test_cached_gradients_replay_the_dropout_of_the_first_pass(tokenizer, tiny_model):
    """With dropout on, cached gradients equal those of the same mini-batches encoded with a graph."""
    from briskbert.modeling import BriskBertModel

    batch = PairCollator(tokenizer, max_query_length=16, max_passage_length=32)(PAIRS)
    spec, size = EmbeddingSpec("mean", True, 32), 3
    dropout = dict(hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2)
    encoder = tiny_model(BriskBertModel, hidden_size=32, intermediate_size=64, **dropout)
    cached = DualEncoder(encoder, spec, EmbeddingSettings(mini_batch_size=size)).train()
    reference = copy.deepcopy(cached)

    torch.manual_seed(1)
    cuts = [slice(i, i + size) for i in range(0, len(batch["input_ids"]), size)]
    ids, mask = batch["input_ids"], batch["attention_mask"]
    pieces = [embed_batch(reference.encoder, ids[cut], mask[cut], spec) for cut in cuts]
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
