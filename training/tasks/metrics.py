"""Evaluation metrics, computed locally: scikit-learn and SciPy for classification, seqeval for NER, the
official SQuAD v1.1 (and v2.0) rules for QA. Every score is on 0-1; a ratio with a zero denominator, or a
correlation of a constant series, is 0.0."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np


def _correlation(statistic, x: np.ndarray, y: np.ndarray) -> float:
    # SciPy returns NaN for a constant series; 0.0 keeps --metric_for_best_model comparisons meaningful.
    return float(statistic(x, y)[0]) if np.ptp(x) > 0 and np.ptp(y) > 0 else 0.0


def classification_metrics(logits: np.ndarray, labels: np.ndarray, problem_type: str) -> dict:
    """Accuracy, macro F1 and MCC (single-label); Pearson, Spearman and MSE (regression); subset accuracy, micro
    and macro F1 at sigmoid > 0.5 (multi-label)."""
    import scipy.stats
    from sklearn import metrics as sk

    logits, labels = np.asarray(logits), np.asarray(labels)
    if problem_type == "regression":
        scores = logits.reshape(len(logits), -1)[:, 0].astype(np.float64)
        labels = labels.reshape(len(labels)).astype(np.float64)
        return {
            "pearson": _correlation(scipy.stats.pearsonr, scores, labels),
            "spearman": _correlation(scipy.stats.spearmanr, scores, labels),
            "mse": float(sk.mean_squared_error(labels, scores)),
        }
    if problem_type == "multi_label_classification":
        predictions, references = (logits > 0).astype(int), (labels > 0.5).astype(int)
        # Binary F1 per column (scikit-learn would read a single label column as one binary task).
        columns = [
            sk.f1_score(truth, guess, zero_division=0) for truth, guess in zip(references.T, predictions.T)
        ]
        return {
            "subset_accuracy": float(sk.accuracy_score(references, predictions)),
            "micro_f1": float(sk.f1_score(references.ravel(), predictions.ravel(), zero_division=0)),
            "macro_f1": float(np.mean(columns)),
        }
    predictions = logits.argmax(axis=-1)  # single-label
    # With one class in all, MCC is undefined (0.0); scikit-learn would also warn about the confusion matrix.
    one_class = len(np.union1d(labels, predictions)) < 2
    return {
        "accuracy": float(sk.accuracy_score(labels, predictions)),
        "macro_f1": float(sk.f1_score(labels, predictions, average="macro", zero_division=0)),
        "matthews_correlation": 0.0 if one_class else float(sk.matthews_corrcoef(labels, predictions)),
    }


def not_learned(predictions: Sequence, references: Sequence, unit: str = "example") -> str | None:
    """One line saying that single-label predictions show nothing learned yet, else None: one class for every
    ``unit`` although the references hold several, or chance level (independent of the references by a
    chi-square test, p >= 0.05, or no better than the majority class on both accuracy and macro-F1)."""
    import scipy.stats
    from sklearn import metrics as sk

    predictions, references = [str(p) for p in predictions], [str(r) for r in references]
    classes = len(set(references))
    if classes < 2:
        return None
    if len(set(predictions)) == 1:
        return f"The model predicts a single class ({predictions[0]}) for every validation {unit}"
    majority, count = Counter(references).most_common(1)[0]
    share = count / len(references)
    constant_f1 = 2 * share / (1 + share) / classes
    accuracy = sk.accuracy_score(references, predictions)
    macro_f1 = sk.f1_score(references, predictions, average="macro", zero_division=0)
    table = sk.confusion_matrix(references, predictions)  # rows and columns: every label of either list
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    independent = scipy.stats.chi2_contingency(table).pvalue >= 0.05
    if not independent and (accuracy > share or macro_f1 > constant_f1):
        return None
    return (
        f"The model scores at chance level (accuracy {accuracy:.3f}, macro-F1 {macro_f1:.3f}; answering "
        f"{majority} for every validation {unit} scores {share:.3f} and {constant_f1:.3f})"
    )


def _seqeval_tag(tag: str | None) -> str:
    """``tag`` as seqeval reads it: ``""`` and ``None`` are ``"O"``, a bare type such as ``"PER"`` is an
    inside tag of that type (IO scheme); a prefix other than B-, I-, E-, S- is refused."""
    if tag in ("O", "", None):
        return "O"
    prefix, dash, _ = tag.partition("-")
    if prefix in ("B", "I", "E", "S"):
        return tag
    if not dash:
        return f"I-{tag}"
    raise ValueError(
        f"tag {tag!r} is not a BIO/IOBES tag; expected 'O' or a prefix B-, I-, E-, S- before the type."
    )


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities of one IOB1/IOB2/IOBES/IO tag sequence as ``(type, first_index, last_index)``, both inclusive."""
    from seqeval.metrics.sequence_labeling import get_entities as seqeval_entities

    return seqeval_entities([_seqeval_tag(tag) for tag in tags])


