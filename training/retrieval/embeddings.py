# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Contrastive fine-tuning of a sentence-embedding model (a dual encoder) with in-batch negatives.

Training data are (query, positive[, negative]) pairs (:func:`load_pairs`): JSON lines with
``query``/``positive``/``negative`` keys, or a SQuAD-format file where each question is paired with its
paragraph. :class:`PairCollator` puts the queries, then the positives, then the negatives of a batch into
ONE padded batch, so the encoder runs once per step over all texts (its unpadded path skips the padding
of short queries next to long passages). ``labels`` (first key, so the loop counts queries as examples)
is each query's positive among the candidate rows.

:class:`DualEncoder` wraps a ``BriskBertModel`` for the shared training loop: its loss is the
multiple-negatives ranking loss (cross-entropy over ``scale`` x cosine similarities of each query with
every candidate of the batch; ``symmetric`` adds the positives-to-queries direction). Candidates with the
same text as a query's own positive (two questions about one paragraph) are masked out rather than
treated as negatives. ``mini_batch_size`` turns on cached gradients (GradCache, Gao et al. 2021): the
embeddings of the whole batch are computed without a graph, the loss's gradient with respect to them is
cached, and the backward pass re-encodes mini-batches with the same dropout and back-propagates that
cached gradient, so memory grows with the mini-batch while the negatives come from the whole batch.
``save_pretrained`` writes the encoder plus the sentence-transformers module files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import ModelOutput

from briskbert.modeling.sentence_transformers_files import (
    EmbeddingSpec,
    write_sentence_transformers_files,
)
from briskbert.training.data.task_data import DataError, load_squad
from briskbert.training.retrieval.dense import embed_batch, encode_texts, exact_search, retrieval_metrics


@dataclass
class Pair:
    query: str
    positive: str
    negative: str | None = None


# ------------------------------------------------------------------------------------------------ data
def is_squad_file(path: str) -> bool:
    if not path.endswith(".json"):
        return False
    with open(path, encoding="utf-8") as handle:
        return handle.read(1).strip() == "{"


def load_pairs(path: str, articles: tuple[int, int] | None = None) -> list[Pair]:
    """(query, positive[, negative]) pairs from JSON lines or, for a ``.json`` SQuAD file, each question with
    its paragraph (``articles`` selects articles ``start..stop-1``)."""
    if not Path(path).is_file():
        raise DataError(f"training file {path!r} does not exist.")
    if is_squad_file(path):
        questions, _ = load_squad(path, articles)
        return [Pair(row["question"], row["context"]) for row in questions]
    if articles is not None:
        raise DataError(f"article ranges apply to SQuAD files; {path} is JSON lines.")
    pairs = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path} line {number} is not JSON ({error}).") from None
        if not isinstance(row.get("query"), str) or not isinstance(row.get("positive"), str):
            raise DataError(
                f"{path} line {number}: expected string fields 'query' and 'positive' (and 'negative')."
            )
        negative = row.get("negative")
        pairs.append(Pair(row["query"], row["positive"], negative if isinstance(negative, str) else None))
    if not pairs:
        raise DataError(f"{path} holds no pairs.")
    with_negative = sum(pair.negative is not None for pair in pairs)
    if 0 < with_negative < len(pairs):
        raise DataError(
            f"{path}: {with_negative} of {len(pairs)} pairs have a 'negative'; give one for every pair or none "
            "(or mine them with --mine_hard_negatives)."
        )
    return pairs


class PairCollator:
    """``list[Pair]`` -> ``{"labels", "input_ids", "attention_mask", "candidate_ids"}``: rows are the B
    queries, the B positives, then the B negatives (when the pairs have them); ``labels[i] = i`` is query
    i's positive among the candidate rows, and ``candidate_ids`` numbers candidates by their text."""

    def __init__(self, tokenizer, max_query_length: int, max_passage_length: int):
        self.tokenizer = tokenizer
        self.max_query_length, self.max_passage_length = max_query_length, max_passage_length

    def __call__(self, pairs: list[Pair]) -> dict:
        candidates = [pair.positive for pair in pairs]
        candidates += [pair.negative for pair in pairs if pair.negative is not None]
        queries = self.tokenizer(
            [pair.query for pair in pairs], truncation=True, max_length=self.max_query_length
        )
        passages = self.tokenizer(candidates, truncation=True, max_length=self.max_passage_length)
        padded = self.tokenizer.pad(
            {"input_ids": queries["input_ids"] + passages["input_ids"]}, padding=True, return_tensors="pt"
        )
        text_numbers: dict[str, int] = {}
        candidate_ids = [text_numbers.setdefault(text, len(text_numbers)) for text in candidates]
        return {
            "labels": torch.arange(len(pairs)),
            "input_ids": padded["input_ids"],
            "attention_mask": padded["attention_mask"],
            "candidate_ids": torch.tensor(candidate_ids),
        }


