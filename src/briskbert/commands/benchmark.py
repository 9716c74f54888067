"""Speed of briskbert against transformers' own implementation, side by side in one run: BertModel (sdpa, eager)
and ModernBertModel, or, with --architecture roberta / modernbert, RobertaModel / ModernBertModel holding the same
weights as the briskbert model converted from them.

Same weights, same real variable-length batches, same threads; models measured interleaved, medians reported:

    briskbert benchmark --out runs/benchmark                       # all-MiniLM-L6-v2 (6 x 384), SST-2
    briskbert benchmark --weights random --hidden_size 768 --num_hidden_layers 12 \\
        --num_attention_heads 12 --intermediate_size 3072 --source wikitext --max_len 512   # BERT-base size
    briskbert benchmark --weights random --architecture roberta      # RobertaModel, same weights

Writes benchmark.json, benchmark.csv and benchmark.png to --out and prints a markdown table.
"""

import argparse
import json
from pathlib import Path

from briskbert.training.experiments.benchmark_settings import (
    ARCHITECTURES,
    MODEL_NAMES,
    SOURCES,
    Settings,
    Size,
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def main(argv=None):
    defaults, size = Settings(), Size()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmark"))
    parser.add_argument(
        "--weights",
        choices=["minilm", "random"],
        default=defaults.weights,
        help="the converted real all-MiniLM-L6-v2 (bert only), or random weights at the sizes below",
    )
    parser.add_argument(
        "--architecture",
        choices=sorted(ARCHITECTURES),
        default=defaults.architecture,
        help="the transformers implementation briskbert is converted from and compared with",
    )
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
        parser.add_argument(f"--{name}", type=int, default=getattr(size, name))
    parser.add_argument(
        "--source",
        choices=sorted(SOURCES),
        default=defaults.source,
        help="sst2: SST-2 sentences; wikitext: WikiText-2 paragraphs",
    )
    for name in ("batch_size", "num_batches", "min_len", "max_len", "rounds", "seed"):
        parser.add_argument(f"--{name}", type=int, default=getattr(defaults, name))
    parser.add_argument("--tasks", nargs="+", choices=["infer", "train"], default=list(defaults.tasks))
    parser.add_argument("--dtypes", nargs="+", choices=["fp32", "bf16"], default=list(defaults.dtypes))
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        choices=MODEL_NAMES,
        help="models to time (default: the architecture's list: "
        + "; ".join(f"{a}: {' '.join(m)}" for a, m in ARCHITECTURES.items())
        + ")",
    )
    parser.add_argument(
        "--compile", action="store_true", help="also time torch.compile(briskbert) for inference"
    )
    parser.add_argument("--device", default=defaults.device)
    parser.add_argument(
        "--threads", type=int, help="torch threads for every model (default: torch's own choice)"
    )
    args = parser.parse_args(argv)
    models = tuple(args.models or ARCHITECTURES[args.architecture])
    reference = ARCHITECTURES[args.architecture][0]
    if reference not in models:
        parser.error(f"--models must include {reference}, the reference every ratio is taken against")
    if args.weights == "minilm" and args.architecture != "bert":
        parser.error(
            "--weights minilm is a BERT checkpoint; use --weights random with --architecture roberta/modernbert"
        )
    settings = Settings(
        weights=args.weights,
        architecture=args.architecture,
        size=Size(args.hidden_size, args.num_hidden_layers, args.num_attention_heads, args.intermediate_size),
        source=args.source,
        batch_size=args.batch_size,
        num_batches=args.num_batches,
        min_len=args.min_len,
        max_len=args.max_len,
        rounds=args.rounds,
        tasks=tuple(args.tasks),
        dtypes=tuple(args.dtypes),
        models=models,
        compile=args.compile,
        device=args.device,
        seed=args.seed,
        threads=args.threads,
    )
    if "fp32" not in settings.dtypes:
        parser.error("--dtypes must include fp32: ratios are taken against BertModel-sdpa in fp32")
    from briskbert.training.experiments.benchmarking import markdown_table, run, write_outputs

    report = run(settings)
    write_outputs(report, args.out)
    print(markdown_table(report))
    print(json.dumps(dict(machine=report["machine"], bf16_error=report["bf16_error"]), indent=1, default=str))


if __name__ == "__main__":
    main()