def entity_metrics(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> dict:
    """Entity-level precision, recall and F1 as ``conlleval`` reports them (type, start and end must all match),
    token ``accuracy``, the entity counts and ``per_type`` scores."""
    from seqeval.metrics import accuracy_score
    from seqeval.metrics.sequence_labeling import get_entities as seqeval_entities
    from seqeval.metrics.sequence_labeling import precision_recall_fscore_support

    guess = [[_seqeval_tag(tag) for tag in sentence] for sentence in predictions]
    gold = [[_seqeval_tag(tag) for tag in sentence] for sentence in references]
    # Over a list of sentences, seqeval's offsets run on across them: an entity is (type, start, end).
    guessed, actual = set(seqeval_entities(guess)), set(seqeval_entities(gold))
    by_type = precision_recall_fscore_support(gold, guess, average=None, zero_division=0)
    per_type = {
        name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
        for name, p, r, f, s in zip(sorted({entity[0] for entity in guessed | actual}), *by_type)
    }
    precision, recall, f1, _ = precision_recall_fscore_support(gold, guess, average="micro", zero_division=0)
    return {
        "precision": float(precision),
        "recall": float(recall),
        "f1": float(f1),
        "accuracy": float(accuracy_score(gold, guess)),
        "num_predicted_entities": len(guessed),
        "num_gold_entities": len(actual),
        "num_correct_entities": len(guessed & actual),
        "per_type": per_type,
    }


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace (SQuAD v1.1)."""
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1_score(prediction: str, ground_truth: str, version_2: bool = False) -> float:
    """Token-overlap F1 of normalised answers (official v1.1; with ``version_2``, the v2.0 rule that an
    empty answer on either side scores 1 only when both are empty)."""
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(ground_truth).split()
    if version_2 and (not predicted or not gold):
        return float(predicted == gold)
    same = sum((Counter(predicted) & Counter(gold)).values())
    return 2 * same / (len(predicted) + len(gold)) if same else 0.0  # 2PR / (P + R), in counts


def squad_metrics(predictions: dict, references: dict, version_2: bool = False) -> dict:
    """Exact match and F1 of ``{id: text}`` predictions against ``{id: [gold texts]}``, each question against its
    best-matching answer; a missing prediction scores 0 (``num_unanswered``). With ``version_2`` a question
    without gold answers expects ``""``, and ``HasAns_*``/``NoAns_*`` splits are reported."""
    exact, f1, missing = {}, {}, 0
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
        exact[qid] = max(float(normalize_answer(prediction) == normalize_answer(g)) for g in gold_answers)
        f1[qid] = max(f1_score(prediction, gold, version_2) for gold in gold_answers)
    total = len(references)
    result = {
        "exact_match": sum(exact.values()) / total,
        "f1": sum(f1.values()) / total,
        "total": total,
        "num_unanswered": missing,
    }
    if version_2:
        for name, keep in (("HasAns", True), ("NoAns", False)):
            ids = [qid for qid, gold in references.items() if any(normalize_answer(a) for a in gold) == keep]
            if ids:
                result[f"{name}_exact"] = sum(exact[q] for q in ids) / len(ids)
                result[f"{name}_f1"] = sum(f1[q] for q in ids) / len(ids)
                result[f"{name}_total"] = len(ids)
    return result