def mine_hard_negatives(
    encoder, tokenizer, pairs: list[Pair], spec: EmbeddingSpec, batch_size: int = 64
) -> list[Pair]:
    """Each query paired with the passage the given ``encoder`` ranks highest among the training passages
    other than its own positive."""
    passages = list(dict.fromkeys(pair.positive for pair in pairs))
    passage_vectors = encode_texts(encoder, tokenizer, passages, spec, batch_size, "mining: passages")
    query_vectors = encode_texts(
        encoder, tokenizer, [pair.query for pair in pairs], spec, batch_size, "mining: queries"
    )
    _, indices = exact_search(query_vectors, passage_vectors, top_k=min(2, len(passages)))
    mined = []
    for pair, row in zip(pairs, indices.tolist()):
        negative = next((passages[index] for index in row if passages[index] != pair.positive), None)
        mined.append(Pair(pair.query, pair.positive, negative))
    if any(pair.negative is None for pair in mined):
        raise DataError("hard-negative mining needs at least two distinct passages in the training data.")
    return mined


# ----------------------------------------------------------------------------------------------- model
def multiple_negatives_ranking_loss(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    labels: torch.Tensor,
    candidate_ids: torch.Tensor,
    scale: float,
    symmetric: bool = False,
) -> torch.Tensor:
    """Mean over queries of cross-entropy(``scale`` x cos(query, candidates), its positive). Candidates equal
    to a query's positive elsewhere in the batch are masked, not counted as negatives."""
    queries, candidates = F.normalize(queries.float(), dim=-1), F.normalize(candidates.float(), dim=-1)
    scores = scale * queries @ candidates.T
    positive_ids = candidate_ids[labels]
    duplicates = candidate_ids.unsqueeze(0) == positive_ids.unsqueeze(1)
    duplicates[torch.arange(len(labels)), labels] = False
    loss = F.cross_entropy(scores.masked_fill(duplicates, float("-inf")), labels)
    if not symmetric:
        return loss
    # Each positive against the batch's queries; queries sharing that positive are not its negatives.
    reverse = scale * candidates[labels] @ queries.T
    same_positive = positive_ids.unsqueeze(0) == positive_ids.unsqueeze(1)
    same_positive.fill_diagonal_(False)
    reverse_loss = F.cross_entropy(
        reverse.masked_fill(same_positive, float("-inf")), torch.arange(len(labels), device=labels.device)
    )
    return (loss + reverse_loss) / 2


@dataclass
class DualEncoderOutput(ModelOutput):
    loss: torch.Tensor | None = None
    query_embeddings: torch.Tensor | None = None
    candidate_embeddings: torch.Tensor | None = None


@dataclass(frozen=True)
class ContrastiveLossSpec:
    scale: float = 20.0  # 1 / temperature; sentence-transformers' default
    symmetric: bool = False
    mini_batch_size: int | None = None  # cached gradients over mini-batches of this many texts

    def __post_init__(self):
        if self.scale <= 0:
            raise ValueError(f"the similarity scale (1/temperature) must be > 0, got {self.scale}.")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise ValueError(f"the cached-gradient mini-batch size must be >= 1, got {self.mini_batch_size}.")


