# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Sentence similarity on scored pairs: data, losses and the evaluation (Spearman / Pearson of cosine similarity).

Data are ``(sentence1, sentence2, score)`` rows (:func:`load_scored_pairs`): TSV, CSV or JSON lines with those
columns, as the STS Benchmark ships them (score 0 to 5; any range works). :class:`ScoredPairCollator` puts the
B first sentences, then the B second sentences of a batch into one padded batch; ``labels`` are the scores.

Losses on the two embeddings of each pair:

* :func:`cosent_loss` (CoSENT, Su 2022): ``log(1 + sum exp(scale * (cos_j - cos_i)))`` over every two pairs of
  the batch whose gold scores say ``i`` is more similar than ``j``. It only uses the order of the scores, so
  their range does not matter, and it compares pairs across the whole batch (on several processes, the
  global batch: the cosines are gathered).
* :func:`cosine_mse_loss`: the squared difference between each pair's cosine and its score mapped to [0, 1]
  (sentence-transformers' ``CosineSimilarityLoss``).

:func:`similarity_metrics` is what ``briskbert evaluate-similarity`` reports and what fine-tuning on scored
pairs validates with: Spearman's rank correlation (ties get their average rank) and Pearson's correlation
between the cosine similarity of each pair's embeddings and the gold scores, in [-1, 1].
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from briskbert.errors import SettingError
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.retrieval.dense import encode_texts
from briskbert.training.data.task_data import DataError, load_table
from briskbert.training.engine.distributed import gather_with_grad, gather_with_offset
from briskbert.training.retrieval.settings import check_scored_pair_file


@dataclass(frozen=True)
class ScoredPair:
    sentence1: str
    sentence2: str
    score: float


# ------------------------------------------------------------------------------------------------ data
def load_scored_pairs(path: str, name: str = "train_file") -> list[ScoredPair]:
    """``(sentence1, sentence2, score)`` rows of a TSV, CSV or JSON lines file (other columns are ignored);
    errors name the setting ``name``."""
    check_scored_pair_file(path, name)
    pairs = []
    for number, row in enumerate(load_table(path, name), start=2 if path.endswith((".tsv", ".csv")) else 1):
        try:
            score = float(row["score"])
        except (TypeError, ValueError):
            raise SettingError(
                name, f"{path}: row {number} has score {row['score']!r}, not a number."
            ) from None
        if not np.isfinite(score):
            raise SettingError(name, f"{path}: row {number} has score {score}; give a finite number.")
        first, second = row["sentence1"], row["sentence2"]
        if not all(isinstance(text, str) and text.strip() for text in (first, second)):
            raise SettingError(name, f"{path}: row {number} has an empty or non-text sentence1/sentence2.")
        pairs.append(ScoredPair(first, second, score))
    return pairs


def score_range(pairs: list[ScoredPair]) -> tuple[float, float]:
    scores = [pair.score for pair in pairs]
    low, high = min(scores), max(scores)
    if low == high:
        raise DataError(f"every pair has the score {low}: scored pairs need at least two different scores.")
    return low, high


class ScoredPairCollator:
    """``list[ScoredPair]`` -> ``{"labels": (B,) scores, "input_ids", "attention_mask": (2B, L)}``: the B first
    sentences, then the B second sentences, in one padded batch."""

    def __init__(self, tokenizer, max_seq_length: int):
        self.tokenizer, self.max_seq_length = tokenizer, max_seq_length

    def __call__(self, pairs: list[ScoredPair]) -> dict:
        texts = [pair.sentence1 for pair in pairs] + [pair.sentence2 for pair in pairs]
        encoded = self.tokenizer(
            texts, truncation=True, max_length=self.max_seq_length, padding=True, return_tensors="pt"
        )
        return {
            "labels": torch.tensor([pair.score for pair in pairs], dtype=torch.float32),
            "input_ids": encoded["input_ids"],
            "attention_mask": encoded["attention_mask"],
        }


# ---------------------------------------------------------------------------------------------- losses
def cosent_loss(
    first: torch.Tensor, second: torch.Tensor, scores: torch.Tensor, scale: float
) -> torch.Tensor:
    """CoSENT over the global batch: ``log(1 + sum over (i, j) with score_i > score_j of
    exp(scale * (cos_j - cos_i)))``. On several processes every process computes the same global loss from
    the gathered cosines (the loop's scaling then averages it back to one)."""
    cosines = F.cosine_similarity(first.float(), second.float(), dim=-1) * scale
    cosines, scores = gather_with_grad(cosines), gather_with_offset(scores.float())[0]
    # differences[i, j] = cos_i - cos_j, counted where pair i should score lower than pair j.
    differences = cosines[:, None] - cosines[None, :]
    differences = differences.masked_fill(~(scores[:, None] < scores[None, :]), float("-inf"))
    return torch.logsumexp(torch.cat([differences.new_zeros(1), differences.flatten()]), dim=0)


def cosine_mse_loss(
    first: torch.Tensor, second: torch.Tensor, scores: torch.Tensor, scores_from: tuple[float, float]
) -> torch.Tensor:
    """Mean squared difference between each pair's cosine similarity and its score mapped from
    ``scores_from = (low, high)`` to [0, 1]."""
    low, high = scores_from
    targets = (scores.float() - low) / (high - low)
    return F.mse_loss(F.cosine_similarity(first.float(), second.float(), dim=-1), targets)


# ------------------------------------------------------------------------------------------ evaluation
def similarity_metrics(cosines, scores) -> dict[str, float]:
    """Spearman and Pearson correlation of predicted ``cosines`` with gold scores."""
    from scipy.stats import ConstantInputWarning, pearsonr, spearmanr

    if len(cosines) < 2:
        raise DataError("similarity evaluation needs at least two scored pairs.")
    with warnings.catch_warnings():  # a constant series has no correlation: NaN, without a warning
        warnings.simplefilter("ignore", ConstantInputWarning)
        return {
            "spearman": float(spearmanr(cosines, scores).statistic),
            "pearson": float(pearsonr(cosines, scores).statistic),
            "num_pairs": len(cosines),
        }


def evaluate_similarity(
    encoder, tokenizer, pairs: list[ScoredPair], spec: EmbeddingSpec, batch_size: int = 64
) -> dict[str, float]:
    """:func:`similarity_metrics` of the cosine similarity of each pair's two embeddings (each distinct
    sentence embedded once)."""
    sentences = list(dict.fromkeys([p.sentence1 for p in pairs] + [p.sentence2 for p in pairs]))
    vectors = encode_texts(encoder, tokenizer, sentences, spec, batch_size, "encoding sentences")
    row = {sentence: index for index, sentence in enumerate(sentences)}
    first = vectors[[row[p.sentence1] for p in pairs]]
    second = vectors[[row[p.sentence2] for p in pairs]]
    cosines = F.cosine_similarity(first, second, dim=-1).numpy()
    return similarity_metrics(cosines, [pair.score for pair in pairs])


def evaluate_scored_pairs(model, dataloader, accelerator) -> dict:
    """``evaluate`` of the embedding task on scored pairs: Spearman / Pearson over the validation pairs,
    gathered from every process (the duplicates that even out the last batch left out)."""
    from briskbert.training.engine.evaluation import evaluation_loop

    def cosines_and_scores(batch, outputs) -> dict:
        cosines = F.cosine_similarity(
            outputs.query_embeddings.float(), outputs.candidate_embeddings.float(), dim=-1
        )
        return {"cosine": cosines, "score": batch["labels"].float()}

    collected = evaluation_loop(model, dataloader, accelerator, cosines_and_scores)
    metrics = similarity_metrics(collected["cosine"].numpy(), collected["score"].numpy())
    return {"spearman": metrics["spearman"], "pearson": metrics["pearson"]}
