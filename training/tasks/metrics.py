# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Evaluation metrics, computed locally (``evaluate.load()`` would download code at run time).

Three families, each a set of small pure functions over plain Python / NumPy values:

* sequence classification and regression: :func:`accuracy`, :func:`macro_f1`,
  :func:`matthews_corrcoef` (multi-class, as scikit-learn defines it), :func:`pearson`,
  :func:`spearman` (average ranks for ties, as SciPy does), :func:`multilabel_metrics`, and the
  dispatcher :func:`classification_metrics`;
* named-entity recognition: :func:`get_entities` (chunking exactly as CoNLL's ``conlleval`` script and
  ``seqeval``'s default mode: an ``I-`` tag that follows ``O`` or a different type starts an entity)
  and :func:`entity_metrics` (entity-level precision, recall and F1: an entity counts only when its type,
  start and end all match);
* extractive question answering: :func:`normalize_answer`, :func:`exact_match_score`, :func:`f1_score`
  and :func:`squad_metrics`, line for line the official SQuAD v1.1 evaluation script (and the v2.0 rule
  for unanswerable questions, whose gold answer is the empty string).

Undefined values follow one convention: a ratio whose denominator is zero is 0.0 (scikit-learn's
``zero_division=0``), and so is a correlation of a constant series.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

# --------------------------------------------------------------------------------------------------
# Classification and regression
# --------------------------------------------------------------------------------------------------


def _as_1d(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"`{name}` must be one-dimensional, got shape {array.shape}.")
    return array


def _check_same_length(predictions: np.ndarray, references: np.ndarray) -> None:
    if len(predictions) != len(references):
        raise ValueError(
            f"predictions and references differ in length ({len(predictions)} vs {len(references)})."
        )
    if len(predictions) == 0:
        raise ValueError("cannot compute a metric over zero examples (the evaluation set is empty).")


def _safe_divide(numerator: float, denominator: float) -> float:
    return float(numerator) / float(denominator) if denominator else 0.0


def accuracy(predictions: Sequence, references: Sequence) -> float:
    """Fraction of examples whose predicted label equals the reference label."""
    predictions, references = _as_1d(predictions, "predictions"), _as_1d(references, "references")
    _check_same_length(predictions, references)
    return float(np.mean(predictions == references))


def per_class_f1(predictions: Sequence, references: Sequence, labels: Iterable | None = None) -> dict:
    """F1 of each label (one-vs-rest). ``labels`` defaults to every label in either sequence."""
    predictions, references = _as_1d(predictions, "predictions"), _as_1d(references, "references")
    _check_same_length(predictions, references)
    if labels is None:
        labels = sorted(set(predictions.tolist()) | set(references.tolist()))
    scores = {}
    for label in labels:
        true_positive = int(np.sum((predictions == label) & (references == label)))
        predicted = int(np.sum(predictions == label))
        actual = int(np.sum(references == label))
        # F1 = 2TP / (2TP + FP + FN) = 2TP / (predicted + actual); 0 when the label never occurs.
        scores[label] = _safe_divide(2 * true_positive, predicted + actual)
    return scores


def macro_f1(predictions: Sequence, references: Sequence, labels: Iterable | None = None) -> float:
    """Unweighted mean of per-label F1 over ``labels`` (default: labels seen in either sequence),
    as ``sklearn.metrics.f1_score(average="macro", zero_division=0)``."""
    scores = per_class_f1(predictions, references, labels)
    return float(np.mean(list(scores.values())))


def matthews_corrcoef(predictions: Sequence, references: Sequence) -> float:
    """Matthews correlation coefficient, multi-class form (Gorodkin 2004; scikit-learn's definition).

    With the confusion matrix C (rows: truth, columns: prediction), c = trace, s = total,
    t_k / p_k the true / predicted counts of class k:
    MCC = (c·s − Σ p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)); 0.0 when the denominator is 0.
    """
    predictions, references = _as_1d(predictions, "predictions"), _as_1d(references, "references")
    _check_same_length(predictions, references)
    labels = sorted(set(predictions.tolist()) | set(references.tolist()))
    index = {label: i for i, label in enumerate(labels)}
    confusion = np.zeros((len(labels), len(labels)), dtype=np.float64)
    for truth, guess in zip(references.tolist(), predictions.tolist()):
        confusion[index[truth], index[guess]] += 1
    true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, total = np.trace(confusion), confusion.sum()
    covariance = correct * total - predicted_counts @ true_counts
    denominator = math.sqrt(
        (total**2 - predicted_counts @ predicted_counts) * (total**2 - true_counts @ true_counts)
    )
    return _safe_divide(covariance, denominator)


def pearson(predictions: Sequence[float], references: Sequence[float]) -> float:
    """Pearson correlation coefficient; 0.0 when either series is constant (undefined)."""
    x = _as_1d(predictions, "predictions").astype(np.float64)
    y = _as_1d(references, "references").astype(np.float64)
    _check_same_length(x, y)
    x, y = x - x.mean(), y - y.mean()
    return _safe_divide(float(x @ y), math.sqrt(float(x @ x) * float(y @ y)))


def rank_with_ties(values: Sequence[float]) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span (``scipy.stats.rankdata``)."""
    values = _as_1d(values, "values")
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0  # mean of ranks start+1 .. end+1
        start = end + 1
    return ranks


def spearman(predictions: Sequence[float], references: Sequence[float]) -> float:
    """Spearman rank correlation: Pearson correlation of the tie-averaged ranks."""
    return pearson(rank_with_ties(predictions), rank_with_ties(references))


def multilabel_metrics(predictions: np.ndarray, references: np.ndarray) -> dict:
    """Metrics for multi-label classification over 0/1 matrices of shape (examples, labels).

    ``subset_accuracy``: every label of an example right; ``micro_f1``: F1 over all (example, label)
    decisions; ``macro_f1``: mean over label columns of each column's F1 (0 for a column never
    predicted nor present).
    """
    predictions = np.asarray(predictions).astype(bool)
    references = np.asarray(references).astype(bool)
    if predictions.shape != references.shape or predictions.ndim != 2:
        raise ValueError(
            f"multi-label predictions and references must be equal-shaped 2-D 0/1 matrices, got "
            f"{predictions.shape} and {references.shape}."
        )
    if len(predictions) == 0:
        raise ValueError("cannot compute a metric over zero examples (the evaluation set is empty).")
    true_positive = (predictions & references).sum(axis=0)
    column_f1 = [
        _safe_divide(2 * tp, p + r)
        for tp, p, r in zip(true_positive, predictions.sum(axis=0), references.sum(axis=0))
    ]
    return {
        "subset_accuracy": float(np.mean(np.all(predictions == references, axis=1))),
        "micro_f1": _safe_divide(2 * true_positive.sum(), predictions.sum() + references.sum()),
        "macro_f1": float(np.mean(column_f1)),
    }


def classification_metrics(logits: np.ndarray, labels: np.ndarray, problem_type: str) -> dict:
    """The metric set of a sequence-classification task, from raw model outputs.

    ``problem_type`` is the config's: ``"single_label_classification"`` (accuracy, macro F1, MCC),
    ``"regression"`` (Pearson, Spearman, MSE; ``logits`` of shape (n,) or (n, 1)) or
    ``"multi_label_classification"`` (logits > 0, i.e. sigmoid > 0.5; see :func:`multilabel_metrics`).
    """
    logits, labels = np.asarray(logits), np.asarray(labels)
    if problem_type == "regression":
        scores = logits.reshape(len(logits), -1)[:, 0].astype(np.float64)
        labels = labels.reshape(len(labels)).astype(np.float64)
        return {
            "pearson": pearson(scores, labels),
            "spearman": spearman(scores, labels),
            "mse": float(np.mean((scores - labels) ** 2)),
        }
    if problem_type == "multi_label_classification":
        return multilabel_metrics(logits > 0, labels > 0.5)
    if problem_type == "single_label_classification":
        predictions = logits.argmax(axis=-1)
        return {
            "accuracy": accuracy(predictions, labels),
            "macro_f1": macro_f1(predictions, labels),
            "matthews_correlation": matthews_corrcoef(predictions, labels),
        }
    raise ValueError(
        f"unknown problem_type {problem_type!r}; expected 'single_label_classification', 'regression' "
        "or 'multi_label_classification'."
    )


# --------------------------------------------------------------------------------------------------
# Named-entity recognition (CoNLL / seqeval default mode)
# --------------------------------------------------------------------------------------------------


def _split_tag(tag: str) -> tuple[str, str]:
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", "")``; a bare ``"B"`` -> ``("B", "")``."""
    if tag in ("O", "", None):
        return "O", ""
    prefix, _, entity_type = tag.partition("-")
    if prefix not in ("B", "I", "E", "S") and entity_type == "":
        return "I", prefix  # a bare type such as "PER" is an inside tag of that type (IO scheme)
    if prefix not in ("B", "I", "E", "S"):
        raise ValueError(
            f"tag {tag!r} is not a BIO/IOBES tag; expected 'O' or a prefix B-, I-, E-, S- before the type."
        )
    return prefix, entity_type


