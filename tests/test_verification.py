"""The publisher's verification step without a Hub: the checker's command and environment, how its answer is
read, the import blocker, and the pipeline smoke tests (a real commit is checked in test_publish.py)."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from briskbert.hub_cards import verification
from briskbert.hub_cards.verification import smoke_test, verify_commit

TOKEN = "hf_SecretTokenForTheTest123456"


class FakeRun:
    """Stands in for subprocess.run: records the call, answers as told."""

    def __init__(self, returncode=0, stdout="", stderr="", timeout=False):
        self.answer = subprocess.CompletedProcess([], returncode, stdout, stderr)
        self.timeout, self.calls = timeout, []

    def __call__(self, command, **kwargs):
        self.calls.append((command, kwargs, sorted(p.name for p in Path(kwargs["cwd"]).iterdir())))
        if self.timeout:
            raise subprocess.TimeoutExpired(command, kwargs["timeout"])
        return self.answer


def verify(monkeypatch, fake, **extra):
    monkeypatch.setattr(subprocess, "run", fake)
    options = dict(pipeline_tag="fill-mask", auto_class="AutoModelForMaskedLM", endpoint="http://hub.local")
    return verify_commit("user/model", "abc123", **{**options, **extra})


def test_the_checker_runs_isolated_in_an_empty_folder_with_the_token_only_in_its_environment(monkeypatch):
    for name in ("PYTHONPATH", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "KEEP_ME"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("HF_TOKEN", "hf_old")
    fake = FakeRun(stdout='{"ok": true, "task": "fill-mask"}\n')
    assert verify(monkeypatch, fake, token=TOKEN, timeout_s=42) == {"ok": True, "task": "fill-mask"}
    (command, kwargs, files_in_cwd) = fake.calls[0]
    assert command[:3] == [sys.executable, "-I", str(Path(verification.__file__).resolve())]
    assert json.loads(command[3]) == {
        "repo_id": "user/model",
        "commit_id": "abc123",
        "pipeline_tag": "fill-mask",
        "auto_class": "AutoModelForMaskedLM",
        "blocked": ["briskbert"],
    }
    assert files_in_cwd == [] and not Path(kwargs["cwd"]).exists()  # an empty folder, removed afterwards
    assert kwargs["timeout"] == 42 and kwargs["capture_output"] and kwargs["text"]
    env = kwargs["env"]  # the caller's environment, less its caches, tokens and Python paths
    assert TOKEN not in " ".join(command) and env["HF_TOKEN"] == TOKEN
    assert env["HF_HOME"] == str(Path(kwargs["cwd"]) / "hf-home") and env["HF_ENDPOINT"] == "http://hub.local"
    assert env["KEEP_ME"] == "x" and not {"PYTHONPATH", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"} & set(env)
    assert "TRANSFORMERS_CACHE" not in env and env["HF_HUB_DISABLE_TELEMETRY"] == "1"
    verify(monkeypatch, fake)
    assert "HF_TOKEN" not in fake.calls[1][1]["env"]  # no token given: not even the caller's


TAIL = "\n".join(f"line {i}" for i in range(30)) + f"\nOSError: 401 for token {TOKEN}\n"
REDACTED_TAIL = "\n".join([f"line {i}" for i in range(16, 30)] + ["OSError: 401 for token ***"])


@pytest.mark.parametrize(
    "run, answer",
    [
        (
            FakeRun(stdout='loading...\n{"ok": false}\n{"ok": true, "files": ["a"]}\nwarning\n'),
            {"ok": True, "files": ["a"]},
        ),
        (FakeRun(stdout="no json here\n"), {"ok": False, "error": "no json here"}),
        (FakeRun(returncode=-9, stdout='{"ok": true}\n', stderr="died"), {"ok": False, "error": "died"}),
        (FakeRun(returncode=1, stdout='{"ok": true}\n', stderr="failed"), {"ok": False, "error": "failed"}),
        (FakeRun(timeout=True), {"ok": False, "error": "verification did not finish within 12 s"}),
        (FakeRun(returncode=1, stderr=TAIL), {"ok": False, "error": REDACTED_TAIL}),
    ],
    ids=["last json line", "no json", "json, killed", "json, error exit", "hangs", "tail, token redacted"],
)
def test_how_the_checkers_answer_is_read(monkeypatch, run, answer):
    assert verify(monkeypatch, run, token=TOKEN, timeout_s=12.4) == answer


def test_the_checker_cannot_import_the_blocked_packages(monkeypatch):
    """Only the repo's own code may load the model: ``main`` blocks the packages the request names first."""
    import transformers

    monkeypatch.setitem(sys.modules, "transformers", transformers)  # restored afterwards
    with pytest.raises(ImportError):  # main's first import after blocking
        verification.main(json.dumps({"blocked": ["transformers"]}))
    with pytest.raises(ImportError):
        import transformers.pipelines  # noqa: F401
    import colorsys  # noqa: F401  (anything else imports)


MODEL = SimpleNamespace(config=SimpleNamespace(id2label={0: "NEGATIVE", 1: "POSITIVE"}, hidden_size=3))
TOKENIZER = SimpleNamespace(mask_token="[MASK]")
WORDS = [{"token_str": w} for w in ("mat", "rug", "bed", "sofa")]


@pytest.mark.parametrize(
    "task, answer, expected",
    [
        ("fill-mask", WORDS[:3], ["mat", "rug", "bed"]),
        ("fill-mask", WORDS[:1], AssertionError),  # fewer answers than top_k
        ("text-classification", [{"label": "POSITIVE"}], "POSITIVE"),
        ("text-classification", [{"label": "LABEL_7"}], AssertionError),  # not one of the model's labels
        ("token-classification", [{}, {}], 2),
        ("question-answering", {"answer": "on the mat"}, "on the mat"),
        ("question-answering", {"answer": None}, AssertionError),
        ("feature-extraction", [[[0.1, 0.2, 0.3]]], 3),
        ("feature-extraction", [[[0.1, 0.2]]], AssertionError),  # narrower than hidden_size
        ("feature-extraction", [[[0.1, 0.2, 0.3, 0.4]]], AssertionError),  # wider
    ],
)
def test_each_pipeline_smoke_test_checks_its_answer(task, answer, expected):
    calls = []

    def pipe(*args, **kwargs):
        calls.append((args, kwargs))
        return answer

    if expected is AssertionError:
        with pytest.raises(AssertionError):
            smoke_test(task, pipe, MODEL, TOKENIZER)
        return
    assert smoke_test(task, pipe, MODEL, TOKENIZER) == expected
    if task == "fill-mask":
        assert calls == [(("The cat sat on the [MASK].",), {"top_k": 3})]
