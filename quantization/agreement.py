"""How closely the int8 model follows the fp32 one: the check batches, the agreement of every output, and the
accuracy of both on labelled data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from briskbert.errors import SettingError
from briskbert.modeling.export import encode_batch

from .inference import length_batches
from .request import QuantizeRequest

CHECK_BATCHES, CHECK_ROWS = 4, 16


@dataclass(frozen=True)
class Agreement:
    """How closely one output of a candidate follows the fp32 model over the check examples."""

    output: str
    metric: str  # "argmax agreement" or "cosine similarity"
    mean: float  # the share of matching argmaxes, or the mean cosine
    worst: float  # the lowest per-example value (for argmax agreement: the mean again)
    count: int
    unit: str  # "examples" (per-sequence outputs) or "tokens" (per-token outputs, real ones)
    max_abs_difference: float
    threshold: float

    @property
    def passed(self) -> bool:
        return self.mean >= self.threshold

    @property
    def shortfall(self) -> str:
        """Why it did not pass, naming the setting: "last_hidden_state cosine similarity 0.93 < min_cosine 0.95"."""
        setting = "min_agreement" if self.metric == "argmax agreement" else "min_cosine"
        return f"{self.output} {self.metric} {self.mean:.6g} < {setting} {self.threshold:g}"

    def describe(self) -> str:
        worst = f", worst {self.worst:.4f}" if self.metric == "cosine similarity" else ""
        return (
            f"{self.output}: {self.metric} {self.mean:.4f}{worst} over {self.count} {self.unit}, "
            f"max abs difference {self.max_abs_difference:.3g} (threshold {self.threshold:g})"
        )


def check_batches(tokenizer, texts: list[str], max_length: int, multiple_choice: bool) -> list[dict]:
    """CHECK_BATCHES padded batches of CHECK_ROWS text pairs each (from CHECK_BATCHES * (CHECK_ROWS + 1) texts), of
    lengths from a few tokens to max_length."""
    step = CHECK_ROWS + 1
    return [
        encode_batch(tokenizer, texts[i * step : (i + 1) * step], max_length, multiple_choice)
        for i in range(CHECK_BATCHES)
    ]


def agreement_of(
    name: str,
    references: list[torch.Tensor],
    candidates: list[torch.Tensor],
    masks: list[torch.Tensor],
    request: QuantizeRequest,
) -> Agreement:
    """Argmax agreement for logits (over the labels, the vocabulary, or for start/end logits over the real
    tokens), cosine similarity for everything else; per-token outputs are compared at real tokens only."""
    matches, cosines, worst_difference, unit = [], [], 0.0, "examples"
    for reference, candidate, mask in zip(references, candidates, masks):
        reference, candidate = reference.float(), candidate.float()
        per_token = reference.shape[: mask.dim()] == mask.shape
        real = mask.bool()
        if name in ("start_logits", "end_logits"):  # a position over the sequence: padding cannot win
            reference = reference.masked_fill(~real, float("-inf"))
            candidate = candidate.masked_fill(~real, float("-inf"))
            matches.append(reference.argmax(-1) == candidate.argmax(-1))
            worst_difference = max(worst_difference, float((reference - candidate)[real].abs().max()))
            continue
        if per_token:
            reference, candidate, unit = reference[real], candidate[real], "tokens"
        worst_difference = max(worst_difference, float((reference - candidate).abs().max()))
        if "logits" in name:
            matches.append(reference.argmax(-1) == candidate.argmax(-1))
        else:
            cosines.append(nn.functional.cosine_similarity(reference, candidate, dim=-1))
    if matches:
        share = float(torch.cat(matches).float().mean())
        count = int(sum(match.numel() for match in matches))
        return Agreement(
            name, "argmax agreement", share, share, count, unit, worst_difference, request.min_agreement
        )
    cosine = torch.cat(cosines)
    return Agreement(
        name,
        "cosine similarity",
        float(cosine.mean()),
        float(cosine.min()),
        cosine.numel(),
        unit,
        worst_difference,
        request.min_cosine,
    )


def measure_agreement(
    reference_outputs: list[dict], candidate_outputs: list[dict], batches, request
) -> list[Agreement]:
    masks = [batch["attention_mask"] for batch in batches]
    return [
        agreement_of(
            name,
            [outputs[name] for outputs in reference_outputs],
            [outputs[name] for outputs in candidate_outputs],
            masks,
            request,
        )
        for name in reference_outputs[0]
    ]


@dataclass
class LabelledBatches:
    name: str
    batches: list[dict]
    labels: torch.Tensor


def labelled_batches(request: QuantizeRequest, model, tokenizer, architecture: str, max_length: int):
    """The validation file as padded batches and label ids (the model's own label names, or ids 0..K-1)."""
    from briskbert.training.data.task_data import load_table, require_columns

    if architecture != "BriskBertForSequenceClassification" or model.config.problem_type not in (
        None,
        "single_label_classification",
    ):
        raise SettingError(
            "validation_file",
            f"scores single-label sequence classifiers; {architecture} "
            f"({model.config.problem_type or 'no problem_type'}) is checked by agreement only: drop it.",
        )
    path = request.validation_file
    table = load_table(str(path), "validation_file")
    columns = {name: getattr(request, name) for name in ("text_column", "text_pair_column", "label_column")}
    require_columns(table, columns, f"validation_file {path}")
    label2id = {str(name): int(index) for name, index in model.config.label2id.items()}
    known = {**{str(i): i for i in range(model.config.num_labels)}, **label2id}
    unknown = sorted({str(value) for value in table[request.label_column]} - set(known))
    if unknown:
        raise SettingError(
            "validation_file",
            f"{path}: labels {', '.join(unknown[:5])} are not the model's "
            f"({', '.join(label2id)} or 0..{model.config.num_labels - 1}); give a label_column with its labels.",
        )
    labels = [known[str(value)] for value in table[request.label_column]]
    pairs = list(table[request.text_pair_column]) if request.text_pair_column else None
    batches = length_batches(tokenizer, list(table[request.text_column]), 32, max_length, "pt", pairs)
    order = [index for indices, _ in batches for index in indices]
    name = request.dataset_card_name or Path(path).name
    return LabelledBatches(name, [batch for _, batch in batches], torch.tensor(labels)[order])


def accuracy_of(run: Callable[[dict], dict], data: LabelledBatches) -> float:
    predictions = torch.cat([run(batch)["logits"].argmax(-1) for batch in data.batches])
    return float((predictions == data.labels).float().mean())
