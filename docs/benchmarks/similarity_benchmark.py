# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tuning on scored pairs, side by side in one process: sentence-transformers' own trainer
(``SentenceTransformerTrainer`` with ``CoSENTLoss`` on the original BERT checkpoint) and
``briskbert finetune-embeddings --loss cosent`` (the same checkpoint converted; the same pairs, epochs, batch,
learning rate and schedule, warm-up, sequence length, loss scale and seed).

    python docs/benchmarks/similarity_benchmark.py --model_name_or_path path/to/all-MiniLM-L6-v2 \
        --train_file stsb/train.tsv --validation_file stsb/dev.tsv --output_dir runs/sts-speed

Both fine-tuned models are then scored on the validation pairs by ``evaluate_similarity`` (Spearman / Pearson
of cosine similarity), and by sentence-transformers' ``EmbeddingSimilarityEvaluator`` as a cross-check. Real
tokens are the non-padding tokens of both sentences of every pair in one epoch (the same on both sides);
tokens/s divides them by each trainer's own training time. Writes ``similarity_benchmark.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Budget:
    epochs: float = 1.0
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    max_seq_length: int = 128
    scale: float = 20.0
    seed: int = 42


def real_tokens(tokenizer, pairs, max_seq_length: int) -> int:
    texts = [pair.sentence1 for pair in pairs] + [pair.sentence2 for pair in pairs]
    return sum(len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_seq_length)["input_ids"])


def sentence_transformers_run(model_path: str, pairs, budget: Budget, output_dir: Path) -> dict:
    import datasets
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    model = SentenceTransformer(model_path, device="cpu")
    model.max_seq_length = budget.max_seq_length
    data = datasets.Dataset.from_dict(
        {
            "sentence1": [p.sentence1 for p in pairs],
            "sentence2": [p.sentence2 for p in pairs],
            "score": [p.score for p in pairs],
        }
    )
    arguments = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir / "sentence-transformers"),
        per_device_train_batch_size=budget.batch_size,
        num_train_epochs=budget.epochs,
        learning_rate=budget.learning_rate,
        warmup_ratio=budget.warmup_ratio,
        logging_steps=50,
        save_strategy="no",
        report_to="none",
        seed=budget.seed,
        use_cpu=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=arguments, train_dataset=data, loss=CoSENTLoss(model, scale=budget.scale)
    )
    start = time.perf_counter()
    metrics = trainer.train().metrics
    folder = output_dir / "sentence-transformers" / "final"
    model.save(str(folder))
    return {
        "train_runtime_s": metrics.get("train_runtime", time.perf_counter() - start),
        "folder": str(folder),
    }


def briskbert_run(model_path: str, train_file: str, budget: Budget, output_dir: Path) -> dict:
    """``briskbert finetune-embeddings`` as a user runs it, in its own process."""
    import subprocess

    from briskbert.processes import briskbert_argv

    folder = output_dir / "briskbert"
    command = briskbert_argv(
        "finetune-embeddings", "--model_name_or_path", model_path, "--train_file", train_file, "--loss", "cosent",
        "--per_device_train_batch_size", str(budget.batch_size), "--max_seq_length", str(budget.max_seq_length),
        "--num_train_epochs", str(budget.epochs), "--learning_rate", str(budget.learning_rate),
        "--warmup_ratio", str(budget.warmup_ratio), "--scale", str(budget.scale), "--seed", str(budget.seed),
        "--logging_steps", "50", "--overwrite_output_dir", "--output_dir", str(folder),
    )  # fmt: skip
    subprocess.run(command, check=True)
    results = json.loads((folder / "all_results.json").read_text())
    return {"train_runtime_s": results["train_runtime_s"], "folder": str(folder / "final")}


def scores(folder: str, pairs) -> dict:
    """Spearman / Pearson (x100) by briskbert's evaluation and by sentence-transformers' evaluator."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from briskbert.retrieval.dense import load_dual_encoder
    from briskbert.training.retrieval.similarity import evaluate_similarity

    encoder, tokenizer, spec = load_dual_encoder(folder)
    ours = evaluate_similarity(encoder, tokenizer, pairs, spec)
    evaluator = EmbeddingSimilarityEvaluator(
        [p.sentence1 for p in pairs], [p.sentence2 for p in pairs], [p.score for p in pairs], write_csv=False
    )
    theirs = evaluator(SentenceTransformer(folder, device="cpu", trust_remote_code=True))
    return {
        "spearman": round(100 * ours["spearman"], 2),
        "pearson": round(100 * ours["pearson"], 2),
        "sentence_transformers_evaluator_spearman": round(100 * theirs["spearman_cosine"], 2),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model_name_or_path", required=True, help="A sentence-transformers BERT folder.")
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--validation_file", required=True)
    parser.add_argument("--per_device_train_batch_size", type=int, default=16)
    parser.add_argument("--num_train_epochs", type=float, default=1.0)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from briskbert.training.retrieval.similarity import load_scored_pairs

    budget = Budget(
        args.num_train_epochs, args.per_device_train_batch_size, max_seq_length=args.max_seq_length
    )
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    train, validation = load_scored_pairs(args.train_file), load_scored_pairs(args.validation_file)
    tokens = real_tokens(AutoTokenizer.from_pretrained(args.model_name_or_path), train, budget.max_seq_length)
    report = {
        "pairs": len(train),
        "real_tokens_per_epoch": round(tokens * budget.epochs),
        "budget": budget.__dict__,
    }
    report["before"] = scores(args.model_name_or_path, validation)
    report["sentence_transformers"] = sentence_transformers_run(
        args.model_name_or_path, train, budget, output_dir
    )
    report["briskbert"] = briskbert_run(args.model_name_or_path, args.train_file, budget, output_dir)
    for side in ("sentence_transformers", "briskbert"):
        run = report[side]
        run["real_tokens_per_s"] = round(tokens * budget.epochs / run["train_runtime_s"], 1)
        run.update(scores(run.pop("folder"), validation))
    print(json.dumps(report, indent=2))
    (output_dir / "similarity_benchmark.json").write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
