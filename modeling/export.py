"""A saved briskbert folder exported to ONNX (`torch.onnx.export(dynamo=True)`, dynamic axes) and checked against
PyTorch with ONNX Runtime; a sentence-transformers folder's graph also computes its `sentence_embedding`."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer

from briskbert import modeling, tokenization  # noqa: F401  (registers the Auto classes in-process)
from briskbert.data import DATA_DIR
from briskbert.errors import SettingError
from briskbert.inputs import check_model_folder, check_text_file
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec, read_embedding_spec

ONNX_FILE = "model.onnx"
SENTENCE_EMBEDDING = "sentence_embedding"
# A tokenizer's files, whatever its kind (WordPiece, byte-level BPE, Unigram), and those that make an exported
# folder tokenize and label its outputs on its own.
TOKENIZER_FILES = tuple(
    "tokenizer* special_tokens_map.json added_tokens.json vocab.* merges.txt *.model".split()
)
COMPANION_FILES = ("config.json", "tokenization_*.py", *TOKENIZER_FILES)


def copy_files(source: Path, target: Path, patterns) -> None:
    """The files of `source` matching `patterns` copied into `target`."""
    for path in {path for pattern in patterns for path in Path(source).glob(pattern) if path.is_file()}:
        shutil.copy2(path, Path(target) / path.name)


@contextmanager
def quiet_logs():
    """No log record below ERROR while the body runs: the exporter's and ONNX Runtime's notes on their own
    internals are nothing a user acts on."""
    previous = logging.root.manager.disable  # the caller's own logging.disable level, restored after
    logging.disable(max(previous, logging.WARNING))
    try:
        yield
    finally:
        logging.disable(previous)


def load_for_export(model_dir: Path, architecture: str | None):
    """The model (eval mode, fp32), tokenizer (capped at the model's longest input), head name and, for a
    sentence-transformers folder's bare encoder, its pooling of a checked briskbert folder."""
    config = check_model_folder(Path(model_dir), "model_dir")
    if config["model_type"] != "briskbert":
        raise SettingError(
            "model_dir",
            f"{model_dir} holds a {config['model_type']!r} model, not briskbert; convert it first "
            "with `briskbert convert`.",
        )
    architecture = architecture or (config.get("architectures") or ["BriskBertModel"])[0]
    model_class = getattr(modeling, architecture, None)
    if model_class is None or not architecture.startswith("BriskBert"):
        heads = [name for name in modeling.__all__ if name.startswith("BriskBert") and "Config" not in name]
        raise SettingError("architecture", f"{architecture!r} is unknown; choose one of: {', '.join(heads)}.")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=True)
    model = model_class.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    # learned positions stop at max_position_embeddings
    if model.config.position_embedding_type == "absolute":
        tokenizer.model_max_length = min(tokenizer.model_max_length, model.config.max_position_embeddings)
    embedding = read_embedding_spec(model_dir) if architecture == "BriskBertModel" else None
    return model, tokenizer, architecture, embedding


def read_texts(text_file: Path | None, count: int) -> list[str]:
    """The first `count` sentences (of at least three words) of a text file."""
    if text_file is None:
        text_file = DATA_DIR / "wikitext2_excerpt.txt"
    lines = check_text_file(text_file, "text_file").read_text(encoding="utf-8").splitlines()
    # Sentences rather than whole paragraphs, so pairs of them vary in length well within max_length.
    sentences = (sentence.strip() for line in lines for sentence in line.split(" . "))
    texts = [sentence for sentence in sentences if len(sentence.split()) >= 3][:count]
    if len(texts) < count:
        raise SettingError(
            "text_file", f"{text_file} has {len(texts)} sentences; the check needs at least {count}."
        )
    return texts


