"""The publisher's secret scan: what it must refuse and what not, on names, contents, large files and weights.
Every secret here is built at run time from a fixed seed, so this file holds none."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest
from hub_fixtures import TOKEN

from briskbert.hub_cards.secrets import Finding, credential_file, scan_bytes, scan_file, scan_files


def fake(prefix: str, length: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    """A random-looking token body: what a real key looks like, never a real one."""
    rng = random.Random(prefix + str(length))
    return prefix + "".join(rng.choice(alphabet) for _ in range(length))


HEX = "0123456789abcdef"
HF = fake("hf_", 34, string.ascii_letters)  # real Hugging Face tokens: hf_ and 34 letters


# The usual names: refused by name alone, whatever they hold.
CREDENTIAL_NAMES = {
    ".envrc": "environment file",
    "prod.env": "environment file",
    ".netrc": "netrc",
    ".pypirc": "package-registry",
    ".pgpass": "database password",
    ".git-credentials": "git credentials",
    "keys/id_ecdsa": "SSH private key",
    "client.p12": "private key",
    ".aws/credentials": "AWS",
    ".cache/huggingface/token": "Hugging Face token file",
    "my-service-account.json": "cloud credentials",
    "gcloud/application_default_credentials.json": "cloud credentials",
    ".docker/config.json": "Docker",
    ".kaggle/kaggle.json": "Kaggle",
    "wandb/settings": "Weights & Biases",
    "kubeconfig": "kubeconfig",
}


def test_well_known_credential_file_names_are_refused_by_name_alone():
    for rel, what in CREDENTIAL_NAMES.items():  # the files need not exist: the name is enough
        (finding,) = scan_files(Path("/nonexistent"), [rel])
        assert finding.describe().startswith(f"{rel} (") and what in finding.what and finding.where == "", rel


def test_public_keys_and_look_alike_names_are_not_refused(tmp_path):
    look_alikes = ["id_rsa.pub", ".ssh/known_hosts", "tokenizer_extra.json", "keys.txt", "environment.yaml"]
    look_alikes += ["wandb/run-1/files/config.yaml", "credentials", "aws/credentials", "server.pem.txt"]
    for rel in look_alikes:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("name: x\n")
    assert scan_files(tmp_path, look_alikes, token=TOKEN) == []
    assert credential_file("home/.AWS/Credentials") == "AWS credentials"  # any case, any depth
    assert credential_file("deploy/.ssh/id_ed25519.pub") is None


# The usual formats, under a neutral name so only the content rules can find them.
CONTENTS = {
    "PEM private key": ("a private key", "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEow\n"),
    "OpenSSH private key": ("a private key", "-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3Blbn\n"),
    "PuTTY key": ("PuTTY", "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n"),
    "service account, key id": ("service-account", '{"private_key_id": "' + fake("", 40, HEX) + '"}'),
    "AWS key id, second anchor": (
        "AWS access key id",
        "xAKIA AWS_KEY_" + fake("AKIA", 16, string.ascii_uppercase),
    ),
    "AWS secret": ("AWS secret", "aws_secret_access_key = " + fake("", 40, string.ascii_letters + "/+")),
    "Google API key": ("Google API key", "key=" + fake("AIza", 35)),
    "Google OAuth token": ("Google OAuth", '{"token": "' + fake("ya29.", 120) + '"}'),
    "GitHub classic": ("GitHub", "url = https://x:" + fake("ghp_", 36) + "@github.com"),
    "GitHub fine-grained": ("GitHub", fake("github_pat_", 82, string.ascii_letters + string.digits + "_")),
    "GitLab": ("GitLab", fake("glpat-", 20)),
    "OpenAI": ("OpenAI-style", "OPENAI_API_KEY=" + fake("sk-proj-", 48)),
    "Anthropic": ("OpenAI-style", fake("sk-ant-api03-", 93, string.ascii_letters + string.digits + "_-")),
    "Slack": ("Slack token", "SLACK=" + "xox" + "b-" + fake("", 12, string.digits) + "-" + fake("", 24)),
    "Slack webhook": ("Slack webhook", f"https://hooks.slack.com/services/{fake('T', 8)}/{fake('B', 8)}/x1"),
    "Stripe": ("Stripe", fake("sk_live_", 24)),
    "npm": ("npm", fake("npm_", 36)),
    "PyPI": ("PyPI", fake("pypi-AgEIcHlwaS5vcmc", 60)),
    "HF in JSON": ("Hugging Face", json.dumps({"hub_token": HF})),
    "HF token after a prefix": ("Hugging Face", f"HF_TOKEN_{HF}_prod"),
}


@pytest.mark.parametrize("case", sorted(CONTENTS))
def test_credential_formats_are_found(case):
    what, text = CONTENTS[case]
    finding = scan_bytes(f"Run notes.\n{text}\n".encode(), "notes.md")
    assert finding is not None and what in finding.what
    assert text.split()[-1] not in finding.describe()  # never the secret itself


PLAIN_TEXT = {
    "identifiers": "mask-token-embedding-projection-layer-weights sk-learn-compatible-classifier-for-text-x",
    "hf_ identifiers": "hf_hub_download hf_transformersmodelconversionutilitiesv2 hf_quantizer",
    "one-case bodies": "hf_LOGGINGVERBOSITYDEFAULTLEVELWARNING2 npm_packagelockjsonversion3lockfileformat1",
    "placeholders": "HF_TOKEN=hf_your_token_here HF_TOKEN=$HF_TOKEN api_key = <your key> xoxo-hugs-and-kisses",
    "hashes": "sha256 " + fake("", 64, HEX) + " commit " + fake("", 40, HEX),
    "too long for an AWS key id": "AKIAABCDEFGHIJKLMNOPQ",
    "prose": "A machine learning model; log in with your password to the machine.",
}


def test_ordinary_text_is_not_a_secret():
    for case, text in PLAIN_TEXT.items():
        assert scan_bytes(text.encode(), "notes.md") is None, case


def test_the_token_in_use_is_found_whatever_its_format():
    """The local test token has no provider format: only the token-in-use rule can find it."""
    text = f"step 1 loss 0.7 token={TOKEN}\n".encode()
    found = Finding("train.log", "the access token in use", "at byte 22")
    assert scan_bytes(text, "train.log", token=TOKEN) == found
    assert scan_bytes(text, "train.log") is None  # no provider format
    assert scan_bytes(b"x short12", "x", token="short12") is None  # too short: it would match by chance


def test_a_large_file_is_searched_without_being_read_into_memory(tmp_path):
    """A multi-gigabyte checkpoint is memory-mapped, never held whole; a token at its end is found."""
    import tracemalloc

    with open(tmp_path / "pytorch_model.bin", "wb") as fh:
        fh.truncate(96 << 20)  # sparse: 96 MiB of zeros that take no disk space
        fh.seek(0, 2)
        fh.write(b"token " + HF.encode())
    (tmp_path / "empty.txt").write_bytes(b"")
    tracemalloc.start()
    try:
        found = scan_file(tmp_path, "pytorch_model.bin")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == Finding("pytorch_model.bin", "a Hugging Face token", f"at byte {(96 << 20) + 6}")
    assert peak < 1 << 20, peak / (1 << 20)
    assert scan_file(tmp_path, "empty.txt") is None


# ---- weights ---------------------------------------------------------------------------------------------
def test_safetensors_are_searched_in_their_metadata_and_names_never_their_tensor_bytes(tmp_path):
    import torch
    from safetensors.torch import save_file

    plain = torch.frombuffer(bytearray(HF.encode()), dtype=torch.uint8)
    save_file({"a": plain}, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    assert scan_files(tmp_path, ["model.safetensors"]) == []
    save_file({"a": plain}, str(tmp_path / "meta.safetensors"), metadata={"note": f"HF_TOKEN={HF}"})
    assert scan_files(tmp_path, ["meta.safetensors"]) == [
        Finding("meta.safetensors", "a Hugging Face token", "in the safetensors metadata")
    ]
    (tmp_path / "weights.bin").write_bytes((tmp_path / "model.safetensors").read_bytes())
    assert scan_file(tmp_path, "weights.bin").what == "a Hugging Face token"  # another name: scanned whole
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x02" + HF.encode())  # not one: scanned whole
    assert scan_file(tmp_path, "short.safetensors").where == "at byte 2"


def test_real_model_folders_hold_no_false_alarm(minilm_path, tmp_path):
    """The real all-MiniLM-L6-v2 folder and a tiny BertModel with pickled weights raise no alarm."""
    import torch
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    files = sorted(p.relative_to(minilm_path).as_posix() for p in minilm_path.rglob("*") if p.is_file())
    assert {"model.safetensors", "vocab.txt", "README.md", "1_Pooling/config.json"} <= set(files)
    assert scan_files(minilm_path, files, token=TOKEN) == []
    tiny = tmp_path / "tiny"
    sizes = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertModel(BertConfig(vocab_size=64, **sizes)).save_pretrained(tiny)
    torch.save(load_file(tiny / "model.safetensors"), tiny / "pytorch_model.bin")
    assert scan_files(tiny, sorted(p.name for p in tiny.iterdir()), token=TOKEN) == []


def test_files_are_reported_in_order_with_the_first_match_in_each(tmp_path):
    (tmp_path / "a.md").write_text(f"token {HF} and {fake('ghp_', 36)}")
    (tmp_path / "b.md").write_text("fine")
    (tmp_path / ".env").write_text("")
    (tmp_path / "c.txt").write_text("uses sec-ret-123456 here")
    findings = scan_files(tmp_path, ["c.txt", "b.md", "a.md", ".env"], token="sec-ret-123456")
    assert [f.describe() for f in findings] == [
        "c.txt (the access token in use, at byte 5)",
        "a.md (a Hugging Face token, at byte 6)",
        ".env (an environment file, by its name)",
    ]
