"""Running an ONNX folder (``briskbert quantize`` or ``export-onnx``) on texts with ONNX Runtime, without torch.
A graph computes every padded position: texts sorted by length pad each batch to a similar length (SST-2 sentences
in batches of 32: 60 % real tokens in random batches, 97 % sorted)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def length_batches(
    tokenizer, texts: list[str], batch_size: int, max_length: int, return_tensors: str = "np", pairs=None
) -> list[tuple[list[int], dict]]:
    """The texts (and their pairs) sorted by token count and cut into batches of `batch_size`, each padded to its
    longest: [(indices of its texts, encoded batch)]."""
    lengths = [
        len(ids) for ids in tokenizer(texts, pairs, truncation=True, max_length=max_length)["input_ids"]
    ]
    order = sorted(range(len(texts)), key=lambda index: lengths[index])
    batches = []
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        encoded = tokenizer(
            [texts[i] for i in chosen],
            [pairs[i] for i in chosen] if pairs else None,
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors=return_tensors,
        )
        names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in encoded]
        batches.append((chosen, {name: encoded[name] for name in names}))
    return batches


class OnnxModel:
    """The graph of an ONNX folder with its tokenizer: call it on texts (and their pairs) for every output."""

    def __init__(self, folder: str | Path):
        import onnxruntime
        from transformers import AutoTokenizer

        folder = Path(folder)
        facts = folder / "quantization.json"
        name = json.loads(facts.read_text())["model_file"] if facts.is_file() else "model.onnx"
        self.session = onnxruntime.InferenceSession(str(folder / name), providers=["CPUExecutionProvider"])
        self.tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        self.input_names = [graph_input.name for graph_input in self.session.get_inputs()]
        self.output_names = [graph_output.name for graph_output in self.session.get_outputs()]

    def __call__(
        self, texts: list[str], pairs: list[str] | None = None, batch_size: int = 32, max_length=512
    ) -> dict[str, np.ndarray | list[np.ndarray]]:
        """Per-text outputs stacked in the input order; per-token outputs as one array per text (real tokens)."""
        max_length = min(max_length, self.tokenizer.model_max_length)
        results: dict[str, list] = {name: [None] * len(texts) for name in self.output_names}
        per_token = set()
        for indices, batch in length_batches(self.tokenizer, texts, batch_size, max_length, "np", pairs):
            feed = {name: batch[name].astype(np.int64) for name in self.input_names}
            real = batch["attention_mask"].astype(bool)
            for name, values in zip(self.output_names, self.session.run(self.output_names, feed)):
                token_level = values.shape[:2] == batch["attention_mask"].shape
                per_token.update([name] if token_level else [])
                for row, index in enumerate(indices):
                    results[name][index] = values[row][real[row]] if token_level else values[row]
        return {name: rows if name in per_token else np.stack(rows) for name, rows in results.items()}