def _ends_chunk(prev_prefix: str, prefix: str, prev_type: str, entity_type: str) -> bool:
    # conlleval's endOfChunk: does the chunk that the previous tag belongs to end before this tag?
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return prev_prefix != "O" and prev_type != entity_type


def _starts_chunk(prev_prefix: str, prefix: str, prev_type: str, entity_type: str) -> bool:
    # conlleval's startOfChunk: does a chunk start at this tag?
    if prefix in ("B", "S"):
        return True
    if prev_prefix in ("E", "S", "O") and prefix in ("E", "I"):
        return True
    return prefix != "O" and prev_type != entity_type


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities of one tag sequence as ``(type, first_index, last_index)`` (both inclusive).

    Accepts IOB1, IOB2 and IOBES. Like ``conlleval`` (and ``seqeval`` in its default mode), an ``I-X``
    after ``O`` or after a tag of another type starts a new entity; ``B-X`` always starts one.
    ``get_entities(["I-PER", "I-PER", "O", "B-LOC", "I-ORG"])`` ->
    ``[("PER", 0, 1), ("LOC", 3, 3), ("ORG", 4, 4)]``.
    """
    entities = []
    prev_prefix, prev_type, start = "O", "", None
    for index, tag in enumerate(list(tags) + ["O"]):  # a trailing "O" closes the last entity
        prefix, entity_type = _split_tag(tag)
        if start is not None and _ends_chunk(prev_prefix, prefix, prev_type, entity_type):
            entities.append((prev_type, start, index - 1))
            start = None
        if _starts_chunk(prev_prefix, prefix, prev_type, entity_type):
            start = index
        prev_prefix, prev_type = prefix, entity_type
    return entities


def entity_metrics(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> dict:
    """Entity-level precision, recall and F1 over sentences of tags, as ``conlleval`` reports them.

    An entity is correct only when type, start and end all match a gold entity of the same sentence.
    Returns ``precision``, ``recall``, ``f1``, token ``accuracy``, the counts, and per-type scores
    under ``per_type`` (``{type: {"precision", "recall", "f1", "support"}}``).
    """
    if len(predictions) != len(references):
        raise ValueError(
            f"got {len(predictions)} predicted and {len(references)} gold sentences; they must pair up."
        )
    if len(references) == 0:
        raise ValueError("cannot compute entity metrics over zero sentences (the evaluation set is empty).")
    correct, predicted, gold = Counter(), Counter(), Counter()
    correct_tokens = total_tokens = 0
    for sentence, (guess_tags, gold_tags) in enumerate(zip(predictions, references)):
        if len(guess_tags) != len(gold_tags):
            raise ValueError(
                f"sentence {sentence}: {len(guess_tags)} predicted tags for {len(gold_tags)} gold tags."
            )
        guessed, actual = set(get_entities(guess_tags)), set(get_entities(gold_tags))
        predicted.update(entity[0] for entity in guessed)
        gold.update(entity[0] for entity in actual)
        correct.update(entity[0] for entity in guessed & actual)
        correct_tokens += sum(g == t for g, t in zip(guess_tags, gold_tags))
        total_tokens += len(gold_tags)

    def scores(n_correct: int, n_predicted: int, n_gold: int) -> tuple[float, float, float]:
        precision, recall = _safe_divide(n_correct, n_predicted), _safe_divide(n_correct, n_gold)
        return precision, recall, _safe_divide(2 * precision * recall, precision + recall)

    per_type = {}
    for entity_type in sorted(set(gold) | set(predicted)):
        p, r, f = scores(correct[entity_type], predicted[entity_type], gold[entity_type])
        per_type[entity_type] = {"precision": p, "recall": r, "f1": f, "support": gold[entity_type]}
    precision, recall, f1 = scores(sum(correct.values()), sum(predicted.values()), sum(gold.values()))
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "accuracy": _safe_divide(correct_tokens, total_tokens),
        "num_predicted_entities": sum(predicted.values()),
        "num_gold_entities": sum(gold.values()),
        "num_correct_entities": sum(correct.values()),
        "per_type": per_type,
    }


# --------------------------------------------------------------------------------------------------
# Extractive question answering (official SQuAD evaluation)
# --------------------------------------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace (SQuAD v1.1)."""
    text = text.lower()
    exclude = set(string.punctuation)
    text = "".join(ch for ch in text if ch not in exclude)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str, version_2: bool = False) -> float:
    """Token-overlap F1 of normalised answers (official v1.1; with ``version_2``, the v2.0 rule that an
    empty answer on either side scores 1 only when both are empty)."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    if version_2 and (not prediction_tokens or not ground_truth_tokens):
        return float(prediction_tokens == ground_truth_tokens)
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def squad_metrics(predictions: dict, references: dict, version_2: bool = False) -> dict:
    """Exact match and F1 (in percent) of ``predictions`` (``{id: text}``) against ``references``
    (``{id: [gold texts]}``), each question scored against its best-matching gold answer.

    As in the official script, a question with no prediction scores 0 (and is counted in
    ``num_unanswered``). With ``version_2``, a question without gold answers is unanswerable: its gold
    answer is ``""`` and the prediction must be ``""``; ``HasAns_*``/``NoAns_*`` splits are reported.
    """
    if not references:
        raise ValueError("cannot compute SQuAD metrics over zero questions (the evaluation set is empty).")
    exact = {}
    f1 = {}
    missing = 0
    for qid, gold_answers in references.items():
        gold_answers = [a for a in gold_answers if normalize_answer(a)] if version_2 else list(gold_answers)
        if not gold_answers:
            if not version_2:
                raise ValueError(
                    f"question {qid!r} has no gold answer; use version_2=True for SQuAD v2.0 data."
                )
            gold_answers = [""]
        if qid not in predictions:
            missing += 1
            exact[qid] = f1[qid] = 0.0
            continue
        prediction = predictions[qid]
        exact[qid] = max(exact_match_score(prediction, gold) for gold in gold_answers)
        f1[qid] = max(f1_score(prediction, gold, version_2) for gold in gold_answers)
    total = len(references)
    result = {
        "exact_match": 100.0 * sum(exact.values()) / total,
        "f1": 100.0 * sum(f1.values()) / total,
        "total": total,
        "num_unanswered": missing,
    }
    if version_2:
        for name, keep in (("HasAns", True), ("NoAns", False)):
            ids = [qid for qid, gold in references.items() if any(normalize_answer(a) for a in gold) == keep]
            if ids:
                result[f"{name}_exact"] = 100.0 * sum(exact[q] for q in ids) / len(ids)
                result[f"{name}_f1"] = 100.0 * sum(f1[q] for q in ids) / len(ids)
                result[f"{name}_total"] = len(ids)
    return result
