"""`briskbert pretrain` on a GPU against transformers' models in a plain loop: the table of docs/performance.md
("GPU: pretraining").

Rows, on the same packed corpus with bf16 autocast and random initialisation: the job with the data loader of
its first GPU measurement (``--dataloader_num_workers 0``), the job with today's defaults (and with
``--torch_compile``), and a ``run_mlm_no_trainer``-style loop (the corpus tokenized, concatenated and cut into
blocks; transformers' ``DataCollatorForLanguageModeling`` at 15 %; AdamW; Accelerate) around transformers'
``BertForMaskedLM`` / ``ModernBertForMaskedLM`` and briskbert's ``BriskBertForMaskedLM``. Each row reports real
tokens/s in steady state (the job's logged intervals after the first; the loop's steps after its warm-up), over
the whole run, in the first interval, the MFU of the steady rate, peak memory and (for the job) the memory
estimate its pre-check used. On CUDA each row runs in its own process, bounded so that the whole table takes
under 8 minutes on an H100/H200; on CPU (``--device cpu --size tiny``) the rows run in this process at toy size.

    python docs/benchmarks/pretrain_gpu.py --corpus wikitext-2/valid.txt --tokenizer all-MiniLM-L6-v2 > gpu.jsonl

MFU = training FLOPs per real token (3 x the forward's: every linear layer, attention over the attended context,
the MLM transform and decoder at the masked positions only) x tokens/s / 989 TFLOP/s (H100/H200 dense bf16).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEAK_FLOPS = 989e12
MASKED = 0.15
LARGE = "hidden_size=1024,num_hidden_layers=24,num_attention_heads=16,intermediate_size=4096"
# name: (job preset, config overrides, seq, batch, job steps, plain-loop models)
SHAPES = {
    "full": {
        "bert-base/128": ("bert-base", None, 128, 256, 200, ("hf-bert", "briskbert")),
        "bert-large/512": ("bert-base", LARGE, 512, 64, 40, ("hf-bert", "briskbert")),
        "modern-base/512": ("modern-base", None, 512, 64, 60, ("hf-modernbert",)),
    },
    "tiny": {"bert-tiny/64": ("bert-tiny", None, 64, 8, 6, ("hf-bert", "hf-modernbert", "briskbert"))},
}
JOBS = {
    "job, 0 workers": ["--dataloader_num_workers", "0"],
    "job, defaults": [],
    "job, compiled": ["--torch_compile"],
}
SECONDS = {"job": 150, "loop": 90}  # the most one row may take on CUDA


def flops_per_token(config: dict, seq: int, glu: bool, windows: list) -> float:
    """Training FLOPs per real token of an encoder described by a transformers config dict."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    linear = 2 * hidden * hidden + 2 * hidden * kv_heads * (hidden // heads)
    linear += (3 if glu else 2) * hidden * config["intermediate_size"]
    forward = sum(2 * linear + 4 * min(seq, window or seq) * hidden for window in windows)
    forward += MASKED * 2 * (hidden * hidden + hidden * config["vocab_size"])
    return 3 * forward


def briskbert_windows(config: dict) -> list:
    window, every = config.get("sliding_window"), config.get("global_attn_every_n_layers")
    local = [
        window is not None and not (every and i % every == 0) for i in range(config["num_hidden_layers"])
    ]
    return [2 * window + 1 if is_local else None for is_local in local]


def peak_memory_gib(device: str) -> float:
    import torch

    if device == "cuda":
        return round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)  # this process's peak RSS


