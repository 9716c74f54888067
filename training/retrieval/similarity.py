# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Scored ``(sentence1, sentence2, score)`` pairs: the CoSENT and cosine-MSE losses, and Spearman / Pearson of the
pairs' cosine with the gold scores."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from briskbert.errors import SettingError
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec
from briskbert.retrieval.dense import encode_texts
from briskbert.retrieval.settings import SCORED_PAIR_COLUMNS
from briskbert.training.data.task_data import DataError, load_table
from briskbert.training.engine.distributed import gather_with_grad, gather_with_offset


@dataclass(frozen=True)
class ScoredPair:
    sentence1: str
    sentence2: str
    score: float


def load_scored_pairs(path: str, name: str = "train_file", rows=None) -> list[ScoredPair]:
    """The scored pairs of a TSV, CSV or JSON lines file (``rows``: its table, when already read)."""
    rows = load_table(path, name) if rows is None else rows
    missing = [column for column in SCORED_PAIR_COLUMNS if column not in rows.column_names]
    if missing:
        raise SettingError(
            name,
            f"{path} lacks the column(s) {', '.join(missing)}: give a TSV, CSV or JSON lines file with "
            f"{', '.join(SCORED_PAIR_COLUMNS)} (found {', '.join(rows.column_names) or 'no header'}).",
        )
    pairs = []
    for number, row in enumerate(rows, start=2 if path.endswith((".tsv", ".csv")) else 1):
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


@dataclass
class ScoredPairCollator:
    """The B first sentences, then the B second sentences, in one padded batch; ``labels`` are the scores."""

    tokenizer: object
    max_seq_length: int

    def __call__(self, pairs: list[ScoredPair]) -> dict:
        texts = [pair.sentence1 for pair in pairs] + [pair.sentence2 for pair in pairs]
        encoded = self.tokenizer(
            texts, truncation=True, max_length=self.max_seq_length, padding=True, return_tensors="pt"
        )
        return {"labels": torch.tensor([pair.score for pair in pairs], dtype=torch.float32), **encoded}


def cosent_loss(
    first: torch.Tensor, second: torch.Tensor, scores: torch.Tensor, scale: float
) -> torch.Tensor:
    """CoSENT (Su 2022) over the global batch: ``log(1 + sum over score_i > score_j of exp(scale * (cos_j -
    cos_i)))``; sentence-transformers' CoSENTLoss equals it on one process."""
    cosines = F.cosine_similarity(first.float(), second.float(), dim=-1) * scale
    cosines, scores = gather_with_grad(cosines), gather_with_offset(scores.float())[0]
    # differences[i, j] = cos_i - cos_j, counted where pair i should score lower than pair j.
    differences = cosines[:, None] - cosines[None, :]
    differences = differences.masked_fill(~(scores[:, None] < scores[None, :]), float("-inf"))
    return torch.logsumexp(torch.cat([differences.new_zeros(1), differences.flatten()]), dim=0)


def cosine_mse_loss(
    first: torch.Tensor, second: torch.Tensor, scores: torch.Tensor, scores_from: tuple[float, float]
) -> torch.Tensor:
    """Mean squared difference of each pair's cosine and its score mapped from ``(low, high)`` to [0, 1]
    (sentence-transformers' ``CosineSimilarityLoss``)."""
    low, high = scores_from
    targets = (scores.float() - low) / (high - low)
    return F.mse_loss(F.cosine_similarity(first.float(), second.float(), dim=-1), targets)


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
    """:func:`similarity_metrics` of each pair's cosine."""
    sentences = list(dict.fromkeys([p.sentence1 for p in pairs] + [p.sentence2 for p in pairs]))
    vectors = encode_texts(encoder, tokenizer, sentences, spec, batch_size, "encoding sentences")
    row = {sentence: index for index, sentence in enumerate(sentences)}
    first = vectors[[row[p.sentence1] for p in pairs]]
    second = vectors[[row[p.sentence2] for p in pairs]]
    cosines = F.cosine_similarity(first, second, dim=-1).numpy()
    return similarity_metrics(cosines, [pair.score for pair in pairs])


def evaluate_scored_pairs(model, dataloader, accelerator) -> dict:
    """Spearman / Pearson over the validation pairs of every process."""
    from briskbert.training.engine.evaluation import evaluation_loop

    def cosines_and_scores(batch, outputs) -> dict:
        cosines = F.cosine_similarity(
            outputs.query_embeddings.float(), outputs.candidate_embeddings.float(), dim=-1
        )
        return {"cosine": cosines, "score": batch["labels"].float()}

    collected = evaluation_loop(model, dataloader, accelerator, cosines_and_scores)
    metrics = similarity_metrics(collected["cosine"].numpy(), collected["score"].numpy())
    return {"spearman": metrics["spearman"], "pearson": metrics["pearson"]}
