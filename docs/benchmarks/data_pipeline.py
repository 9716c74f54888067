# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Pretraining data preparation, measured: briskbert's corpus store against transformers' ``run_mlm`` recipe.

    python docs/benchmarks/data_pipeline.py --sizes_mb 100 500 --preprocessing_num_workers 2 --output results.md

For each corpus size a plain-text corpus is generated (WikiText-2 repeated: ``valid.txt`` and
``test.txt`` from the shared data folder when present, else the bundled excerpt) in a temporary folder.
Each measurement runs in its own fresh process, so its peak memory is its own; the parent samples the
resident memory (RSS) of that process and all its children every 0.25 s and keeps the largest sum.

* ``briskbert``: :func:`training.data.corpus.prepare_corpus` (``--preprocessing_num_workers`` processes) and
  the ``full-sentences`` sequence index of :class:`training.data.pretraining_data.StoredSequences`.
* ``briskbert, cached``: the same again, finding the store in the cache.
* ``run_mlm``: transformers' ``examples/pytorch/language-modeling/run_mlm.py`` without ``--line_by_line``:
  ``load_dataset("text")``, ``Dataset.map(tokenize_function, batched=True, num_proc=N)`` with
  ``return_special_tokens_mask=True``, then ``map(group_texts, batched=True, num_proc=N)`` into blocks of
  ``max_seq_length``, everything in an Arrow cache on disk.

Both use the same tokenizer (a 16,000-token WordPiece vocabulary trained on the source text, unless one
is given) and the same number of workers. Memory is the proportional set size (PSS) summed over the
process tree: pages that forked workers share with their parent are split between them, not counted
once per process. The corpora and caches are deleted afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.errors import SettingError

MB = 1_000_000
CHILD = "--measured-child"  # how the script runs itself as the measured process


@dataclass(frozen=True)
class BenchmarkSettings:
    sizes_mb: list[int] = field(
        default_factory=lambda: [100], metadata={"help": "Corpus sizes in megabytes."}
    )
    preprocessing_num_workers: int = field(default=2, metadata={"help": "Workers of both recipes."})
    max_seq_length: int = 128
    tokenizer_name: str | None = field(
        default=None,
        metadata={"help": "A tokenizer folder (default: WordPiece 30522 trained on the source)."},
    )
    source_dir: str | None = field(
        default=os.environ.get("BRISKBERT_DATA", "../shared/data") + "/wikitext-2",
        metadata={"help": "Folder with WikiText-2's valid.txt and test.txt."},
    )
    work_dir: str | None = field(
        default=None, metadata={"help": "Where the temporary corpora go (default: the system's)."}
    )
    skip_run_mlm: bool = field(default=False, metadata={"help": "Measure briskbert only."})

    def __post_init__(self):
        for name, value in (
            ("sizes_mb", min(self.sizes_mb)),
            ("preprocessing_num_workers", self.preprocessing_num_workers),
        ):
            if value < 1:
                raise SettingError(name, f"must be positive, got {value}.")


@dataclass(frozen=True)
class Measurement:
    size_mb: int
    method: str
    seconds: float
    peak_rss_gb: float
    sequences: int


def source_files(source_dir: str | None) -> list[Path]:
    """WikiText-2 valid+test from ``source_dir`` when there, else the bundled excerpt."""
    if source_dir:
        found = [
            Path(source_dir) / name
            for name in ("valid.txt", "test.txt")
            if (Path(source_dir) / name).is_file()
        ]
        if found:
            return found
    from briskbert.data import DATA_DIR

    return [Path(DATA_DIR) / "wikitext2_excerpt.txt"]


def generate_corpus(sources: list[Path], size_mb: int, path: Path) -> Path:
    """Repeat the source text until the file holds ``size_mb`` megabytes (whole copies, then a cut at a
    line end)."""
    text = "".join(p.read_text(encoding="utf-8") for p in sources).encode("utf-8")
    target = size_mb * MB
    with open(path, "wb") as handle:
        written = 0
        while written + len(text) <= target:
            handle.write(text)
            written += len(text)
        rest = text[: max(0, target - written)]
        handle.write(rest[: rest.rfind(b"\n") + 1])
    return path


def _memory(member) -> int:
    """Proportional set size (shared pages split between the processes sharing them, so forked workers
    are not counted twice), else the resident set size."""
    try:
        return member.memory_full_info().pss
    except (AttributeError, OSError):
        return member.memory_info().rss


def peak_tree_rss(process: subprocess.Popen, interval: float = 0.25) -> int:
    """Wait for ``process``; the largest sum of resident memory (PSS) over it and its children seen."""
    import psutil

    root, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            total = 0
            for member in tree:
                try:
                    total += _memory(member)
                except psutil.NoSuchProcess:
                    pass
            peak = max(peak, total)
        except psutil.NoSuchProcess:
            break
        time.sleep(interval)
    return peak


def measure(
    method: str, corpus: Path, tokenizer_dir: Path, cache_dir: Path, settings: BenchmarkSettings
) -> dict:
    """Run one preparation in a fresh process; its result plus the peak RSS of its process tree."""
    job = {
        "method": method,
        "corpus": str(corpus),
        "tokenizer": str(tokenizer_dir),
        "cache_dir": str(cache_dir),
        "num_workers": settings.preprocessing_num_workers,
        "max_seq_length": settings.max_seq_length,
    }
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, __file__, CHILD, json.dumps(job)], stdout=subprocess.PIPE, text=True
    )
    peak = peak_tree_rss(process)
    output = process.stdout.read()
    if process.wait() != 0:
        raise RuntimeError(f"the {method} preparation of {corpus} failed (exit {process.returncode}).")
    result = json.loads(output.strip().splitlines()[-1])
    return {**result, "peak_rss": peak, "process_seconds": time.perf_counter() - start}


