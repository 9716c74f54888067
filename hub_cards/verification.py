"""Check a published commit as a user meets it: ``verify_commit`` runs ``main`` in a clean interpreter
(``python -I``, an empty folder, a fresh ``HF_HOME``, no briskbert), which loads the commit with its Auto class,
tokenizer and a ``pipeline()`` smoke test and prints one JSON line. Only the standard library at the top."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SAMPLE_TEXT = "The cat sat on the mat."
# Environment variables a clean run must not inherit: caches, offline switches, tokens, Python paths.
_DROPPED_ENV_PREFIXES = ("PYTHON", "HF_", "HUGGINGFACE_", "TRANSFORMERS_")


def verify_commit(
    repo_id: str,
    commit_id: str,
    *,
    pipeline_tag: str,
    auto_class: str,
    endpoint: str,
    token: str | None = None,
    timeout_s: float = 600,
) -> dict:
    """The checker's JSON (``{"ok": True, ...}``), or ``{"ok": False, "error"}`` with the end of its output,
    token redacted."""
    request = dict(repo_id=repo_id, commit_id=commit_id, pipeline_tag=pipeline_tag, auto_class=auto_class)
    request["blocked"] = ["briskbert"]  # the project's packages: only the repo's own code may load the model
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_ENV_PREFIXES)}
    env.update(HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.update(TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    if token:
        env["HF_TOKEN"] = token  # environment only: never on the command line, where `ps` shows it
    with tempfile.TemporaryDirectory(prefix="briskbert-verify-") as tmp:
        env["HF_HOME"] = str(Path(tmp) / "hf-home")
        command = [sys.executable, "-I", str(Path(__file__).resolve()), json.dumps(request)]
        try:
            proc = subprocess.run(
                command, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"verification did not finish within {timeout_s:.0f} s"}
    if proc.returncode == 0:
        for line in reversed(proc.stdout.strip().splitlines()):
            try:
                return json.loads(line)
            except ValueError:
                continue
    tail = (proc.stderr or proc.stdout).strip()
    if token:
        tail = tail.replace(token, "***")
    return {"ok": False, "error": "\n".join(tail.splitlines()[-15:])}


# The program that runs in the clean interpreter.
#: the pipelines with a smoke test of their own (feature extraction stands in for any other tag)
SMOKE_TASKS = ("fill-mask", "text-classification", "token-classification", "question-answering")


def smoke_test(task: str, pipe, model, tokenizer):
    """Run ``pipe``, a ``task`` pipeline, on a sample and check its answer; returns the answer, in short."""
    if task == "fill-mask":
        out = pipe(f"The cat sat on the {tokenizer.mask_token}.", top_k=3)
        assert len(out) == 3, out
        return [o["token_str"] for o in out]
    if task == "text-classification":
        label = pipe(SAMPLE_TEXT)[0]["label"]
        assert label in set(model.config.id2label.values()), label
        return label
    if task == "token-classification":
        return len(pipe(SAMPLE_TEXT))
    if task == "question-answering":
        answer = pipe(question="Where did the cat sit?", context=SAMPLE_TEXT)["answer"]
        assert isinstance(answer, str), answer
        return answer
    width = len(pipe(SAMPLE_TEXT)[0][0])  # feature extraction: one vector per token
    assert width == model.config.hidden_size, width
    return width


def main(request_json: str) -> None:
    request = json.loads(request_json)
    for package in request["blocked"]:  # an import of it (or of anything inside it) is now an ImportError
        sys.modules[package] = None
    import transformers
    from huggingface_hub import snapshot_download
    from transformers import AutoTokenizer, pipeline

    repo, commit, task = request["repo_id"], request["commit_id"], request["pipeline_tag"]
    files = sorted(os.listdir(snapshot_download(repo, revision=commit)))
    model = getattr(transformers, request["auto_class"]).from_pretrained(
        repo, revision=commit, trust_remote_code=True
    )
    module = type(model).__module__
    assert module.startswith("transformers_modules."), f"model class came from {module}, not the repo's code"
    tokenizer = AutoTokenizer.from_pretrained(repo, revision=commit, trust_remote_code=True)
    pipeline_task = task if task in SMOKE_TASKS else "feature-extraction"
    pipe = pipeline(pipeline_task, model=repo, revision=commit, trust_remote_code=True)
    result = {
        "ok": True,
        "model_class": f"{module}.{type(model).__name__}",
        "tokenizer_class": type(tokenizer).__name__,
        "task": task,
        "pipeline_output": smoke_test(pipeline_task, pipe, model, tokenizer),
        "files": files,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
