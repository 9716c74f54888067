"""Continued pretraining of an imported checkpoint: briskbert's fast path against transformers' own class, the
figures of docs/performance.md ("Continued pretraining").

Both models start from the same weights (one folder; briskbert imports it the way ``briskbert pretrain
--model_name_or_path`` does, checked against the source) and are trained by the same loop, written as
transformers' ``run_mlm_no_trainer.py`` writes it with ``--line_by_line``: each paragraph one example (truncated
to ``--max_seq_length``), ``DataCollatorForLanguageModeling`` (15% masked, 80/10/10), AdamW, a linear schedule
with warm-up. The batches and their masks are drawn once and shared, so after the same steps both models have
seen the same tokens. Each round runs every model in a fresh process (alternating which goes first): real
(non-padding) tokens per second over the training steps, the growth of resident memory during training above
the loaded model (CPU: VmHWM; CUDA: allocated), and the validation MLM loss (a fixed masking of held-out
paragraphs, averaged over masked tokens) before and after. Run from the project root:

    python docs/benchmarks/continued_pretraining.py --source minilm --steps 40 --rounds 2 --threads 2
    python docs/benchmarks/continued_pretraining.py --source modernbert --steps 40 --rounds 2 --threads 2

``minilm`` is the real all-MiniLM-L6-v2 loaded as ``BertForMaskedLM``: it has no MLM head, so transformers
initialises one (seed 0: transform dense normal(0, 0.02), LayerNorm weight 1 and bias 0, decoder bias 0, decoder
weight tied to the word embeddings) and that folder is the common start. ``modernbert`` is a random
``ModernBertForMaskedLM`` (6 layers x 384, 12 heads, GeGLU 768, a global layer every third, 128-token window,
the MiniLM WordPiece vocabulary).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import transformers
from speed import minilm_folder, peak_memory_since, reset_peak_memory

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("transformers", "briskbert")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", choices=("minilm", "modernbert"), default="minilm")
    parser.add_argument("--corpus", default=str(ROOT / "data" / "wikitext2_excerpt.txt"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--warmup_ratio", type=float, default=0.06)
    parser.add_argument("--eval_lines", type=int, default=64, help="held-out paragraphs (the corpus's last)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", default="runs/continued-pretraining-benchmark")
    parser.add_argument("--worker", choices=MODELS, help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def start_folder(args) -> Path:
    """The common starting folder (model + tokenizer), written once."""
    folder = Path(args.workdir) / f"start-{args.source}"
    if (folder / "config.json").is_file():
        return folder
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
    torch.manual_seed(0)
    if args.source == "minilm":
        model, info = transformers.BertForMaskedLM.from_pretrained(minilm_folder(), output_loading_info=True)
        print("MLM head initialised by transformers:", sorted(info["missing_keys"]), file=sys.stderr)
    else:
        specials = {
            f"{name}_token_id": getattr(tokenizer, f"{name}_token_id") for name in ("pad", "cls", "sep")
        }
        config = transformers.ModernBertConfig(
            vocab_size=len(tokenizer), hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
            intermediate_size=768, global_attn_every_n_layers=3, local_attention=128,
            bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id, **specials,
        )  # fmt: skip
        model = transformers.ModernBertForMaskedLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def batches(args, tokenizer):
    """(training batches, validation batches), masked once: the same tokens and masks for every model."""
    lines = [
        line.strip() for line in Path(args.corpus).read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    held_out = args.eval_lines
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)

    def collate(texts, seed):
        torch.manual_seed(seed)
        features = tokenizer(texts, truncation=True, max_length=args.max_seq_length)
        return collator([{key: features[key][i] for key in ("input_ids",)} for i in range(len(texts))])

    train_lines, eval_lines = lines[:-held_out], lines[-held_out:]
    order = torch.randperm(len(train_lines), generator=torch.Generator().manual_seed(0)).tolist()
    size = args.batch_size
    train = []
    for step in range(args.steps):
        picked = [train_lines[order[(step * size + i) % len(order)]] for i in range(size)]
        train.append(collate(picked, 1000 + step))
    evaluation = [collate(eval_lines[i : i + size], 10 + i) for i in range(0, len(eval_lines), size)]
    return train, evaluation


def validation_loss(model, evaluation) -> float:
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in evaluation:
            masked = int((batch["labels"] != -100).sum())
            total += model(**batch).loss.item() * masked
            count += masked
    model.train()
    return total / count


def worker(args):
    torch.set_num_threads(args.threads)
    folder = start_folder(args)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    train, evaluation = batches(args, tokenizer)
    if args.worker == "transformers":
        model = transformers.AutoModelForMaskedLM.from_pretrained(folder)
    else:
        from briskbert.training.tasks.pretraining import continued_on_briskbert

        workdir = Path(args.workdir) / f"{args.source}-briskbert-{args.round}"
        model = continued_on_briskbert(
            str(folder), str(workdir), tokenizer, False, lambda line: print(line, file=sys.stderr)
        )
    before = validation_loss(model, evaluation)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    scheduler = transformers.get_linear_schedule_with_warmup(
        optimizer, int(args.warmup_ratio * args.steps), args.steps
    )
    model.train()
    start_memory = reset_peak_memory("cpu")
    started = time.perf_counter()
    for batch in train:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    seconds = time.perf_counter() - started
    real_tokens = sum(int(batch["attention_mask"].sum()) for batch in train)
    padded = sum(batch["attention_mask"].numel() for batch in train)
    print(
        json.dumps(
            dict(
                model=args.worker,
                cls=type(model).__name__,
                tokens_per_s=real_tokens / seconds,
                peak_mib=peak_memory_since("cpu", start_memory) / 2**20,
                eval_loss_before=before,
                eval_loss_after=validation_loss(model, evaluation),
                real_tokens=real_tokens,
                real_share=real_tokens / padded,
            )
        )
    )


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    start_folder(args)
    results = {name: [] for name in MODELS}
    for round_number in range(args.rounds):
        order = MODELS if round_number % 2 == 0 else MODELS[::-1]
        for name in order:
            command = [
                sys.executable,
                __file__,
                *sys.argv[1:],
                "--worker",
                name,
                "--round",
                str(round_number),
            ]
            load = os.getloadavg()[0]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["load"] = load
            results[name].append(row)
            print(json.dumps(row), file=sys.stderr)
    summary = {}
    for name, rows in results.items():
        summary[name] = dict(
            cls=rows[0]["cls"],
            tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows),
            tokens_per_s_runs=[round(r["tokens_per_s"]) for r in rows],
            peak_mib=statistics.median(r["peak_mib"] for r in rows),
            eval_loss_before=rows[0]["eval_loss_before"],
            eval_loss_after=[round(r["eval_loss_after"], 4) for r in rows],
            real_tokens=rows[0]["real_tokens"],
            real_share=rows[0]["real_share"],
            load=[round(r["load"], 1) for r in rows],
        )
    print(json.dumps(dict(settings=vars(args), summary=summary), indent=2))


if __name__ == "__main__":
    main()
