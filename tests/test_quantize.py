"""briskbert quantize against the fp32 model on SST-2 text the job never saw, from the written folder alone."""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from fresh_process import run_without_project

from briskbert import modeling
from briskbert.cli import main as briskbert
from briskbert.extras import is_installed
from briskbert.modeling import BriskBertConfig
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec, write_sentence_transformers_files

ROOT = Path(__file__).resolve().parents[1]
SST2 = ROOT / "data" / "sst2_validation_excerpt.tsv"
LAYERS, WIDTH = 2, 64
needs_torchao = pytest.mark.skipif(
    not is_installed("torchao"), reason="needs the [torchao] extra, not in [dev]"
)


@pytest.fixture(scope="module")
def tokenizer():
    """A small WordPiece vocabulary, so the embedding tables do not dwarf the encoder in a tiny model."""
    from briskbert.tokenization import train_wordpiece_tokenizer

    files = [str(ROOT / "data" / "wikitext2_excerpt.txt")]
    return train_wordpiece_tokenizer(
        files=files, vocab_size=512, min_frequency=1, show_progress=False, model_max_length=128
    )


def tiny_folder(folder: Path, head: str, tokenizer):
    torch.manual_seed(0)
    sizes = dict(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=4, intermediate_size=256)
    labels = {0: "negative", 1: "positive"}
    config = BriskBertConfig(vocab_size=len(tokenizer), max_position_embeddings=128, id2label=labels, **sizes)
    model = getattr(modeling, head)(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def quantize(model_dir: Path, output_dir: Path, *flags: str) -> list[str]:
    return ["quantize", "--model_dir", str(model_dir), "--output_dir", str(output_dir), *flags]


def sst2_rows(count: int | None = 48) -> list[dict]:
    with open(SST2, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[:count]


def assert_close_to_fp32(name, int8, fp32, mask, min_cosine: float = 0.99) -> float:
    """The same yardstick users apply: predictions (argmax) for logits, direction (cosine) for states."""
    int8, fp32, mask = int8.float(), fp32.float(), mask.bool()
    if name in ("start_logits", "end_logits"):
        int8, fp32 = int8.masked_fill(~mask, -1e9), fp32.masked_fill(~mask, -1e9)
    elif fp32.shape[: mask.dim()] == mask.shape:
        int8, fp32 = int8[mask], fp32[mask]
    if "logits" in name:
        agreement = float((int8.argmax(-1) == fp32.argmax(-1)).float().mean())
        assert agreement >= 0.9, (name, agreement)
        return agreement
    cosine = float(torch.nn.functional.cosine_similarity(int8, fp32, dim=-1).mean())
    assert cosine >= min_cosine, (name, cosine)
    return cosine


def reported(folder: Path) -> dict:
    return json.loads((folder / "quantization.json").read_text())


# ------------------------------------------------------------------------------------------------- torch
@needs_torchao
def test_torch_int8_accuracy_on_labelled_data_and_the_card(tokenizer, tmp_path, capsys):
    """torchao int8 Linears, a folder ~4x smaller that says so; --validation_file scores both precisions."""
    from sklearn.metrics import accuracy_score
    from transformers import AutoConfig, AutoModelForSequenceClassification

    fp32 = tiny_folder(tmp_path / "fp32", "BriskBertForSequenceClassification", tokenizer)
    flags = ["--backend", "torch", "--validation_file", str(SST2), "--dataset_card_name", "glue/sst2"]
    assert briskbert(quantize(tmp_path / "fp32", tmp_path / "int8", *flags)) == 0, capsys.readouterr()

    int8 = AutoModelForSequenceClassification.from_pretrained(tmp_path / "int8", trust_remote_code=True)
    weights = [module.weight.data for module in int8.modules() if isinstance(module, torch.nn.Linear)]
    assert weights and not any(type(weight) is torch.Tensor for weight in weights)  # torchao's int8 subclass
    on_disk = (tmp_path / "int8" / "model.safetensors").stat().st_size
    assert (tmp_path / "fp32" / "model.safetensors").stat().st_size / on_disk > 2.5
    assert AutoConfig.from_pretrained(tmp_path / "int8", trust_remote_code=True).quantization_config
    rows = sst2_rows(None)
    predictions = {"fp32": [], "int8": []}
    for start in range(0, len(rows), 64):
        texts = [row["sentence"] for row in rows[start : start + 64]]
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        with torch.inference_mode():
            predictions["fp32"] += fp32(**batch).logits.argmax(-1).tolist()
            predictions["int8"] += int8(**batch).logits.argmax(-1).tolist()
    (evaluation,) = reported(tmp_path / "int8")["evaluation"]
    assert evaluation["dataset"] == "glue/sst2" and evaluation["examples"] == len(rows)
    labels = [int(row["label"]) for row in rows]
    for precision in ("fp32", "int8"):
        assert evaluation[precision] == pytest.approx(accuracy_score(labels, predictions[precision]))

    card = (tmp_path / "int8" / "README.md").read_text()
    assert "## Quantization" in card and "int8 weights (per output channel)" in card
    assert "accuracy on glue/sst2" in card and "points" in card and "x smaller" in card
    assert "\n- quantized\n" in card and "pip install torchao" in card


# ------------------------------------------------------------------------------------------------- onnx
def onnx_outputs(folder: Path, batch: dict) -> dict[str, torch.Tensor]:
    import onnxruntime

    session = onnxruntime.InferenceSession(
        str(folder / "model_quantized.onnx"), providers=["CPUExecutionProvider"]
    )
    feed = {graph_input.name: batch[graph_input.name].numpy() for graph_input in session.get_inputs()}
    names = [graph_output.name for graph_output in session.get_outputs()]
    return dict(zip(names, map(torch.from_numpy, session.run(names, feed))))


@pytest.mark.slow  # an ONNX export each (the dynamo exporter takes ~10 s even for a tiny model)
@pytest.mark.parametrize("head", ["BriskBertModel", "BriskBertForQuestionAnswering"])
def test_onnx_int8_of_every_exported_head_agrees_with_fp32(head, tokenizer, tmp_path, capsys):
    """The int8 graph (ONNX Runtime alone) has int8 matmuls and follows fp32 (sentence embeddings too)."""
    import onnx

    fp32 = tiny_folder(tmp_path / "fp32", head, tokenizer)
    if head == "BriskBertModel":  # a sentence-transformers folder: mean pooling, normalised
        write_sentence_transformers_files(tmp_path / "fp32", EmbeddingSpec("mean", True, 128), WIDTH)
    argv = quantize(tmp_path / "fp32", tmp_path / "int8", "--backend", "onnx")
    assert briskbert(argv) == 0, capsys.readouterr()

    # Fused kernels, quantized: the attention in int8 (QAttention), the other matmuls with int8 weights.
    graph = onnx.load(str(tmp_path / "int8" / "model_quantized.onnx")).graph
    ops = Counter(node.op_type for node in graph.node)
    assert ops["QAttention"] == LAYERS and ops["SkipLayerNormalization"]
    assert ops["MatMulInteger"] + ops["DynamicQuantizeMatMul"] >= 2 * LAYERS
    sentences = [row["sentence"] for row in sst2_rows()]
    encoded = tokenizer(sentences[:24], sentences[24:48], padding=True, truncation=True, return_tensors="pt")
    batch = {name: encoded[name] for name in ("input_ids", "attention_mask", "token_type_ids")}
    int8 = onnx_outputs(tmp_path / "int8", batch)
    with torch.inference_mode():
        expected = {k: v for k, v in fp32(**batch).items() if isinstance(v, torch.Tensor)}
    if head == "BriskBertModel":
        mask = batch["attention_mask"][..., None]
        pooled = (expected["last_hidden_state"] * mask).sum(1) / mask.sum(1)
        expected["sentence_embedding"] = torch.nn.functional.normalize(pooled, dim=-1)
    assert set(expected) <= set(int8)
    # Activations are quantized too (per tensor): a random tiny model's tanh pooler drifts most, to ~0.988.
    measured = {
        name: assert_close_to_fp32(name, int8[name], value, batch["attention_mask"], min_cosine=0.98)
        for name, value in expected.items()
    }
    # Every output is reported, above its threshold, and near what was measured here on other text.
    facts = reported(tmp_path / "int8")
    outputs = {entry["output"]: entry for entry in facts["agreement"]["outputs"]}
    assert set(outputs) == set(measured)
    for name, entry in outputs.items():
        assert entry["threshold"] <= entry["mean"] <= 1 and entry["max_abs_difference"] > 0
        assert abs(entry["mean"] - measured[name]) < 0.1, (name, entry["mean"], measured[name])
        assert entry["metric"] == ("argmax agreement" if "logits" in name else "cosine similarity")
    assert (facts["precision"], facts["backend"]) == ("int8", "onnxruntime")
    assert facts["weights_bytes"]["ratio"] > 2
    assert "x smaller" in (tmp_path / "int8" / "README.md").read_text()


@pytest.mark.slow  # an ONNX export
def test_keep_fp32_leaves_the_named_modules_of_the_fused_graph_in_fp32(tokenizer, tmp_path, capsys):
    """The fused attention and the matmuls of the kept modules stay fp32; every other one is quantized."""
    import onnx

    tiny_folder(tmp_path / "fp32", "BriskBertForSequenceClassification", tokenizer)
    kept = ["layers.0.attention.qkv", "layers.1.mlp.down"]
    flags = ["--backend", "onnx", "--keep_fp32", *kept, "--validation_file", str(SST2)]
    assert briskbert(quantize(tmp_path / "fp32", tmp_path / "int8", *flags)) == 0, capsys.readouterr()
    (evaluation,) = reported(tmp_path / "int8")["evaluation"]
    assert evaluation["examples"] == len(sst2_rows(None)) and 0 <= evaluation["int8"] <= 1
    nodes = onnx.load(str(tmp_path / "int8" / "model_quantized.onnx")).graph.node
    fp32 = sorted((node.op_type, node.name) for node in nodes if node.op_type in ("Attention", "MatMul"))
    assert [op for op, _ in fp32] == ["Attention", "MatMul"] and "layers.0.attention" in fp32[0][1]
    assert [node.op_type for node in nodes].count("QAttention") == LAYERS - 1
    assert reported(tmp_path / "int8")["settings"]["keep_fp32"] == kept


# ------------------------------------------------------------------------------------------------- errors
def run_error(argv, capsys) -> str:
    """The job's one error line (progress bars may precede it on stderr)."""
    code = briskbert(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1 and errors[0].startswith("error: "), err
    assert "Traceback" not in err and err.rstrip().endswith(errors[0]), err
    return errors[0]


@pytest.mark.parametrize(
    "flags,expected",
    [
        (["--keep_fp32", "clasifier"], "--keep_fp32 clasifier names no Linear or Embedding module"),
        (["--validation_file", str(SST2)], "single-label sequence"),
        (["--min_agreement", "1.5"], "--min_agreement must lie in [0, 1]"),
        (["--text_file", "missing.txt"], "--text_file missing.txt does not exist"),
        (["--min_cosine", "1"], "min_cosine 1"),  # a quantized model that misses it: nothing is written
    ],
)
def test_bad_flags_give_one_clear_error_and_write_nothing(flags, expected, tokenizer, tmp_path, capsys):
    tiny_folder(tmp_path / "fp32", "BriskBertModel", tokenizer)
    argv = quantize(tmp_path / "fp32", tmp_path / "out" / "int8", "--backend", "onnx", *flags)
    err = run_error(argv, capsys)
    assert expected in err
    if "--min_cosine" in flags:
        assert "last_hidden_state" in err and "nothing was written" in err
        assert list((tmp_path / "out").iterdir()) == []  # no staging folder left behind
    assert not (tmp_path / "out" / "int8").exists()


def test_missing_extras_name_the_extra_to_install(tmp_path, capsys, monkeypatch):
    argv = quantize(tmp_path / "fp32", tmp_path / "int8")
    monkeypatch.setitem(sys.modules, "torchao", None)
    assert "install the [torchao] extra" in run_error([*argv, "--backend", "torch"], capsys)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert "--backend onnx needs onnxruntime" in run_error([*argv, "--backend", "onnx"], capsys)
    assert not (tmp_path / "int8").exists()


def test_an_existing_output_folder_is_kept_unless_overwrite_is_asked(tokenizer, tmp_path, capsys):
    tiny_folder(tmp_path / "fp32", "BriskBertModel", tokenizer)
    (tmp_path / "int8").mkdir()
    (tmp_path / "int8" / "old.txt").write_text("keep me")
    argv = quantize(tmp_path / "fp32", tmp_path / "int8", "--backend", "fp32")
    assert "overwrite_output_dir" in run_error(argv, capsys)
    assert (tmp_path / "int8" / "old.txt").read_text() == "keep me"
    assert briskbert([*argv, "--overwrite_output_dir"]) == 0
    assert not (tmp_path / "int8" / "old.txt").exists()
    assert (tmp_path / "int8" / "quantization.json").is_file()
    in_place = quantize(tmp_path / "fp32", tmp_path / "fp32", "--overwrite_output_dir")
    assert "holds the source" in run_error(in_place, capsys)


# ------------------------------------------------------------------------------------------------- the choice
def test_the_choice_is_the_fastest_candidate_within_the_thresholds():
    """A candidate slower than fp32 is never kept, nor a faster one beyond the thresholds; fp32 always qualifies."""
    from types import SimpleNamespace

    from briskbert.quantization.job import choose, speed_table

    def candidate(backend, note=""):
        return SimpleNamespace(backend=backend, agreements=[{"mean": 0.9}], accuracy=None, note=note)

    timings = {"fp32": 1.0, "onnx": 0.4, "slower": 1.5, "wrong": 0.1}
    seconds = {name: [value] * 3 for name, value in timings.items()}
    candidates = [candidate("fp32"), candidate("onnx"), candidate("slower"), candidate("wrong", "cosine 0.5")]
    rows = speed_table(candidates, seconds, 1000)
    assert choose(rows)["backend"] == "onnx"
    speedups = {row["backend"]: row["speedup"] for row in rows}
    assert speedups == pytest.approx({"fp32": 1, "onnx": 2.5, "slower": 1 / 1.5, "wrong": 10})
    assert rows[0]["backend"] == "wrong" and rows[0]["tokens_per_second"] == pytest.approx(10_000)
    candidates[1].note = "beyond"
    assert choose(speed_table(candidates, seconds, 1000))["backend"] == "fp32"


# The folder alone, in a fresh interpreter without briskbert, with the libraries users load it with.
FRESH_PROCESS_LOAD = """
import json, numpy as np
facts = json.load(open(f"{FOLDER}/quantization.json"))
from transformers import AutoTokenizer
batch = AutoTokenizer.from_pretrained(FOLDER, trust_remote_code=True)(TEXTS, padding=True, return_tensors="np")
if facts["model_file"].endswith(".onnx"):
    import onnxruntime
    session = onnxruntime.InferenceSession(f"{FOLDER}/{facts['model_file']}", providers=["CPUExecutionProvider"])
    states = session.run(["last_hidden_state"], {i.name: batch[i.name] for i in session.get_inputs()})[0]
else:
    import torch
    from transformers import AutoModel
    model = AutoModel.from_pretrained(FOLDER, trust_remote_code=True).eval()
    with torch.inference_mode():
        states = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).last_hidden_state.numpy()
np.save("states.npy", states)
"""


@pytest.mark.parametrize(
    "kept",
    [
        "fp32",
        pytest.param("torch", marks=needs_torchao),
        pytest.param("onnx-fp32", marks=pytest.mark.slow),  # an ONNX export each
        pytest.param("onnx", marks=pytest.mark.slow),
    ],
)
def test_auto_keeps_the_fastest_says_so_and_the_folder_loads_without_briskbert(
    kept, tokenizer, tmp_path, capsys, monkeypatch
):
    """The kept backend and its speed-up are printed and recorded; the folder runs without briskbert."""
    from briskbert.quantization import job

    fp32 = tiny_folder(tmp_path / "fp32", "BriskBertModel", tokenizer)
    backends = {"fp32": ["fp32"], "torch": ["fp32", "torch"]}.get(kept, ["fp32", "onnx-fp32", "onnx"])
    seconds = {name: 0.5 if name == kept else 2.0 for name in backends} | {"fp32": 1.0}
    rounds = [1.0, 1.0, 1.25]  # the last round's fp32 run slower: that round's speed-up is higher
    monkeypatch.setattr(job, "wanted_backends", lambda request: backends)
    timed = {name: [seconds[name] * (r if name == "fp32" else 1) for r in rounds] for name in backends}
    monkeypatch.setattr(job, "time_candidates", lambda runs, batches: timed)
    assert briskbert(quantize(tmp_path / "fp32", tmp_path / "out")) == 0
    printed = capsys.readouterr().out
    assert f"({kept}, {1 / seconds[kept]:.2f}x fp32 here)" in printed
    assert printed.count("tokens/s") == len(backends)

    choice = reported(tmp_path / "out")["choice"]
    assert choice["backend"] == kept and choice["requested"] == "auto" and choice["rounds"] == 3
    assert choice["speedup"] == pytest.approx(1 / seconds[kept])
    high = 1.0 if kept == "fp32" else 1.25 / seconds[kept]  # fp32 against itself: 1 in every round
    assert choice["speedup_range"] == pytest.approx([1 / seconds[kept], high], abs=1e-3)
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"real tokens/s ({1 / seconds[kept]:.2f}-{high:.2f}x over 3 rounds)" in card
    assert f"Kept: **{kept}**" in card
    rows = {row["backend"]: row for row in choice["candidates"]}
    assert set(rows) == set(backends) and all(row["passed"] for row in rows.values())
    fastest = max(row["tokens_per_second"] for row in rows.values())
    assert rows["fp32"]["speedup"] == 1 and rows[kept]["tokens_per_second"] == fastest

    sentences = [row["sentence"] for row in sst2_rows(12)]
    header = f"FOLDER = {str(tmp_path / 'out')!r}\nTEXTS = {sentences!r}\n"
    run_without_project(header + FRESH_PROCESS_LOAD, cwd=tmp_path)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = fp32(**batch).last_hidden_state
    min_cosine = 0.9999 if kept in ("fp32", "onnx-fp32") else 0.98
    states = torch.from_numpy(np.load(tmp_path / "states.npy"))
    assert_close_to_fp32("last_hidden_state", states, expected, batch["attention_mask"], min_cosine)
    # The helper sorts by length, batches, and gives each text its own real tokens back.
    if kept.startswith("onnx"):
        from briskbert.quantization.inference import OnnxModel

        per_text = OnnxModel(tmp_path / "out")(sentences, batch_size=5)["last_hidden_state"]
        for row, text_states in enumerate(per_text):
            real = batch["attention_mask"][row].bool()
            assert text_states.shape == (int(real.sum()), WIDTH)
            cosine = torch.nn.functional.cosine_similarity(torch.from_numpy(text_states), expected[row][real])
            assert float(cosine.mean()) >= min_cosine, (row, float(cosine.mean()))
