"""The README of a folder ``briskbert quantize`` wrote, from its ``quantization.json``: the model card (with its
Quantization section) for a torchao folder, which transformers loads as it is; otherwise (ONNX Runtime, or a head
the card has no usage snippet for) a README that says what the folder holds, how far it is from fp32, and how to
run it."""

from __future__ import annotations

from pathlib import Path

from briskbert.processes import to_argv

from .card import QUANTIZATION_FILE, CardError, read_quantization, render_card


def render_quantized_readme(
    folder: str | Path, folder_name: str, output_names: list[str], auto_class: str
) -> str:
    """The README of ``folder`` (its ``quantization.json`` written), to be published as ``folder_name``;
    ``output_names`` are the model's outputs and ``auto_class`` the transformers class that loads it."""
    facts = read_quantization(folder)
    if facts["backend"] == "torchao":
        try:
            card = str(render_card(folder, repo_id=f"your-namespace/{folder_name}"))
            return card.rstrip("\n") + "\n\n" + speed_section(facts)
        except CardError:  # a head the card has no usage snippet for (multiple choice): the plain README
            pass
    return plain_readme(facts, folder_name, output_names, auto_class)


def speed_section(facts: dict) -> str:
    """The backends timed where the folder was written, and the one kept."""
    choice = facts["choice"]
    rows = "\n".join(
        f"| {'**' + row['backend'] + '**' if row['backend'] == choice['backend'] else row['backend']} | "
        f"{row['tokens_per_second']:,.0f} | {row['speedup']:.2f}x{_spread(row)} | {row['agreement']:.4f} | "
        f"{'yes' if row['passed'] else 'no: ' + row['note']} |"
        for row in choice["candidates"]
    )
    return f"""## Speed

Kept: **{choice["backend"]}**, {choice["speedup"]:.2f}x the fp32 model's real tokens/s{_spread(choice)}
(`{" ".join(to_argv(backend=choice["requested"]))}`), timed on the machine that quantized it: {choice["timed_on"]}.
Another CPU may rank the backends differently: run `briskbert quantize` there.

| backend | real tokens/s | x fp32 | lowest agreement | within thresholds |
|---|---:|---:|---:|---|
{rows}
"""


def _spread(measured: dict) -> str:
    """`` (1.30-2.41x over 3 rounds)``: the lowest and highest single-round speed-up."""
    low, high = measured["speedup_range"]
    return f" ({low:.2f}-{high:.2f}x over {measured['rounds']} rounds)"


def evaluation_table(facts: dict) -> str:
    if not facts["evaluation"]:
        return ""
    rows = "\n".join(
        f"| {e['dataset']} | {e['metric']} | {e['fp32']:.4f} | {e['int8']:.4f} | "
        f"{100 * (e['int8'] - e['fp32']):+.2f} points |"
        for e in facts["evaluation"]
    )
    return f"""## Evaluation

| data | metric | fp32 | this model | change |
|---|---|---:|---:|---:|
{rows}

"""


def usage_snippet(facts: dict, folder_name: str, auto_class: str) -> str:
    if facts["backend"] in ("torchao", "briskbert"):
        needs = "# needs torchao (pip install torchao); the int8 weights load as they are\n"
        return f"""```python
from transformers import {auto_class}

{needs if facts["backend"] == "torchao" else ""}model = {auto_class}.from_pretrained("{folder_name}", trust_remote_code=True)
```"""
    return f"""```python
import onnxruntime
from transformers import AutoTokenizer

folder = "{folder_name}"
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
session = onnxruntime.InferenceSession(f"{{folder}}/{facts["model_file"]}", providers=["CPUExecutionProvider"])
texts = ["A warm, funny film.", "Dull.", "An hour too long."]
# The graph computes every padded position: batch texts of similar length together.
texts = sorted(texts, key=lambda text: len(tokenizer(text)["input_ids"]))
batch = tokenizer(texts, padding=True, return_tensors="np")
feed = {{graph_input.name: batch[graph_input.name] for graph_input in session.get_inputs()}}
names = [graph_output.name for graph_output in session.get_outputs()]
outputs = dict(zip(names, session.run(None, feed)))
```

With briskbert installed, `briskbert.quantization.inference.OnnxModel("{folder_name}")(texts)` sorts, batches and
puts the outputs back in the order of the texts. The graph uses ONNX Runtime's fused kernels (`com.microsoft`
operators): it runs on ONNX Runtime's CPU provider."""


def plain_readme(facts: dict, folder_name: str, output_names: list[str], auto_class: str) -> str:
    """The README of a folder without a Hub card: what it holds, how far it is from fp32, and how to run it."""
    from briskbert.modeling.export import SENTENCE_EMBEDDING

    size = facts["weights_bytes"]
    saved = size.get(facts["precision"], size["fp32"])
    rows = "\n".join(
        f"| `{a['output']}` | {a['metric']} | {a['mean']:.4f} | {a['worst']:.4f} | {a['max_abs_difference']:.3g} |"
        for a in facts["agreement"]["outputs"]
    )
    pooling = facts["sentence_embedding"]
    embedding_note = (
        f"\n`{SENTENCE_EMBEDDING}` is the sentence embedding ({pooling['pooling']} pooling"
        f"{', unit length' if pooling['normalize'] else ''}), as sentence-transformers computes it.\n"
        if pooling
        else ""
    )
    return f"""---
library_name: {"onnxruntime" if facts["backend"] == "onnxruntime" else "transformers"}
tags:
- briskbert
- {"onnx" if facts["backend"] == "onnxruntime" else facts["backend"]}
- {facts["precision"]}
{"- quantized" if facts["precision"] == "int8" else "- fused"}
---

# {folder_name}

`{facts["architecture"]}` from `{facts["source_model"]}`, by `briskbert quantize`: {facts["method"]}.

| | |
|---|---|
| file | `{facts["model_file"]}` |
| precision | {facts["description"]} |
| weights | {saved / 2**20:.1f} MiB (fp32: {size["fp32"] / 2**20:.1f} MiB, {size["ratio"]:.2f}x smaller) |
| outputs | {", ".join(f"`{name}`" for name in output_names)} |
{embedding_note}
{evaluation_table(facts)}{speed_section(facts)}
## Agreement with the fp32 model

Measured on {facts["agreement"]["checked_on"]}; per-token outputs at real tokens.

| output | metric | mean | worst | max abs difference |
|---|---|---:|---:|---:|
{rows}

## Usage

{usage_snippet(facts, folder_name, auto_class)}

Written by `briskbert quantize`; `{QUANTIZATION_FILE}` holds these facts as JSON.
"""
