"""The README's command blocks run as written, at tiny sizes, from a fresh directory with the ``data/``
excerpts: each block is a test, and one that reads another block's output runs that block first, once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from briskbert.cli import COMMANDS
from briskbert.extras import is_installed
from briskbert.retrieval.dense import ranking_shortfall

ROOT = Path(__file__).resolve().parents[1]

# Blocks the suite does not execute, and why: installing (the test already runs in the installed project) and
# the two top-level commands (CI runs the tests; tests/test_quickstart.py runs the quickstart at its smoke size).
NOT_RUN = ("pip install", "bash scripts/test.sh", "bash scripts/quickstart.sh", "git clone")

# Flag values replaced to keep the walk-through small; everything else runs as written.
TINY = {"--max_train_steps": "3", "--num_train_epochs": "1", "--checkpointing_steps": "2", "--seeds": "0"}
TINY |= {"--vocab_size": "600", "--max_train_samples": "32", "--max_eval_samples": "16"}
TINY |= {"--per_device_train_batch_size": "8", "--rerank_top_k": "5"}
# Size flags a job has that its README command leaves at their full-data defaults: given to that job's commands.
# The retrieval jobs train MiniLM, whose every step takes seconds on a shared CPU: one step each, on short sequences.
ADDED = {
    "finetune-embeddings": "--max_train_samples 16 --per_device_train_batch_size 16 --max_seq_length 32",
    "finetune-reranker": "--max_train_samples 16 --per_device_train_batch_size 16 --num_negatives 1 "
    "--negative_pool_size 1 --max_seq_length 64",
    "finetune-qa": "--max_eval_samples 16",
}
# Bundled files some blocks read whole, cut to their first lines: the pretraining corpus (tokenizer, pretraining,
# ablation and index blocks) and the validation rows that evaluate-similarity and quantize read whole.
CUT = {"wikitext2_excerpt.txt": 200, "stsb_dev_excerpt.tsv": 65, "sst2_validation_excerpt.tsv": 65}
# What a block may use that an optional extra brings: the extra, and the module that shows it is installed.
NEEDS = {
    "sentence_transformers": ("[sentence-transformers]", "sentence_transformers"),
    "peft": ("[peft]", "peft"),
    "export-onnx": ("[onnx]", "onnxruntime"),
    "--backend torch": ("[torchao]", "torchao"),
}
# A folder a block writes: what these flags name under runs/.
WRITES = re.compile(r"--(?:output_dir|out|data_dir)[ =](runs/[\w.-]+)")
RUNS = re.compile(r"\bruns/[\w.-]+")


@dataclass(frozen=True)
class Block:
    """One ```bash or ```python block of the README."""

    lang: str
    body: str
    line: int  # where it starts in README.md
    section: str  # the heading above it

    @property
    def writes(self) -> set[str]:
        return set(WRITES.findall(self.body))

    @property
    def reads(self) -> set[str]:
        return set(RUNS.findall(self.body)) - self.writes

    @property
    def runs(self) -> bool:
        return not any(marker in self.body for marker in NOT_RUN)

    @property
    def needs(self) -> dict[str, str]:
        """The extras this block uses: name -> the module that shows it installed."""
        return {
            extra: module
            for marker, (extra, module) in NEEDS.items()
            if re.search(rf"(?<![\w-]){re.escape(marker)}\b", self.body)
        }

    @property
    def name(self) -> str:
        words = re.findall(r"[a-z0-9]+", self.section.lower())[:4]
        jobs = [job for job in re.findall(r"briskbert ([a-z][a-z-]+)", self.body) if job in COMMANDS]
        first = jobs[0] if jobs else self.lang
        return f"line{self.line}-{'-'.join(words)}-{first}"


def readme_blocks() -> list[Block]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks, section = [], ""
    for match in re.finditer(r"^(#+ [^\n]*)$|^```(bash|python)\n(.*?)^```", text, re.M | re.S):
        if match.group(1):
            section = match.group(1).lstrip("# ")
            continue
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(match.group(2), match.group(3), line, section))
    return blocks


def shrink(block: str) -> str:
    """The block with each TINY flag value replaced (all of them, for a list) and the ADDED flags given."""
    block = block.replace("\\\n", " ")  # continued lines joined: a flag's values may span them
    for flag, value in TINY.items():
        block = re.sub(rf"{re.escape(flag)}(?:[ =]+(?!--)[^\s]+)+", f"{flag} {value}", block)
    for job, flags in ADDED.items():
        block = re.sub(rf"\bbriskbert {job}\b", f"briskbert {job} {flags}", block)
    return block


class Workspace:
    """The shared working directory and which blocks already ran there (and how)."""

    def __init__(self, folder: Path, blocks: list[Block]):
        self.folder, self.blocks = folder, blocks
        self.outcomes: dict[int, subprocess.CompletedProcess] = {}
        (folder / "data").mkdir()
        for source in (ROOT / "data").iterdir():
            (folder / "data" / source.name).symlink_to(source)
        for name, count in CUT.items():
            lines = (ROOT / "data" / name).read_text(encoding="utf-8").splitlines(keepends=True)
            (folder / "data" / name).unlink()
            (folder / "data" / name).write_text("".join(lines[:count]), encoding="utf-8")
        # Nothing may reach the internet: the Hub endpoint is a closed local port unless a block starts its own.
        self.env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "TOKENIZERS_PARALLELISM": "false"}
        # `briskbert` and `python` are this interpreter's, as in the activated environment the README assumes.
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), self.env.get("PATH", "")])
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "LOCAL_HUB_TOKEN"):
            self.env.pop(name, None)

    def run(self, block: Block) -> subprocess.CompletedProcess:
        """Run ``block`` once (the blocks it reads from first); its completed process."""
        if block.line in self.outcomes:
            return self.outcomes[block.line]
        missing = [extra for extra, module in block.needs.items() if not is_installed(module)]
        if missing:  # [dev] has every extra these blocks use but [torchao]
            pytest.skip(f"README line {block.line} needs the {', '.join(missing)} extra, not installed here")
        for folder in sorted(block.reads):  # from the last earlier block that writes it
            needed = [b for b in self.blocks if folder in b.writes and b.line < block.line and b.runs][-1]
            if self.run(needed).returncode != 0:
                pytest.skip(
                    f"needs {folder} from README line {needed.line}, which failed (its own test says why)"
                )
        command = (
            ["bash", "-euo", "pipefail", "-c", shrink(block.body)]
            if block.lang == "bash"
            else [sys.executable, "-c", block.body]
        )
        # Until it ends, the block counts as failed: a block that timed out is not run again by the next test.
        self.outcomes[block.line] = subprocess.CompletedProcess(command, 1, "", "did not finish")
        self.outcomes[block.line] = subprocess.run(
            command, cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=850
        )
        return self.outcomes[block.line]


BLOCKS = readme_blocks()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("readme"), BLOCKS)


def test_readme_has_runnable_blocks():
    runnable = [b for b in BLOCKS if b.runs]
    assert sum(b.lang == "bash" for b in runnable) >= 5 and any(b.lang == "python" for b in runnable)
    for block in runnable:
        for folder in block.reads:  # every folder a block reads is written by an earlier block
            assert any(folder in b.writes for b in runnable if b.line < block.line), (block.line, folder)


# The jobs that refuse an output folder holding an earlier run (evaluations rewrite their metrics; the ablation and
# the tokenizer trainer reuse or replace what they wrote).
REFUSE_A_USED_FOLDER = (
    "pretrain convert finetune-classification finetune-ner finetune-qa distill export-onnx finetune-embeddings "
    "finetune-reranker build-index export-family quantize"
).split()


def test_every_block_runs_again_as_written():
    """Each such command replaces its earlier run's folder: run twice, a block still exits 0."""
    for block in BLOCKS:
        for command in re.split(r"\n(?=briskbert )", shrink(block.body)):
            if re.match(rf"briskbert ({'|'.join(REFUSE_A_USED_FOLDER)}) ", command):
                assert "--overwrite_output_dir" in command, f"README line {block.line}: {command[:80]}"