def encode_batch(
    tokenizer, texts: list[str], max_length: int, multiple_choice: bool
) -> dict[str, torch.Tensor]:
    """Pairs of consecutive sentences, row i keeping (i + 1) / rows of their words so the batch is padded;
    multiple choice: (batch, 2, seq)."""
    rows = len(texts) - 1
    firsts, seconds = [], []
    for row in range(rows):
        for segments, sentence in ((firsts, texts[row]), (seconds, texts[row + 1])):
            words = sentence.split()
            segments.append(" ".join(words[: max(1, len(words) * (row + 1) // rows)]))
    encoded = tokenizer(
        firsts, seconds, truncation=True, max_length=max_length, padding=True, return_tensors="pt"
    )
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in encoded]
    batch = {name: encoded[name] for name in names}
    if multiple_choice:
        usable = rows - rows % 2
        batch = {name: tensor[:usable].view(usable // 2, 2, -1) for name, tensor in batch.items()}
    return batch


def model_outputs(
    model: nn.Module, batch: dict[str, torch.Tensor], embedding: EmbeddingSpec | None = None
) -> dict[str, torch.Tensor]:
    """The head's tensors (no labels), in its order, plus a sentence-transformers folder's sentence embedding."""
    outputs = model(**batch, return_dict=True)
    tensors = {name: value for name, value in outputs.items() if isinstance(value, torch.Tensor)}
    if embedding is not None:
        tensors[SENTENCE_EMBEDDING] = embedding.pool(outputs["last_hidden_state"], batch["attention_mask"])
    return tensors


class FlatOutputs(nn.Module):
    """ONNX graphs take tensors and return tensors: the inputs by name, the head's outputs in its order."""

    def __init__(self, model: nn.Module, embedding: EmbeddingSpec | None = None):
        super().__init__()
        self.model, self.embedding = model, embedding

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        batch = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return model_outputs(self.model, batch, self.embedding)


def export_onnx(
    model, sample: dict[str, torch.Tensor], folder: Path, embedding=None, opset_version=None, fuse=True
):
    """Writes `folder`/model.onnx traced on `sample` (fused unless not `fuse`); returns (output names, fused kernel
    counts, every node's module paths for keep_fp32)."""
    from .onnx_fusion import optimize_onnx

    with torch.no_grad():
        output_names = list(model_outputs(model, sample, embedding))
    axes = ("batch", "choices", "sequence") if sample["input_ids"].dim() == 3 else ("batch", "sequence")
    # The exporter also warns about its own internals (axis renaming, pytree deprecations, torchvision's nms).
    with warnings.catch_warnings(), quiet_logs():
        warnings.simplefilter("ignore", category=UserWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        program = torch.onnx.export(
            FlatOutputs(model, embedding).eval(),
            args=(),
            kwargs=sample,
            dynamo=True,
            dynamic_shapes={name: dict(enumerate(axes)) for name in sample},
            input_names=list(sample),
            output_names=output_names,
            opset_version=opset_version,
            verbose=False,
        )
        target = Path(folder) / ONNX_FILE
        if not fuse:
            # ONNXProgram.save keeps weights inside unless the protobuf would pass 2 GB
            program.save(str(target))
            return output_names, {}, {}
        raw = Path(folder) / "unfused"
        raw.mkdir(parents=True)
        program.save(str(raw / ONNX_FILE))
        counts, scopes = optimize_onnx(raw / ONNX_FILE, target, model.config)
    shutil.rmtree(raw)
    return output_names, counts, scopes


def onnxruntime_session(onnx_path: Path, threads: int | None = None):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # the graph's harmless shape-inference notes would drown the report
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


def run_onnxruntime(session, batch: dict[str, torch.Tensor], output_names) -> dict[str, torch.Tensor]:
    # A graph may drop an input the model ignores (token_type_ids without segment embeddings): feed what it takes.
    feed = {graph_input.name: batch[graph_input.name].numpy() for graph_input in session.get_inputs()}
    return dict(zip(output_names, map(torch.from_numpy, session.run(output_names, feed))))


def at_real_tokens(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A per-token `tensor` (leading dimensions those of `mask`) at the real tokens; any other as it is."""
    return tensor[mask.bool()] if tensor.shape[: mask.dim()] == mask.shape else tensor


def largest_differences(model, session, batch, output_names, embedding=None) -> dict[str, float]:
    """Per output, the largest |ONNX Runtime - PyTorch| (per-token outputs: at real tokens)."""
    got = run_onnxruntime(session, batch, output_names)
    with torch.no_grad():
        expected = model_outputs(model, batch, embedding)
    mask = batch["attention_mask"]
    return {
        name: float(at_real_tokens((got[name] - value).abs(), mask).max()) for name, value in expected.items()
    }


def export_and_check(
    model_dir: Path,
    output_dir: Path,
    architecture: str | None = None,
    text_file: Path | None = None,
    max_length: int = 128,
    opset_version: int | None = None,
    overwrite_output_dir: bool = False,
    fuse: bool = True,
) -> float:
    """Exports the folder's model with its config and tokenizer files to `output_dir` and checks it against
    PyTorch on two batches shaped unlike the traced sample; returns the largest difference."""
    target = Path(output_dir) / ONNX_FILE
    if target.exists() and not overwrite_output_dir:
        raise SettingError(
            "output_dir",
            f"{output_dir} already holds {ONNX_FILE}; replace it (overwrite_output_dir) or choose another.",
        )
    model, tokenizer, architecture, embedding = load_for_export(model_dir, architecture)
    multiple_choice = architecture == "BriskBertForMultipleChoice"
    texts = read_texts(text_file, 17)
    max_length = min(max_length, tokenizer.model_max_length)
    sample = encode_batch(tokenizer, texts[:5], min(max_length, 32), multiple_choice)
    batches = [
        encode_batch(tokenizer, texts[5:], max_length, multiple_choice),
        encode_batch(tokenizer, texts[10:17], max_length // 2, multiple_choice),
    ]
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output_dir, prefix=".export-") as staging:
        print(f"Exporting {architecture} from {model_dir} with torch.onnx.export(dynamo=True) ...")
        output_names, fused, _ = export_onnx(model, sample, Path(staging), embedding, opset_version, fuse)
        session = onnxruntime_session(Path(staging) / ONNX_FILE)
        checks = [largest_differences(model, session, batch, output_names, embedding) for batch in batches]
        for name in os.listdir(staging):
            os.replace(Path(staging) / name, Path(output_dir) / name)
    copy_files(model_dir, output_dir, COMPANION_FILES)
    inputs = ", ".join(graph_input.name for graph_input in session.get_inputs())
    print(f"Wrote {target} (inputs: {inputs}).")
    if any(fused.values()):  # (empty without `fuse`)
        print("Fused kernels: " + ", ".join(f"{name} x{count}" for name, count in fused.items() if count))
    for batch, differences in zip(batches, checks):
        shape = "x".join(map(str, batch["input_ids"].shape))
        padding = 1 - float(batch["attention_mask"].float().mean())
        report = ", ".join(f"{name} {value:.2e}" for name, value in differences.items())
        print(f"ONNX Runtime vs PyTorch, batch {shape} ({padding:.0%} padding): max abs difference {report}")
    return max(max(differences.values()) for differences in checks)