def child_main(job_json: str) -> None:
    """Inside the measured process: prepare, then print the JSON result."""
    import datasets  # noqa: F401  (imports are not preparation time)
    import transformers  # noqa: F401

    from briskbert.training.data import pretraining_data  # noqa: F401

    job = json.loads(job_json)
    start = time.perf_counter()
    sequences = (prepare_briskbert if job["method"].startswith("briskbert") else prepare_run_mlm)(job)
    print(json.dumps({"seconds": time.perf_counter() - start, "sequences": sequences}), flush=True)


def prepare_briskbert(job: dict) -> int:
    from briskbert.tokenization import BriskBertTokenizer
    from briskbert.training.data.corpus import CorpusSource, PreparationSettings, prepare_corpus
    from briskbert.training.data.pretraining_data import StoredSequences

    tokenizer = BriskBertTokenizer.from_pretrained(job["tokenizer"])
    settings = PreparationSettings(
        num_workers=job["num_workers"], cache_dir=job["cache_dir"], show_progress=False
    )
    store = prepare_corpus(CorpusSource(job["corpus"]), tokenizer, settings, log=lambda *_: None)
    sequences = StoredSequences(
        store, None, job["max_seq_length"], "full-sentences", tokenizer.cls_token_id, tokenizer.sep_token_id
    )
    return len(sequences)


def prepare_run_mlm(job: dict) -> int:
    """transformers' run_mlm.py data preparation (not line by line), as written there."""
    import datasets
    from transformers import BertTokenizer  # what AutoTokenizer gives for a BERT vocabulary

    tokenizer = BertTokenizer.from_pretrained(job["tokenizer"])
    raw = datasets.load_dataset("text", data_files={"train": job["corpus"]}, cache_dir=job["cache_dir"])
    block_size = job["max_seq_length"]

    def tokenize_function(examples):
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    def group_texts(examples):
        concatenated = {k: [t for row in examples[k] for t in row] for k in examples}
        total_length = len(concatenated["input_ids"]) // block_size * block_size
        return {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)]
            for k, t in concatenated.items()
        }

    tokenized = raw.map(tokenize_function, batched=True, num_proc=job["num_workers"], remove_columns=["text"])
    grouped = tokenized.map(group_texts, batched=True, num_proc=job["num_workers"])
    return len(grouped["train"])


def run_benchmark(settings: BenchmarkSettings, log=print) -> list[Measurement]:
    """Every size, every method; corpora and caches live in a temporary folder deleted at the end."""
    work = Path(tempfile.mkdtemp(prefix="briskbert-data-benchmark-", dir=settings.work_dir))
    try:
        tokenizer_dir = _benchmark_tokenizer(settings, work)
        results = []
        for size in settings.sizes_mb:
            corpus = generate_corpus(source_files(settings.source_dir), size, work / f"corpus-{size}mb.txt")
            methods = [("briskbert", "store"), ("briskbert, cached", "store")]
            if not settings.skip_run_mlm:
                methods.append(("run_mlm", f"arrow-{size}"))
            for method, cache in methods:
                log(f"{size} MB: {method} ...")
                outcome = measure(method, corpus, tokenizer_dir, work / cache, settings)
                results.append(
                    Measurement(
                        size, method, outcome["seconds"], outcome["peak_rss"] / 1e9, outcome["sequences"]
                    )
                )
                log(f"  {outcome['seconds']:.1f} s, peak RSS {outcome['peak_rss'] / 1e9:.2f} GB")
            corpus.unlink()
            shutil.rmtree(work / "store", ignore_errors=True)
            shutil.rmtree(work / f"arrow-{size}", ignore_errors=True)
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _benchmark_tokenizer(settings: BenchmarkSettings, work: Path) -> Path:
    if settings.tokenizer_name:
        return Path(settings.tokenizer_name)
    from briskbert.tokenization import train_wordpiece_tokenizer

    folder = work / "tokenizer"
    files = [str(p) for p in source_files(settings.source_dir)]
    train_wordpiece_tokenizer(files=files, vocab_size=16000, output_dir=folder, show_progress=False)
    return folder


def markdown_table(results: list[Measurement], settings: BenchmarkSettings) -> str:
    lines = [
        f"| corpus | method ({settings.preprocessing_num_workers} workers) | preparation time (s) | peak RSS (GB) | "
        f"sequences of {settings.max_seq_length} |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.size_mb} MB | {r.method} | {r.seconds:.1f} | {r.peak_rss_gb:.2f} | {r.sequences:,} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Output:
    output: str | None = field(default=None, metadata={"help": "Also write the markdown table to this file."})


def main(argv: list[str] | None = None) -> int:
    settings, output = parse(__doc__, BenchmarkSettings, Output, argv=argv)
    table = markdown_table(run_benchmark(settings), settings)
    print(table)
    if output.output:
        Path(output.output).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD]:
        child_main(sys.argv[2])
    else:
        sys.exit(main())
