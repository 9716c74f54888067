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

import json
from dataclasses import dataclass
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.training.experiments.benchmark_settings import Settings


@dataclass(frozen=True)
class Output:
    out: Path = Path("runs/benchmark")


def main(argv=None):
    settings, output = parse(__doc__, Settings, Output, argv=argv)
    from briskbert.training.experiments.benchmark_report import markdown_table, write_outputs
    from briskbert.training.experiments.benchmarking import run

    report = run(settings)
    write_outputs(report, output.out)
    print(markdown_table(report))
    print(json.dumps(dict(machine=report["machine"], bf16_error=report["bf16_error"]), indent=1, default=str))


if __name__ == "__main__":
    main()
