# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Embedding fine-tuning throughput, side by side in one process: sentence-transformers' own trainer
(``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss`` on the original BERT checkpoint) and
``briskbert finetune-embeddings`` (the same checkpoint converted, the same pairs, batch, lengths and loss).

    python docs/benchmarks/embedding_benchmark.py --model_name_or_path path/to/all-MiniLM-L6-v2 \
        --train_file xquad-en.json --extra_train_file covid-qa.json --output_dir runs/embedding-speed

Real tokens are the non-padding tokens of every query and passage seen in one epoch (the same pairs on
both sides); tokens/s divides them by each trainer's own training time. Writes ``speed.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from briskbert.errors import USER_ERROR_EXIT_CODE, UserError
from briskbert.extras import require_extra


def _pairs(train_file: str, extra_train_file: str | None):
    from briskbert.training.retrieval.embeddings import load_pairs

    pairs = load_pairs(train_file)
    return pairs + (load_pairs(extra_train_file) if extra_train_file else [])


def real_tokens(tokenizer, pairs, max_seq_length: int) -> int:
    texts = [pair.query for pair in pairs] + [pair.positive for pair in pairs]
    return sum(len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_seq_length)["input_ids"])


def sentence_transformers_run(
    model_path: str, pairs, batch_size: int, max_seq_length: int, output_dir: Path
) -> dict:
    import datasets
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    model = SentenceTransformer(model_path)
    model.max_seq_length = max_seq_length
    data = datasets.Dataset.from_dict(
        {"anchor": [p.query for p in pairs], "positive": [p.positive for p in pairs]}
    )
    arguments = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir / "sentence-transformers"),
        per_device_train_batch_size=batch_size,
        num_train_epochs=1,
        learning_rate=2e-5,
        warmup_ratio=0.1,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        seed=42,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=arguments, train_dataset=data, loss=MultipleNegativesRankingLoss(model, scale=20.0)
    )
    start = time.perf_counter()
    metrics = trainer.train().metrics
    return {"train_runtime_s": metrics.get("train_runtime", time.perf_counter() - start)}


def briskbert_run(
    model_path: str, train_files: list[str], batch_size: int, max_seq_length: int, output_dir: Path
) -> dict:
    """``briskbert finetune-embeddings`` as a user runs it, in its own process; its training time is the
    one the loop measured (``all_results.json``), so starting the process is not counted."""
    combined = output_dir / "pairs.jsonl"
    pairs = [pair for path in train_files for pair in _pairs(path, None)]
    combined.write_text("\n".join(json.dumps({"query": p.query, "positive": p.positive}) for p in pairs))
    run_dir = output_dir / "briskbert"
    command = [
        sys.executable, "-m", "briskbert", "finetune-embeddings",
        "--model_name_or_path", model_path, "--train_file", str(combined),
        "--per_device_train_batch_size", str(batch_size), "--max_seq_length", str(max_seq_length),
        "--max_query_length", str(max_seq_length), "--num_train_epochs", "1", "--learning_rate", "2e-5",
        "--warmup_ratio", "0.1", "--scale", "20", "--logging_steps", "10", "--overwrite_output_dir",
        "--output_dir", str(run_dir),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    results = json.loads((run_dir / "all_results.json").read_text())
    return {"train_runtime_s": results["train_runtime_s"], "loop_tokens_seen": results["tokens_seen"]}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model_name_or_path", required=True, help="A sentence-transformers BERT folder.")
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--extra_train_file", default=None)
    parser.add_argument("--per_device_train_batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=256)
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    require_extra("sentence-transformers", "the embedding benchmark")  # compares against its trainer
    from transformers import AutoTokenizer

    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    pairs = _pairs(args.train_file, args.extra_train_file)
    tokens = real_tokens(AutoTokenizer.from_pretrained(args.model_name_or_path), pairs, args.max_seq_length)
    files = [args.train_file] + ([args.extra_train_file] if args.extra_train_file else [])
    report = {
        "pairs": len(pairs),
        "real_tokens_per_epoch": tokens,
        "batch_size": args.per_device_train_batch_size,
    }
    report["sentence_transformers"] = sentence_transformers_run(
        args.model_name_or_path, pairs, args.per_device_train_batch_size, args.max_seq_length, output_dir
    )
    report["briskbert"] = briskbert_run(
        args.model_name_or_path, files, args.per_device_train_batch_size, args.max_seq_length, output_dir
    )
    for side in ("sentence_transformers", "briskbert"):
        report[side]["real_tokens_per_s"] = round(tokens / report[side]["train_runtime_s"], 1)
    print(json.dumps(report, indent=2))
    (output_dir / "speed.json").write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    try:
        main()
    except UserError as error:  # a missing extra: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT_CODE)