def test_blocks_that_need_an_extra_say_so():
    """A block that imports or runs what an optional extra brings names the extra right above it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    for block in BLOCKS:
        lead_in = "\n".join(text[max(0, block.line - 6) : block.line - 1])
        for extra in block.needs:
            assert extra in lead_in, f"README line {block.line} needs {extra} and does not say so above it"


@pytest.mark.slow  # each block: seconds to a minute; together the README walk-through, which keeps it true
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs], ids=lambda b: b.name)
def test_readme_block_runs_as_written(block, workspace):
    proc = workspace.run(block)
    assert proc.returncode == 0, (
        f"README block at line {block.line} failed:\n{block.body}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    # With torchao installed, transformers imports it, and on a CPU-only machine it logs a "Failed to load" line per
    # CUDA kernel library: the jobs keep those out of their output, and [dev] leaves torchao out for the snippets.
    assert "Failed to load" not in proc.stderr and "_pytree.py" not in proc.stderr, proc.stderr[:2000]
    reranked = r"evaluate-retrieval .*--reranker_model_name_or_path .*--output_dir (runs/[\w.-]+)"
    for folder in re.findall(reranked, shrink(block.body)):  # re-ranking ends no worse than retrieval alone
        metrics = json.loads((workspace.folder / folder / "metrics.json").read_text(encoding="utf-8"))
        assert not ranking_shortfall(metrics["retrieval"], metrics["fused"]), metrics