def job_row(args, shape: str, label: str) -> dict:
    """`briskbert pretrain` with the job's own logs read back: intervals, whole run, memory estimate."""
    from briskbert import cli
    from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM
    from briskbert.training.engine.memory import estimate_training_memory

    preset, overrides, seq, batch, steps, _ = SHAPES[args.size][shape]
    out = Path(args.out) / f"{label}-{shape}".replace(" ", "").replace(",", "-").replace("/", "-")
    argv = [
        "pretrain",
        "--train_file",
        args.corpus,
        "--tokenizer_name",
        args.tokenizer,
        "--config_name",
        preset,
    ]
    argv += [
        "--max_seq_length",
        str(seq),
        "--packing_mode",
        "full-sentences",
        "--per_device_train_batch_size",
    ]
    argv += [str(batch), "--max_train_steps", str(steps), "--logging_steps", str(max(2, steps // 10))]
    argv += ["--eval_steps", str(steps), "--learning_rate", "1e-4", "--output_dir", str(out)]
    argv += ["--mixed_precision", "bf16" if args.device == "cuda" else "no", "--overwrite_output_dir"]
    argv += (["--config_overrides", overrides] if overrides else []) + JOBS[label]
    if cli.main(argv) != 0:
        raise RuntimeError(f"briskbert {' '.join(argv)} failed")
    config = json.loads((out / "final" / "config.json").read_text())
    facts = json.loads((out / "final" / "training_facts.json").read_text())
    rates = [
        e["tokens_per_s"] for e in map(json.loads, (out / "log_history.jsonl").open()) if "tokens_per_s" in e
    ]
    estimate = estimate_training_memory(
        BriskBertForMaskedLM,
        BriskBertConfig(**config),
        batch,
        seq,
        args.device,
        facts["mixed_precision"],
        MASKED,
    )
    return {
        "tokens_per_s": statistics.median(rates[1:] or rates),
        "whole_run_tokens_per_s": facts["tokens_seen"] / facts["wall_time_s"],
        "first_interval_tokens_per_s": rates[0],
        "flops_per_token": flops_per_token(
            config, seq, config.get("mlp_type") == "glu", briskbert_windows(config)
        ),
        "estimate_GiB": round(estimate.total_bytes / 2**30, 2),
    }


def plain_model(impl: str, shape: str, size: str, vocab: int, tokenizer):
    """The model a plain loop trains, the job's shape at ``shape``; with its attended context per layer."""
    import transformers

    from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM

    preset, overrides, seq, *_ = SHAPES[size][shape]
    sizes = BriskBertConfig.from_preset(preset).to_dict()
    sizes.update(dict(item.split("=") for item in overrides.split(",")) if overrides else {})
    dims = {key: int(sizes[key]) for key in ("hidden_size", "num_hidden_layers", "num_attention_heads")}
    inter, layers = int(sizes["intermediate_size"]), dims["num_hidden_layers"]
    if impl == "hf-bert":
        config = transformers.BertConfig(vocab_size=vocab, intermediate_size=inter, **dims)
        config._attn_implementation = "sdpa"
        return transformers.BertForMaskedLM(config), config.to_dict(), False, [None] * layers
    if impl == "hf-modernbert":
        ids = {"pad_token_id": tokenizer.pad_token_id, "cls_token_id": tokenizer.cls_token_id}
        ids.update(sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.cls_token_id)
        ids.update(eos_token_id=tokenizer.sep_token_id)
        config = transformers.ModernBertConfig(
            vocab_size=vocab, intermediate_size=inter, max_position_embeddings=max(8192, seq), **ids, **dims
        )
        windows = [
            None if kind == "full_attention" else config.local_attention for kind in config.layer_types
        ]
        return transformers.ModernBertForMaskedLM(config), config.to_dict(), True, windows
    config = BriskBertConfig(vocab_size=vocab, intermediate_size=inter, sparse_prediction=True, **dims)
    return BriskBertForMaskedLM(config), config.to_dict(), False, [None] * layers


def loop_row(args, shape: str, impl: str) -> dict:
    """A run_mlm_no_trainer-style loop: group_texts blocks, transformers' MLM collator, AdamW, Accelerate."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    _, _, seq, batch, _, _ = SHAPES[args.size][shape]
    steps, warmup = (50, 10) if args.size == "full" else (6, 2)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    lines = [line for line in Path(args.corpus).read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = [token for row in tokenizer(lines)["input_ids"] for token in row]
    blocks = torch.tensor(ids[: len(ids) // seq * seq]).view(-1, seq)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=MASKED)
    examples = [{"input_ids": block} for block in blocks]
    loader = torch.utils.data.DataLoader(examples, batch, shuffle=True, collate_fn=collator, drop_last=True)
    accelerator = Accelerator(
        mixed_precision="bf16" if args.device == "cuda" else "no", cpu=args.device == "cpu"
    )
    torch.manual_seed(0)
    model, config, glu, windows = plain_model(impl, shape, args.size, len(tokenizer), tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    sync = torch.cuda.synchronize if args.device == "cuda" else lambda: None
    done, marks = 0, []
    while done < steps:
        for inputs in loader:
            if done in (0, warmup):
                sync()
                marks.append(time.perf_counter())
            accelerator.backward(model(**inputs).loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            if done == steps:
                break
    sync()
    end, tokens = time.perf_counter(), batch * seq
    return {
        "tokens_per_s": (steps - warmup) * tokens / (end - marks[1]),
        "whole_run_tokens_per_s": steps * tokens / (end - marks[0]),
        "first_interval_tokens_per_s": warmup * tokens / (marks[1] - marks[0]),
        "flops_per_token": flops_per_token(config, seq, glu, windows),
    }


def rows(size: str) -> list[tuple[str, str, str]]:
    """(kind, shape, label) in the order they run: every shape's job rows first, compilation (full size) last."""
    shapes = SHAPES[size]
    jobs = [("job", shape, label) for shape in shapes for label in JOBS if label != "job, compiled"]
    loops = [("loop", shape, impl) for shape, spec in shapes.items() for impl in spec[-1]]
    compiled = [("job", next(iter(shapes)), "job, compiled")] if size == "full" else []  # minutes on CPU
    return jobs + loops + compiled


def measure(args, kind: str, shape: str, label: str) -> dict:
    """One row, in this process."""
    result = (job_row if kind == "job" else loop_row)(args, shape, label)
    result["mfu"] = float(f"{result['tokens_per_s'] * result.pop('flops_per_token') / PEAK_FLOPS:.3g}")
    rounded = {key: round(value) for key, value in result.items() if key.endswith("tokens_per_s")}
    return {"row": label, "shape": shape, **result, **rounded, "peak_GiB": peak_memory_gib(args.device)}


def in_own_process(args, kind: str, shape: str, label: str, deadline: float) -> dict:
    """One row in a fresh process (its own GPU memory peak and compile caches), within its time."""
    budget = min(SECONDS[kind], deadline - time.monotonic())
    if budget < 20:
        return {"row": label, "shape": shape, "skipped": "past the deadline"}
    argv = [sys.executable, __file__, *sys.argv[1:], "--out", args.out, "--only", kind, shape, label]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=budget)
    except subprocess.TimeoutExpired:
        return {"row": label, "shape": shape, "skipped": f"ran past {budget:.0f} s"}
    if done.returncode != 0:
        return {"row": label, "shape": shape, "failed": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def environment(device: str) -> dict:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="a text file (WikiText-2's valid.txt, for instance)")
    parser.add_argument(
        "--tokenizer", required=True, help="a WordPiece tokenizer folder (all-MiniLM-L6-v2's)"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--size", choices=tuple(SHAPES), default="full")
    parser.add_argument(
        "--out", default=None, help="where the job rows write their runs (default: a temporary folder)"
    )
    parser.add_argument("--deadline", type=float, default=420, help="seconds after which no new row starts")
    parser.add_argument("--only", nargs=3, help=argparse.SUPPRESS)  # one row, in a process of its own
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        args.out = args.out or scratch
        os.environ.setdefault("BRISKBERT_CACHE", str(Path(args.out) / "cache"))
        if args.only:
            print(json.dumps(measure(args, *args.only)), flush=True)
            return []
        print(json.dumps(environment(args.device)), flush=True)
        deadline, results = time.monotonic() + args.deadline, []
        for row in rows(args.size):
            result = in_own_process(args, *row, deadline) if args.device == "cuda" else measure(args, *row)
            print(json.dumps(result), flush=True)
            results.append(result)
    return results


if __name__ == "__main__":
    main()
