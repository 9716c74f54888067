"""The publisher's verification step (``hub_cards/verification.py``) without a Hub: the checker's command line
and environment as ``subprocess.run`` receives them, how its answer or failure is read, the import blocker, and
each pipeline smoke test. The checker itself runs against a real commit in ``tests/test_publish.py``.
"""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from briskbert.hub_cards import verification
from briskbert.hub_cards.verification import SMOKE_TESTS, _block_imports, verify_commit

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
    for name, value in {
        "PYTHONPATH": "/elsewhere",
        "PYTHONSTARTUP": "x.py",
        "HF_HUB_OFFLINE": "1",
        "HF_TOKEN": "hf_old",
        "HUGGINGFACE_HUB_CACHE": "/cache",
        "TRANSFORMERS_CACHE": "/cache",
        "KEEP_ME": "yes",
    }.items():
        monkeypatch.setenv(name, value)
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
    assert TOKEN not in " ".join(command) and kwargs["env"]["HF_TOKEN"] == TOKEN
    assert files_in_cwd == [] and not Path(kwargs["cwd"]).exists()  # an empty folder, removed afterwards
    assert kwargs["env"]["HF_HOME"] == str(Path(kwargs["cwd"]) / "hf-home")
    assert kwargs["timeout"] == 42 and kwargs["capture_output"] and kwargs["text"]
    env = kwargs["env"]  # the caller's environment, less its caches, tokens and Python paths
    assert env["KEEP_ME"] == "yes" and env["HF_ENDPOINT"] == "http://hub.local"
    for gone in (
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "HF_HUB_OFFLINE",
        "HUGGINGFACE_HUB_CACHE",
        "TRANSFORMERS_CACHE",
    ):
        assert gone not in env
    assert env["TRANSFORMERS_VERBOSITY"] == "error" and env["TOKENIZERS_PARALLELISM"] == "false"
    assert env["HF_HUB_DISABLE_TELEMETRY"] == env["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    verify(monkeypatch, fake)
    assert fake.calls[1][1]["timeout"] == 600  # the default
    assert "HF_TOKEN" not in fake.calls[1][1]["env"]  # no token given: not even the caller's


def test_the_last_json_line_is_the_answer(monkeypatch):
    output = 'loading...\n{"ok": true, "files": ["a"]}\nsome warning\n'
    assert verify(monkeypatch, FakeRun(stdout=output)) == {"ok": True, "files": ["a"]}
    both = '{"ok": false}\n{"ok": true}\n'
    assert verify(monkeypatch, FakeRun(stdout=both)) == {"ok": True}


def test_a_failure_reports_the_end_of_its_output_with_the_token_redacted(monkeypatch):
    stderr = "\n".join(f"line {i}" for i in range(30)) + f"\nOSError: 401 for token {TOKEN}\n"
    result = verify(monkeypatch, FakeRun(returncode=1, stderr=stderr), token=TOKEN)
    assert result["ok"] is False and TOKEN not in result["error"] and "***" in result["error"]
    assert result["error"].splitlines() == [f"line {i}" for i in range(16, 30)] + [
        "OSError: 401 for token ***"
    ]
    no_json = verify(monkeypatch, FakeRun(returncode=0, stdout="no json here\n"))
    assert no_json == {"ok": False, "error": "no json here"}
    untouched = verify(monkeypatch, FakeRun(returncode=1, stdout="", stderr="hf_x_y failed"))
    assert untouched["error"] == "hf_x_y failed"  # no token given: nothing to redact


def test_a_checker_that_hangs_is_stopped_and_named(monkeypatch):
    result = verify(monkeypatch, FakeRun(timeout=True), timeout_s=12.4)
    assert result == {"ok": False, "error": "verification did not finish within 12 s"}


def test_the_import_blocker_stops_the_project_and_nothing_else():
    before = list(sys.meta_path)
    try:
        _block_imports(["briskbert_blocked_pkg"])
        assert len(sys.meta_path) == len(before) + 1 and sys.meta_path[1:] == before  # consulted first
        blocker = sys.meta_path[0]
        with pytest.raises(ImportError, match="briskbert_blocked_pkg.sub is part of the publishing project"):
            blocker.find_spec("briskbert_blocked_pkg.sub")
        with pytest.raises(ImportError, match="briskbert_blocked_pkg is part of the publishing project"):
            __import__("briskbert_blocked_pkg")
        assert blocker.find_spec("other.briskbert_blocked_pkg") is None
        import colorsys  # noqa: F401  (anything else imports)
    finally:
        sys.meta_path[:] = before


class Pipe:
    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.answer(*args, **kwargs) if callable(self.answer) else self.answer


MODEL = SimpleNamespace(config=SimpleNamespace(id2label={0: "NEGATIVE", 1: "POSITIVE"}, hidden_size=3))
TOKENIZER = SimpleNamespace(mask_token="[MASK]")


def smoke(task, answer):
    pipe = Pipe(answer)
    return SMOKE_TESTS[task](pipe, MODEL, TOKENIZER), pipe.calls


def test_each_pipeline_tag_runs_its_smoke_test():
    words, calls = smoke("fill-mask", [{"token_str": w} for w in ("mat", "rug", "bed")])
    assert words == ["mat", "rug", "bed"] and calls == [(("The cat sat on the [MASK].",), {"top_k": 3})]
    assert smoke("text-classification", [{"label": "POSITIVE"}])[0] == "POSITIVE"
    assert smoke("token-classification", [{}, {}])[0] == 2
    answer, calls = smoke("question-answering", {"answer": "on the mat"})
    assert answer == "on the mat" and calls[0][1] == {
        "question": "Where did the cat sit?",
        "context": "The cat sat on the mat.",
    }
    assert smoke("feature-extraction", [[[0.1, 0.2, 0.3]]]) == (3, [(("The cat sat on the mat.",), {})])


@pytest.mark.parametrize(
    "task, answer",
    [
        ("fill-mask", [{"token_str": "mat"}]),  # fewer answers than top_k
        ("fill-mask", [{"token_str": w} for w in ("mat", "rug", "bed", "sofa")]),  # more
        ("text-classification", [{"label": "LABEL_7"}]),  # not one of the model's labels
        ("question-answering", {"answer": None}),
        ("feature-extraction", [[[0.1, 0.2]]]),  # narrower than hidden_size
        ("feature-extraction", [[[0.1, 0.2, 0.3, 0.4]]]),  # wider
    ],
)
def test_a_smoke_test_refuses_a_wrong_answer(task, answer):
    with pytest.raises(AssertionError):
        smoke(task, answer)


@pytest.mark.parametrize("returncode", [1, -9])  # an error exit, and a kill by signal
def test_a_json_line_before_a_failed_exit_is_not_an_answer(monkeypatch, returncode):
    fake = FakeRun(returncode=returncode, stdout='{"ok": true}\n', stderr="Traceback: died after printing")
    assert verify(monkeypatch, fake) == {"ok": False, "error": "Traceback: died after printing"}
