"""How closely two models of the same weights agree, for the import check (`briskbert pretrain` on a converted
checkpoint) and the export check (`briskbert export-family`), with the tolerance the conversion tests hold to."""

import torch

from ..export import at_real_tokens

#: fp32, largest absolute difference of logits or hidden states at real tokens
OUTPUT_TOLERANCE = 1e-5
SAMPLE_TEXTS = (
    "The committee approved the new budget after a long debate.",
    "Proteins fold into shapes that decide what they do.",
    "It rained.",
)
# Per-token outputs first: the main output of a head, then the encoder's.
_OUTPUTS = ("logits", "prediction_logits", "start_logits", "last_hidden_state")


def main_output(outputs) -> torch.Tensor:
    return next(getattr(outputs, name) for name in _OUTPUTS if getattr(outputs, name, None) is not None)


def largest_difference(reference, ours, tokenizer) -> float:
    """Largest |reference - ours| of the main output on `SAMPLE_TEXTS`, at real tokens for per-token outputs.
    Both models are run in eval mode and put back in the mode they were in."""
    batch = tokenizer(list(SAMPLE_TEXTS), padding=True, return_tensors="pt")
    inputs = {name: batch[name] for name in ("input_ids", "attention_mask")}
    modes = reference.training, ours.training
    reference.eval(), ours.eval()
    with torch.no_grad():
        expected, got = main_output(reference(**inputs)), main_output(ours(**inputs))
    reference.train(modes[0]), ours.train(modes[1])
    difference = (got.reshape(expected.shape).float() - expected.float()).abs()
    return at_real_tokens(difference, inputs["attention_mask"]).max().item()
