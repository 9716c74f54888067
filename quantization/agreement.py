"""How closely a candidate follows the fp32 model: the check batches, the agreement of every output, and the
accuracy of both on labelled data."""

from __future__ import annotations

from dataclasses import dataclass

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
    def shortfall(self) -> str:
        """Why it did not pass, naming the setting ("" when it did)."""
        if self.mean >= self.threshold:
            return ""
        setting = "min_agreement" if self.metric == "argmax agreement" else "min_cosine"
        return f"{self.output} {self.metric} {self.mean:.6g} < {setting} {self.threshold:g}"

    def describe(self) -> str:
        worst = f", worst {self.worst:.4f}" if self.metric == "cosine similarity" else ""
        return (
            f"{self.output}: {self.metric} {self.mean:.4f}{worst} over {self.count} {self.unit}, "
            f"max abs difference {self.max_abs_difference:.3g} (threshold {self.threshold:g})"
        )


def check_batches(tokenizer, texts: list[str], max_length: int, multiple_choice: bool) -> list[dict]:
    """CHECK_BATCHES padded batches of CHECK_ROWS text pairs each, of lengths from a few tokens to max_length."""
    step = CHECK_ROWS + 1
    return [
        encode_batch(tokenizer, texts[i * step : (i + 1) * step], max_length, multiple_choice)
        for i in range(CHECK_BATCHES)
    ]


def agreement_of(name: str, references, candidates, masks, request: QuantizeRequest) -> Agreement:
    """Argmax agreement for logits (over the labels, the vocabulary, or for start/end logits over the real
    tokens), cosine similarity for everything else; per-token outputs are compared at real tokens only."""
    matches, cosines, difference, unit = [], [], 0.0, "examples"
    for reference, candidate, mask in zip(references, candidates, masks):
        reference, candidate, real = reference.float(), candidate.float(), mask.bool()
        if name in ("start_logits", "end_logits"):  # a position over the sequence: padding cannot win
            reference, candidate = reference.masked_fill(~real, -1e9), candidate.masked_fill(~real, -1e9)
        elif reference.shape[: real.dim()] == real.shape:
            reference, candidate, unit = reference[real], candidate[real], "tokens"
        difference = max(difference, float((reference - candidate).abs().max()))
        if "logits" in name:
            matches.append((reference.argmax(-1) == candidate.argmax(-1)).float())
        else:
            cosines.append(nn.functional.cosine_similarity(reference, candidate, dim=-1))
    if matches:
        share = torch.cat(matches)
        mean = float(share.mean())
        return Agreement(
            name, "argmax agreement", mean, mean, share.numel(), unit, difference, request.min_agreement
        )
    cosine = torch.cat(cosines)
    worst = float(cosine.min())
    return Agreement(
        name,
        "cosine similarity",
        float(cosine.mean()),
        worst,
        cosine.numel(),
        unit,
        difference,
        request.min_cosine,
    )


def labelled_batches(request: QuantizeRequest, model, tokenizer, architecture: str, max_length: int):
    """The validation file as padded batches and their label ids (the model's own label names, or 0..K-1)."""
    from briskbert.training.data.task_data import load_table, require_columns

    config = model.config
    if architecture != "BriskBertForSequenceClassification" or config.problem_type not in (
        None,
        "single_label_classification",
    ):
        raise SettingError(
            "validation_file",
            f"scores single-label sequence classifiers; {architecture} "
            f"({config.problem_type or 'no problem_type'}) is checked by agreement only: drop it.",
        )
    path = request.validation_file
    table = load_table(str(path), "validation_file")
    columns = {name: getattr(request, name) for name in ("text_column", "text_pair_column", "label_column")}
    require_columns(table, columns, f"validation_file {path}")
    label2id = {str(name): int(index) for name, index in config.label2id.items()}
    known = {**{str(i): i for i in range(config.num_labels)}, **label2id}
    unknown = sorted({str(value) for value in table[request.label_column]} - set(known))
    if unknown:
        raise SettingError(
            "validation_file",
            f"{path}: labels {', '.join(unknown[:5])} are not the model's "
            f"({', '.join(label2id)} or 0..{config.num_labels - 1}); give a label_column with its labels.",
        )
    labels = torch.tensor([known[str(value)] for value in table[request.label_column]])
    pairs = list(table[request.text_pair_column]) if request.text_pair_column else None
    batches = length_batches(tokenizer, list(table[request.text_column]), 32, max_length, "pt", pairs)
    order = [index for indices, _ in batches for index in indices]
    return [batch for _, batch in batches], labels[order]


def accuracy_of(run, labelled) -> float:
    """The share of `labelled` (batches, labels) whose argmax of `run(batch)["logits"]` is the label."""
    batches, labels = labelled
    predictions = torch.cat([run(batch)["logits"].argmax(-1) for batch in batches])
    return float((predictions == labels).float().mean())
