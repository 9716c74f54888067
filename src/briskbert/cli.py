"""The ``briskbert`` command (also ``python -m briskbert``): one subcommand per job. A job's module is imported
only when that job runs, and parses its flags before it imports torch, so ``--help`` is instant."""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import os
import signal
import sys

from .errors import CommandFailed, SettingError, UserError
from .extras import TORCHAO_IMPORT_LOGGERS
from .processes import raise_interrupt, signal_handler

#: ``briskbert <name>`` runs ``briskbert.commands.<name, dashes as underscores>.main(argv)``; its --help line
COMMANDS: dict[str, str] = {
    "quickstart": "The whole flow on the bundled data: tokenizer, pretrain, convert, fine-tune, publish, load.",
    "train-tokenizer": "Train a WordPiece (or BPE / Unigram) tokenizer on text files.",
    "pretrain": "Pretrain an encoder with masked language modelling (+ next sentence prediction).",
    "ablate": "Pretrain several architecture variants at equal budget; a table and a plot.",
    "convert": "Import a BERT-family checkpoint (BERT, RoBERTa, DistilBERT, ELECTRA, ModernBERT) exactly.",
    "finetune-classification": "Fine-tune for sequence classification, regression or multi-label classification.",
    "finetune-ner": "Fine-tune for token classification (NER) on CoNLL-format data.",
    "finetune-qa": "Fine-tune for extractive question answering on SQuAD-format data.",
    "finetune-embeddings": "Fine-tune a sentence-embedding model (dual encoder) with in-batch negatives.",
    "finetune-reranker": "Fine-tune a cross-encoder re-ranker on (query, passage) pairs.",
    "evaluate-similarity": "Spearman and Pearson of an embedding model's cosine similarity on scored pairs.",
    "build-index": "Embed a passage file with a dual encoder into a faiss index (flat, HNSW, IVF-PQ).",
    "evaluate-retrieval": "Recall@k, MRR@10 and nDCG@10 of a dual encoder (+ re-ranker) on a passage collection.",
    "open-domain-qa": "Retrieve, re-rank and read: answer questions over a passage collection.",
    "distill": "Distil a fine-tuned classifier into a smaller student.",
    "export-onnx": "Export a model to ONNX and check it against PyTorch with ONNX Runtime.",
    "export-family": "Write a briskbert model back as its transformers family's own folder (BERT, RoBERTa, ...).",
    "quantize": "Quantize a model to int8 (ONNX Runtime or torchao) and check it against fp32 on real text.",
    "local-hub": "Serve a Hub-compatible HTTP server for offline use and tests.",
    "publish": "Push a model folder with its card to the Hub, tag it and verify it loads.",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        width = max(map(len, COMMANDS))
        print("usage: briskbert <command> [flags]   (briskbert <command> --help for its flags)\n")
        print("Build, train, fine-tune and publish BERT-family encoders that load with plain transformers.\n")
        print("commands:", *[f"  {name:<{width}}  {summary}" for name, summary in COMMANDS.items()], sep="\n")
        return 0
    if argv[0] in ("-V", "--version"):
        from . import __version__

        print(f"briskbert {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"briskbert: error: unknown command '{name}'; choose one of: {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    sys.argv[0] = f"briskbert {name}"  # argparse names the program after argv[0]
    for noisy in TORCHAO_IMPORT_LOGGERS:  # warnings about CUDA kernels no briskbert job uses
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if not sys.stderr.isatty():  # a file or a pipe gets no carriage-return bars (training logs plain lines)
        for variable in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
            os.environ.setdefault(variable, "1")
    try:
        with signal_handler(raise_interrupt, [signal.SIGTERM]):  # SIGTERM stops a job as Ctrl-C does
            module = importlib.import_module(f"briskbert.commands.{name.replace('-', '_')}")
            result = module.main(rest)
    except (UserError, CommandFailed) as error:  # an input mistake or a failed check: one line, no traceback
        # the one place a setting's field name becomes the flag a user typed
        message = f"--{error.field} {error.problem}" if isinstance(error, SettingError) else str(error)
        print("error: " + " ".join(line.strip() for line in message.splitlines()), file=sys.stderr)
        return error.exit_code
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {error.filename}" if error.filename else ""
        print(f"error: no space left on the device{where}; free some space, then run again", file=sys.stderr)
        return 2
    except KeyboardInterrupt as error:
        # Ctrl-C or SIGTERM that no job handler took (a training job's names its checkpoint to resume); a
        # further one must not turn this exit into a traceback.
        for number in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):
                signal.signal(number, signal.SIG_IGN)
        # CPython remembers an interrupt that crossed an exec() of a string (dataclasses run them while torch
        # imports) and would end the process by SIGINT whatever status is returned; any later exec() of a
        # string clears that, so the shell sees 130.
        exec("pass")
        number = getattr(error, "signal_number", signal.SIGINT)
        print(f"briskbert {name}: interrupted by {signal.Signals(number).name}.", file=sys.stderr)
        return 128 + number
    return result if isinstance(result, int) else 0