class DualEncoder(nn.Module):
    """A sentence encoder trained with the multiple-negatives ranking loss, in the shape the shared loop
    expects (``forward(**batch).loss``, ``save_pretrained``)."""

    def __init__(self, encoder, embedding: EmbeddingSpec, loss: ContrastiveLossSpec):
        super().__init__()
        self.encoder, self.embedding, self.loss_spec = encoder, embedding, loss

    def gradient_checkpointing_enable(self, **kwargs):
        self.encoder.gradient_checkpointing_enable(**kwargs)

    def save_pretrained(self, folder, state_dict=None, **kwargs):
        if state_dict is not None:  # gathered from a sharded engine: keys carry this wrapper's prefix
            state_dict = {key.removeprefix("encoder."): value for key, value in state_dict.items()}
        self.encoder.save_pretrained(folder, state_dict=state_dict, **kwargs)
        write_sentence_transformers_files(folder, self.embedding, self.encoder.config.hidden_size)

    def forward(self, input_ids, attention_mask, labels, candidate_ids, **unused) -> DualEncoderOutput:
        if self.training and self.loss_spec.mini_batch_size:
            return self._cached_gradient_forward(input_ids, attention_mask, labels, candidate_ids)
        embeddings = embed_batch(self.encoder, input_ids, attention_mask, self.embedding)
        return self._loss(embeddings, labels, candidate_ids)

    def _loss(self, embeddings, labels, candidate_ids) -> DualEncoderOutput:
        queries, candidates = embeddings[: len(labels)], embeddings[len(labels) :]
        loss = multiple_negatives_ranking_loss(
            queries, candidates, labels, candidate_ids, self.loss_spec.scale, self.loss_spec.symmetric
        )
        return DualEncoderOutput(loss=loss, query_embeddings=queries, candidate_embeddings=candidates)

    def _cached_gradient_forward(self, input_ids, attention_mask, labels, candidate_ids) -> DualEncoderOutput:
        size = self.loss_spec.mini_batch_size
        chunks = [
            (input_ids[i : i + size], attention_mask[i : i + size]) for i in range(0, len(input_ids), size)
        ]
        # 1. Embeddings of every text without a graph, remembering the RNG state so dropout can be replayed.
        rng_states, pieces = [], []
        with torch.no_grad():
            for chunk_ids, chunk_mask in chunks:
                rng_states.append(_rng_state(chunk_ids.device))
                pieces.append(embed_batch(self.encoder, chunk_ids, chunk_mask, self.embedding))
        embeddings = torch.cat(pieces).detach().requires_grad_()
        # 2. The loss and its gradient with respect to the embeddings (cheap: no encoder in this graph).
        with torch.enable_grad():
            output = self._loss(embeddings, labels, candidate_ids)
            (embedding_grad,) = torch.autograd.grad(output.loss, embeddings)
        loss = output.loss.detach().requires_grad_()

        # 3. When the loop back-propagates the loss, re-encode each chunk with its recorded dropout and push
        # the cached gradient (times the loop's scaling of the loss) through the encoder.
        def replay(loss_grad):
            offset = 0
            for (chunk_ids, chunk_mask), state in zip(chunks, rng_states):
                with torch.random.fork_rng(devices=_cuda_devices(chunk_ids.device)), torch.enable_grad():
                    _set_rng_state(state, chunk_ids.device)
                    piece = embed_batch(self.encoder, chunk_ids, chunk_mask, self.embedding)
                    grad = embedding_grad[offset : offset + len(piece)] * loss_grad
                    torch.autograd.backward(piece, grad_tensors=grad.to(piece.dtype))
                offset += len(chunk_ids)
            return loss_grad

        loss.register_hook(replay)
        return DualEncoderOutput(loss=loss)


def _cuda_devices(device: torch.device) -> list:
    return [device] if device.type == "cuda" else []


def _rng_state(device: torch.device):
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(state, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


# ------------------------------------------------------------------------------------------ evaluation
def make_evaluate_fn():
    """``evaluate_fn`` for the loop: retrieval metrics over the validation pairs, the corpus being their
    distinct candidate passages (positives and negatives)."""

    def evaluate(model, dataloader, accelerator) -> dict:
        unwrapped = accelerator.unwrap_model(model)
        queries, candidates, positives = [], {}, []
        for batch in dataloader:
            embeddings = embed_batch(
                unwrapped.encoder, batch["input_ids"], batch["attention_mask"], unwrapped.embedding
            )
            n = len(batch["labels"])
            queries.append(embeddings[:n].float().cpu())
            rows = zip(batch["input_ids"][n:], batch["attention_mask"][n:])
            keys = [
                tuple(ids[mask.bool()].tolist()) for ids, mask in rows
            ]  # a candidate's text, as token ids
            for key, vector in zip(keys, embeddings[n:].float().cpu()):
                candidates.setdefault(key, vector)
            positives.extend(keys[int(label)] for label in batch["labels"])
        keys = list(candidates)
        number = {key: str(index) for index, key in enumerate(keys)}
        _, indices = exact_search(
            torch.cat(queries), torch.stack([candidates[key] for key in keys]), top_k=100
        )
        rankings = {str(q): [str(i) for i in row] for q, row in enumerate(indices.tolist())}
        qrels = {str(q): {number[key]: 1.0} for q, key in enumerate(positives)}
        return retrieval_metrics(rankings, qrels)

    return evaluate
