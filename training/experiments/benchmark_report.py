"""The benchmark's report: ``benchmark.json``, ``benchmark.csv``, a bar chart and the table ``briskbert benchmark``
prints (what :func:`briskbert.training.experiments.benchmarking.run` measured)."""

import csv
import json
from pathlib import Path


def write_outputs(report: dict, out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "benchmark.json").write_text(json.dumps(report, indent=2, default=str))
    rows = report["results"]
    with open(out_dir / "benchmark.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    chart(rows, out_dir / "benchmark.png")


def chart(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["task"], r["dtype"]) for r in rows}, key=lambda g: (g[0] != "infer", g[1] != "fp32"))
    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 4), squeeze=False)
    for ax, (task, dtype) in zip(axes[0], groups):
        chosen = [r for r in rows if (r["task"], r["dtype"]) == (task, dtype)]
        names = [r["model"] for r in chosen]
        bars = ax.bar(
            names,
            [r["tokens_per_s"] for r in chosen],
            color=["tab:orange" if n.startswith("briskbert") else "tab:gray" for n in names],
        )
        for bar, r in zip(bars, chosen):
            ax.annotate(
                f"{r['vs_reference_fp32']:.2f}x",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_title(f"{'inference' if task == 'infer' else 'MLM training step'}, {dtype}")
        ax.set_ylabel("real tokens / s")
        ax.tick_params(axis="x", rotation=45, labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown_table(report: dict) -> str:
    lines = [
        "| task | dtype | model | real tokens/s | x reference sdpa fp32 | peak MiB | matmul fraction | spread |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        memory = "" if r["peak_memory_mib"] is None else f"{r['peak_memory_mib']:.0f}"
        lines.append(
            f"| {r['task']} | {r['dtype']} | {r['model']} | {r['tokens_per_s']:,.0f} | "
            f"{r['vs_reference_fp32']:.2f} | {memory} | {r['matmul_fraction']:.2f} | {r['spread']:.0%} |"
        )
    return "\n".join(lines)
