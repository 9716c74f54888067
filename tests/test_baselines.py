"""The majority-class rate of a classification job's evaluation data, stated at every evaluation and warned
about when the model is not above it (the re-ranker's chance level is in test_reranking)."""

from types import SimpleNamespace

import torch

from briskbert.training.tasks.classification import ClassificationTask, LabelSpec


class _GivenLogits(torch.nn.Module):
    """A stand-in classifier whose logits are the ones each batch carries."""

    def forward(self, given, labels):
        return SimpleNamespace(logits=given)


class _OneProcess:
    def gather_for_metrics(self, value):
        return value


def evaluate(predicted: list[int], labels: list[int]) -> tuple[dict, str | None]:
    task = ClassificationTask.__new__(ClassificationTask)  # its evaluation only, without files to read
    task.spec = LabelSpec("single_label_classification", ["common", "rare"])
    given = torch.nn.functional.one_hot(torch.tensor(predicted), 2).float()
    metrics = task.evaluate(_GivenLogits(), [{"given": given, "labels": torch.tensor(labels)}], _OneProcess())
    return metrics, task.verdict


def test_classification_states_the_majority_class_rate_and_warns_at_it():
    """180 common, 20 rare: a model at accuracy 0.9 is not above answering common, and is told so."""
    labels = [0] * 180 + [1] * 20
    tied = [0] * 160 + [1] * 20 + [1] * 20
    metrics, verdict = evaluate(tied, labels)
    assert metrics["accuracy"] == 0.9 and metrics["majority_accuracy"] == 0.9
    assert verdict == (
        "eval_accuracy 0.9000 is not above 0.9000, what answering common for every example scores on the same "
        "evaluation data"
    )
    metrics, verdict = evaluate([0] * 161 + [1] * 19 + [1] * 20, labels)
    assert metrics["accuracy"] > 0.9 and verdict is None


def test_ner_states_the_majority_tag_rate_and_warns_at_it():
    """180 O words, 20 B-PER: a tagger at token accuracy 0.9 is no better than tagging every word O."""
    from briskbert.training.tasks.ner import NerEvaluator

    id2label = {0: "O", 1: "B-PER"}
    gold = [["O"] * 180 + ["B-PER"] * 20]
    evaluator = NerEvaluator(gold, [list(range(200))], id2label)
    metrics = evaluator([[0] * 160 + [1] * 40])
    assert metrics["accuracy"] == 0.9 and metrics["majority_accuracy"] == 0.9
    assert evaluator.verdict == (
        "eval_accuracy 0.9000 is not above 0.9000, what tagging every word O scores on the same evaluation data"
    )
    metrics = evaluator([[0] * 161 + [1] * 39])
    assert metrics["accuracy"] > 0.9 and evaluator.verdict is None
