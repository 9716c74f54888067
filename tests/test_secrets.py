"""The publisher's secret scan (``hub_cards/secrets.py``): what ``briskbert publish --include '*'`` must
refuse and what it must not, then the scan's building blocks case by case (what a finding says, name rules,
the token rule, text encodings, containers, base64 runs, safetensors headers, the decoding budget).

Every secret here is built at run time (random bodies from a fixed seed), so this file itself holds none.
Refusals go through ``publish(..., dry_run=True)`` (the scan runs before anything is contacted) and once
through the command line against the local Hub, where nothing may reach the server. Containers and encodings
are made by the standard library (gzip, bz2, xz, zip, base64, UTF-16/32).
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import lzma
import random
import shutil
import string
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hub_fixtures import ROOT, TOKEN, client_env, make_briskbert

from briskbert.hub_cards.publishing import PublishError, publish
from briskbert.hub_cards.secrets import (
    CONTENT_RULES,
    NAME_RULES,
    Finding,
    Limits,
    NameRule,
    scan_bytes,
    scan_file,
    scan_files,
    token_rule,
)


def fake(prefix: str, length: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    """A random-looking token body: what a real key looks like, never a real one."""
    rng = random.Random(prefix + str(length))
    return prefix + "".join(rng.choice(alphabet) for _ in range(length))


HEX = "0123456789abcdef"
HF = fake("hf_", 34, string.ascii_letters)  # real Hugging Face tokens: hf_ and 34 letters
# A log with the token at the end: compressible, so no compressor keeps the token verbatim (xz stores
# incompressible input as is)
LOG = b"step 1 loss 0.69\n" * 100 + b"HF_TOKEN=" + HF.encode() + b"\n"


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def zipped(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("README.txt", "backup of the run folder\n")
        archive.writestr(name, data)
    return buf.getvalue()


def adc_json() -> bytes:
    """gcloud's application_default_credentials.json after `gcloud auth application-default login`."""
    return json.dumps(
        {
            "account": "",
            "client_id": fake("", 12, string.digits)
            + "-"
            + fake("c", 31).lower()
            + ".apps.googleusercontent.com",
            "client_secret": fake("d-", 22),
            "quota_project_id": "train-bert",
            "refresh_token": fake("1//0g", 97, string.ascii_letters + string.digits + "-_"),
            "type": "authorized_user",
            "universe_domain": "googleapis.com",
        },
        indent=2,
    ).encode()


def google_token_json() -> bytes:
    """The token.json Google's OAuth quickstarts write."""
    return json.dumps(
        {
            "token": fake("ya29.", 150, string.ascii_letters + string.digits + "-_"),
            "refresh_token": fake("1//0e", 97, string.ascii_letters + string.digits + "-_"),
            "token_uri": "https://oauth2.googleapis.com/token",
            "client_id": "123-abc.apps.googleusercontent.com",
            "client_secret": fake("GOCSPX-", 28),
            "scopes": ["https://www.googleapis.com/auth/drive.readonly"],
        }
    ).encode()


def putty_key() -> bytes:
    return (
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: eddsa-key-20240101\nPublic-Lines: 2\n"
        f"{fake('AAAAC3NzaC1lZDI1NTE5AAAAI', 43)}\n{fake('', 20)}\nPrivate-Lines: 1\n{fake('AAAAI', 43)}\n"
        f"Private-MAC: {fake('', 64, HEX)}\n"
    ).encode()


def docker_config() -> bytes:
    auth = base64.b64encode(b"trainer:" + fake("dckr_pat_", 27).encode()).decode()
    return json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": auth}}}).encode()


def kaggle_json() -> bytes:
    return json.dumps({"username": "someone", "key": fake("", 32, HEX)}).encode()


def wandb_settings(api_key: bool) -> bytes:
    key = f"api_key = {fake('', 40, HEX)}\n" if api_key else ""
    return f"[default]\nentity = nlp-team\nproject = sst2\n{key}".encode()


def kubeconfig() -> bytes:
    return f"""apiVersion: v1
clusters:
- cluster:
    server: https://10.0.0.1:6443
  name: train
contexts:
- context:
    cluster: train
    user: admin
  name: train
current-context: train
kind: Config
preferences: {{}}
users:
- name: admin
  user:
    token: {fake("", 64, string.ascii_letters + string.digits)}
""".encode()


# (path in the model folder, content, words the refusal must contain). Each row is something the scan let
# through before; paths with neutral names check the content rules, well-known names the name rules.
ISSUE_CASES = {
    "utf16-bom-hf-token": ("notes/run.txt", f"HF_TOKEN={HF}\n".encode("utf-16"), ["Hugging Face", "UTF-16"]),
    "utf16le-no-bom": ("notes/run.txt", f"export HF_TOKEN={HF}\n".encode("utf-16-le"), ["UTF-16-LE"]),
    "utf16be-no-bom": ("notes/run.txt", f"export HF_TOKEN={HF}\n".encode("utf-16-be"), ["UTF-16-BE"]),
    "utf32-bom": ("notes/run.txt", f"HF_TOKEN={HF}\n".encode("utf-32"), ["UTF-32"]),
    "utf32le-no-bom": ("notes/run.txt", f"HF_TOKEN={HF}\n".encode("utf-32-le"), ["UTF-32-LE"]),
    "gcloud-adc-by-name": ("gcloud/application_default_credentials.json", adc_json(), ["Google Cloud"]),
    "gcloud-adc-by-content": ("adc_backup.json", adc_json(), ["refresh token"]),
    "google-token-json-by-name": ("token.json", google_token_json(), ["Google OAuth token file"]),
    "google-token-json-by-content": ("oauth_cache.json", google_token_json(), ["refresh token"]),
    "pgpass": (".pgpass", f"db.internal:5432:train:ml:{fake('', 20)}\n".encode(), ["database password"]),
    "envrc": (".envrc", b"export DATABASE_URL=postgres://ml@db/train\n", ["environment file"]),
    "ppk-by-name": ("key.ppk", putty_key(), ["PuTTY"]),
    "ppk-by-content": ("deploy_key.txt", putty_key(), ["PuTTY"]),
    "docker-config-by-name": (".docker/config.json", docker_config(), ["Docker"]),
    "docker-config-by-content": ("registry.json", docker_config(), ["Docker"]),
    "kaggle-by-name": (".kaggle/kaggle.json", kaggle_json(), ["Kaggle"]),
    "kaggle-by-content": ("kaggle_api.json", kaggle_json(), ["Kaggle"]),
    "wandb-settings-by-name": ("wandb/settings", wandb_settings(api_key=False), ["Weights & Biases"]),
    "wandb-api-key-by-content": ("wandb.ini", wandb_settings(api_key=True), ["api_key"]),
    "kubeconfig-by-name": (".kube/config", kubeconfig(), ["kubeconfig"]),
    "kubeconfig-by-content": ("deploy/cluster.yaml", kubeconfig(), ["kubeconfig"]),
    "gzip-copy": ("backup/token.txt.gz", gz(HF.encode() + b"\n"), ["Hugging Face", "gzip"]),
    "bz2-copy": ("backup/train.log.bz2", bz2.compress(LOG), ["Hugging Face", "bz2"]),
    "xz-copy": ("backup/train.log.xz", lzma.compress(LOG), ["Hugging Face", "xz"]),
    "zip-copy": (
        "backup/run.zip",
        zipped("logs/env.txt", f"token {HF}".encode()),
        ["zip member logs/env.txt"],
    ),
    "base64-copy": ("token.b64", base64.b64encode(HF.encode() + b"\n"), ["Hugging Face", "base64"]),
    "base64-of-gzip": ("notes.md", b"blob: " + base64.b64encode(gz(HF.encode())), ["gzip", "base64"]),
    "wrapped-base64": ("notes.md", base64.encodebytes(b"run log\n" * 20 + HF.encode()), ["base64"]),
    "suffix-after-token": ("notes.md", f"prod token: {HF}_prod\n".encode(), ["Hugging Face"]),
    "prefix-before-token": ("notes.md", f"HF_TOKEN_{HF}\n".encode(), ["Hugging Face"]),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A complete tiny model folder with no clutter: anything the scan finds is what a test added."""
    return make_briskbert(tmp_path_factory.mktemp("models") / "clean", extra_files=False)


def with_file(model: Path, tmp_path: Path, rel: str, data: bytes) -> Path:
    copy = shutil.copytree(model, tmp_path / "run")
    (copy / rel).parent.mkdir(parents=True, exist_ok=True)
    (copy / rel).write_bytes(data)
    return copy


def refusal(folder: Path, token: str | None = None, **kwargs) -> str:
    with pytest.raises(PublishError) as e:
        publish(folder, "testuser/x", include=["*"], dry_run=True, token=token, log=lambda *_: None, **kwargs)
    return str(e.value)


@pytest.mark.parametrize("case", sorted(ISSUE_CASES))
def test_include_everything_refuses_what_slipped_through(model, tmp_path, case):
    rel, data, words = ISSUE_CASES[case]
    message = refusal(with_file(model, tmp_path, rel, data))
    assert message.startswith(f"refusing to publish: {rel} (") and "Nothing was published" in message
    assert "--include" in message and "Delete" in message  # the fix
    for word in words:
        assert word in message
    assert HF not in message and HF[3:] not in message  # never the secret itself


@pytest.mark.parametrize("how", ["plain", "gzip", "base64", "utf-16", "zip"])
def test_the_token_in_use_is_found_in_any_copy(model, tmp_path, how):
    """The local test token has no provider format: only the token-in-use rule can find it."""
    line = f"step 1 loss 0.7 token={TOKEN}\n".encode()
    data = {
        "plain": line,
        "gzip": gz(line),
        "base64": base64.b64encode(line),
        "utf-16": line.decode().encode("utf-16"),
        "zip": zipped("train.log", line),
    }[how]
    message = refusal(with_file(model, tmp_path, "logs/train.log.dat", data), token=TOKEN)
    assert "logs/train.log.dat (the access token in use" in message and TOKEN not in message
    assert not scan_files(tmp_path / "run", ["logs/train.log.dat"], token=None)  # no provider format


# The usual names: refused by name alone, whatever they hold.
CREDENTIAL_NAMES = [
    ".env",
    ".env.local",
    "prod.env",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "id_rsa",
    "id_ed25519",
    "keys/id_ecdsa",
    "server.pem",
    "tls.key",
    "client.p12",
    "client.pfx",
    ".aws/credentials",
    ".huggingface/token",
    ".cache/huggingface/token",
    "credentials.json",
    "my-service-account.json",
    "client_secret_1234.json",
    "kubeconfig",
]


@pytest.mark.parametrize("rel", CREDENTIAL_NAMES)
def test_well_known_credential_file_names_are_refused(model, tmp_path, rel):
    message = refusal(with_file(model, tmp_path, rel, b"placeholder\n"))
    assert message.startswith(f"refusing to publish: {rel} (") and "by its name" in message


def test_public_keys_and_look_alike_names_are_not_refused(model, tmp_path):
    copy = with_file(model, tmp_path, "id_rsa.pub", b"ssh-ed25519 AAAAC3Nz user@host\n")
    for rel in ("tokenizer_extra.json", "keys.txt", "environment.yaml", "wandb/run-1/files/config.yaml"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_text("name: x\n")
    result = publish(copy, "testuser/x", include=["*"], dry_run=True, token=TOKEN, log=lambda *_: None)
    assert {
        "id_rsa.pub",
        "tokenizer_extra.json",
        "keys.txt",
        "environment.yaml",
        "wandb/run-1/files/config.yaml",
    } <= set(result.files)


# The usual formats, under neutral names so only the content rules can find them.
def service_account() -> str:
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "p",
            "private_key": "-----BEGIN " + "PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----\\n",
        }
    )


CONTENTS = {
    "PEM private key": ("a private key", "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEow\n"),
    "service account": ("service-account", service_account()),
    "service account, key id only": ("service-account", '{"private_key_id": "' + fake("", 40, HEX) + '"}'),
    "AWS key id after an underscore": (
        "AWS access key id",
        "AWS_KEY_" + fake("AKIA", 16, string.ascii_uppercase),
    ),
    "GitHub classic": ("GitHub", "url = https://x:" + fake("ghp_", 36) + "@github.com"),
    "GitHub fine-grained": ("GitHub", fake("github_pat_", 82, string.ascii_letters + string.digits + "_")),
    "OpenAI": ("OpenAI-style", "OPENAI_API_KEY=" + fake("sk-proj-", 48)),
    "Slack": ("Slack", "SLACK=" + "xox" + "b-" + fake("", 12, string.digits) + "-" + fake("", 24)),
    "HF in JSON": ("Hugging Face", json.dumps({"hub_token": HF})),
    "HF_TOKEN assignment of a non-standard token": ("Hugging Face", f"HF_TOKEN={TOKEN}"),
    "netrc lines in a log": ("netrc", "machine api.wandb.ai\n  login user\n  password " + fake("", 40, HEX)),
}


@pytest.mark.parametrize("case", sorted(CONTENTS))
def test_credential_formats_are_found_in_ordinary_files(model, tmp_path, case):
    what, text = CONTENTS[case]
    message = refusal(with_file(model, tmp_path, "notes.md", f"Run notes.\n{text}\n".encode()))
    assert message.startswith("refusing to publish: notes.md (") and what in message


PLAIN_TEXT = {
    "identifiers": "mask-token-embedding-projection-layer-weights sk-learn-compatible-classifier-for-text-x",
    "hf_ identifiers": "hf_hub_download hf_transformersmodelconversionutilitiesv2 hf_quantizer",
    "placeholders": "HF_TOKEN=hf_your_token_here HF_TOKEN=$HF_TOKEN api_key = <your key> xoxo-hugs-and-kisses",
    "hashes": "sha256 " + fake("", 64, HEX) + " commit " + fake("", 40, HEX),
    "kind Config without users": "apiVersion: v1\nkind: Config\nclusters: []\n",
    "prose": "A machine learning model; log in with your password to the machine.",
}


@pytest.mark.parametrize("case", sorted(PLAIN_TEXT))
def test_ordinary_text_is_not_a_secret(case):
    assert scan_bytes(PLAIN_TEXT[case].encode(), "notes.md") is None
    assert scan_bytes(PLAIN_TEXT[case].encode("utf-16"), "notes.md") is None


def test_decoding_is_bounded(tmp_path):
    """Nesting depth and unpacked bytes stop the work; within the bounds the same data is found."""
    nested = gz(gz(gz(HF.encode())))
    (tmp_path / "nested.gz").write_bytes(nested)
    assert scan_files(tmp_path, ["nested.gz"])
    assert not scan_files(tmp_path, ["nested.gz"], limits=Limits(max_depth=2))
    # 16 MiB of zeros, then the token: a small file that unpacks large
    (tmp_path / "bomb.gz").write_bytes(gz(b"\0" * (16 << 20) + HF.encode()))
    assert (tmp_path / "bomb.gz").stat().st_size < 32 << 10
    assert not scan_files(tmp_path, ["bomb.gz"], limits=Limits(max_unpacked_bytes=1 << 20))
    assert scan_files(tmp_path, ["bomb.gz"])[0].where == ("in gzip data",)
    runs = (base64.b64encode(fake("", 40).encode()) + b"\n") * 10 + base64.b64encode(HF.encode())
    (tmp_path / "runs.txt").write_bytes(runs)
    assert scan_files(tmp_path, ["runs.txt"])
    assert not scan_files(tmp_path, ["runs.txt"], limits=Limits(max_base64_runs=10))


def test_archive_members_are_checked_by_name_too(tmp_path):
    (tmp_path / "home.zip").write_bytes(zipped(".aws/credentials", b"[default]\n"))
    (tmp_path / "home.zip.b64").write_bytes(base64.encodebytes(zipped("id_ed25519", b"x")))
    assert [f.describe() for f in scan_files(tmp_path, ["home.zip", "home.zip.b64"])] == [
        "home.zip (AWS credentials, as zip member .aws/credentials)",
        "home.zip.b64 (an SSH private key, in base64 text at byte 0, as zip member id_ed25519)",
    ]


def test_a_damaged_archive_member_does_not_hide_the_others(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("a.txt", b"A" * 100)
        archive.writestr("b.txt", f"token {HF}".encode())
    damaged = buf.getvalue().replace(b"A" * 100, b"B" * 100)  # a.txt no longer matches its CRC
    (tmp_path / "run.zip").write_bytes(damaged)
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(io.BytesIO(damaged)).read("a.txt")
    assert scan_files(tmp_path, ["run.zip"])[0].where == ("in zip member b.txt",)


def test_a_token_split_by_the_read_blocks_is_found(tmp_path, monkeypatch):
    from briskbert.hub_cards import secrets

    monkeypatch.setattr(secrets, "_BLOCK", 1 << 16)
    (tmp_path / "big.txt").write_bytes(b"x" * ((1 << 16) - 10) + HF.encode())
    assert scan_files(tmp_path, ["big.txt"])[0].where == (f"at byte {(1 << 16) - 10}",)


# ---- weights are not text ------------------------------------------------------------------------------
def test_weight_bytes_are_never_decoded_into_false_alarms(tmp_path):
    """Tensor bytes can be anything, including bytes that would decode (base64, UTF-16) into a token."""
    import torch
    from safetensors.torch import save_file

    encoded = torch.frombuffer(bytearray(base64.b64encode(HF.encode())), dtype=torch.uint8)
    utf16 = torch.frombuffer(bytearray(HF.encode("utf-16-le")), dtype=torch.uint8)
    plain = torch.frombuffer(
        bytearray(HF.encode()), dtype=torch.uint8
    )  # safetensors: only the header is text
    tensors = {"a": encoded, "b": utf16, "c": plain}
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    torch.save({"a": encoded, "b": utf16}, tmp_path / "pytorch_model.bin")
    (tmp_path / "same_bytes.txt").write_bytes(bytes(encoded.tolist()))
    assert scan_files(tmp_path, ["model.safetensors", "pytorch_model.bin"]) == []
    assert scan_files(tmp_path, ["same_bytes.txt"])  # the same bytes in a text file are decoded
    # a secret in the safetensors metadata (the header's strings) is found
    save_file({"a": encoded}, str(tmp_path / "meta.safetensors"), metadata={"note": f"HF_TOKEN={HF}"})
    assert scan_files(tmp_path, ["meta.safetensors"])[0].where == ("in the safetensors header",)


def test_a_pickled_checkpoint_is_searched_for_plain_strings(tmp_path):
    """Trainer's training_args.bin pickles TrainingArguments, hub_token included."""
    import torch

    torch.save({"output_dir": "out", "hub_token": TOKEN, "seed": 0}, tmp_path / "training_args.bin")
    findings = scan_files(tmp_path, ["training_args.bin"], token=TOKEN)
    assert [f.what for f in findings] == ["the access token in use"]


@pytest.fixture(scope="module")
def minilm(minilm_path, converted_minilm, tmp_path_factory):
    """The real all-MiniLM-L6-v2 converted to briskbert (the converter keeps the sentence-transformers files),
    plus the original model card and training-data list."""
    out = shutil.copytree(converted_minilm, tmp_path_factory.mktemp("minilm") / "briskbert")
    shutil.copy(minilm_path / "README.md", out / "README_original.md")
    shutil.copy(minilm_path / "data_config.json", out / "data_config.json")  # the list of training datasets
    return minilm_path, out


def test_real_model_folders_publish_with_include_everything(minilm, tmp_path):
    source, converted = minilm
    assert (
        scan_files(source, sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()))
        == []
    )
    result = publish(
        converted, "testuser/minilm", include=["*"], dry_run=True, token=TOKEN, log=lambda *_: None
    )
    assert {
        "model.safetensors",
        "vocab.txt",
        "tokenizer.json",
        "data_config.json",
        "1_Pooling/config.json",
    } <= set(result.files)
    # a tiny transformers BertModel, also with its weights pickled the old way, holds nothing either
    import torch
    from hub_fixtures import make_tiny_bert
    from safetensors.torch import load_file

    tiny = make_tiny_bert(tmp_path / "tiny")
    torch.save(load_file(tiny / "model.safetensors"), tiny / "pytorch_model.bin")
    assert scan_files(tiny, sorted(p.name for p in tiny.iterdir()), token=TOKEN) == []


# ---- the command line ----------------------------------------------------------------------------------
def test_cli_refusal_is_one_error_line_exit_2_and_nothing_reaches_the_hub(model, hub, tmp_path):
    copy = with_file(model, tmp_path, ".envrc", b"export HF_TOKEN=hf_x\n")
    (copy / "logs").mkdir()
    (copy / "logs" / "run.log.gz").write_bytes(gz(f"login with {TOKEN}\n".encode()))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "publish.py"),
            "--model_dir",
            str(copy),
            "--repo_id",
            "testuser/x",
        ]
        + ["--include", "*", "--no_verify"],
        env=client_env(hub.url, tmp_path / "home"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to publish: ")
    assert ".envrc (an environment file, by its name)" in lines[0]
    assert "logs/run.log.gz (the access token in use, in gzip data)" in lines[0]
    assert TOKEN not in proc.stdout + proc.stderr
    assert list(hub.server.request_log) == []  # refused before the first request


# ---- the building blocks ----------------------------------------------------------------------------
def test_a_finding_says_the_file_what_and_where_never_the_secret():
    assert Finding("a/b.md", "a Hugging Face token", ("in gzip data", "at byte 3")).describe() == (
        "a/b.md (a Hugging Face token, in gzip data, at byte 3)"
    )
    assert Finding(".env", "an environment file").describe() == ".env (an environment file, by its name)"


def test_default_limits():
    limits = Limits()
    assert (limits.max_depth, limits.max_base64_runs, limits.max_zip_members) == (4, 4096, 1000)
    assert (
        limits.max_unpacked_bytes == 256 * 1024 * 1024 and limits.max_safetensors_header == 100 * 1024 * 1024
    )


def test_name_rules_match_the_file_name_or_as_many_trailing_folders_case_insensitively():
    rule = NameRule("x", ("*.pem", ".aws/credentials"), unless=("public*.pem",))
    assert rule.matches("KEYS/server.PEM")
    assert rule.matches("home/.aws/credentials") and rule.matches(".AWS/Credentials")
    assert not rule.matches("credentials") and not rule.matches("aws/credentials")
    assert not rule.matches("keys/public_server.pem")  # the look-alike
    assert not rule.matches("server.pem.txt")
    what = {r.what for r in NAME_RULES if r.matches("deploy/.ssh/id_ed25519")}
    assert what == {"an SSH private key"}
    assert not any(r.matches("deploy/.ssh/id_ed25519.pub") for r in NAME_RULES)


def test_the_token_in_use_is_a_rule_only_when_long_enough():
    assert token_rule(None) == () and token_rule("") == () and token_rule("short12") == ()
    (rule,) = token_rule("abc.def+12")  # any format, matched literally
    assert rule.what == "the access token in use"
    assert rule.find(b"xx abc.def+12 yy") == 3 and rule.find(b"abcXdef+12") is None


def test_scan_bytes_finds_the_token_in_use_and_the_rules(tmp_path):
    assert scan_bytes(b"nothing here", "README.md") is None
    found = scan_bytes(f"see {HF}".encode(), "README.md")
    assert found == Finding("README.md", "a Hugging Face token", ("at byte 4",))
    found = scan_bytes(b"token: my-own-secret-value", "README.md", token="my-own-secret-value")
    assert found == Finding("README.md", "the access token in use", ("at byte 7",))


def test_scan_files_reports_in_order_and_only_files_with_findings(tmp_path):
    (tmp_path / "a.md").write_text(f"token {HF}")
    (tmp_path / "b.md").write_text("fine")
    (tmp_path / ".env").write_text("")
    (tmp_path / "c.txt").write_text("uses sec-ret-123456 here")
    findings = scan_files(tmp_path, ["c.txt", "b.md", "a.md", ".env"], token="sec-ret-123456")
    assert [f.path for f in findings] == ["c.txt", "a.md", ".env"]
    assert findings[2].what == "an environment file" and findings[2].where == ()
    assert scan_files(tmp_path, ["c.txt"]) == []  # without the token, it is ordinary text


def utf(text: str, codec: str, bom: bool) -> bytes:
    data = text.encode(codec)
    marks = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff", "utf-32-le": b"\xff\xfe\x00\x00"}
    marks["utf-32-be"] = b"\x00\x00\xfe\xff"
    return (marks[codec] if bom else b"") + data


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("bom", [True, False])
def test_utf16_and_utf32_text_is_decoded_with_or_without_a_byte_order_mark(codec, bom):
    text = "A note about the model, written on Windows.\n" * 3 + f"token={HF}\n"
    found = scan_bytes(utf(text, codec, bom), "notes.txt")
    assert found is not None and found.what == "a Hugging Face token"
    assert found.where == (f"in {codec.upper()} text",)


def test_short_or_binary_data_is_not_taken_for_utf16():
    assert scan_bytes(utf("hi", "utf-16-le", False), "x") is None
    binary = bytes(range(256)) * 4
    assert scan_bytes(binary, "x") is None


@pytest.mark.parametrize(
    "pack, label",
    [
        (gzip.compress, "in gzip data"),
        (bz2.compress, "in bz2 data"),
        (lzma.compress, "in xz data"),
    ],
)
def test_compressed_data_is_unpacked(pack, label):
    found = scan_bytes(pack(f"secret {HF}".encode()), "blob")
    assert found == Finding("blob", "a Hugging Face token", (label,))


def test_look_alike_magic_bytes_are_scanned_as_they_are():
    fake_gzip = b"\x1f\x8b not really gzip " + HF.encode()
    assert scan_bytes(fake_gzip, "x").what == "a Hugging Face token"
    assert scan_bytes(b"BZhx " + HF.encode(), "x").where == ("at byte 5",)  # BZh + a non-digit: not bz2


def test_zip_members_are_scanned_by_name_and_content_and_directories_skipped():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("folder/", "")
        archive.writestr("folder/readme.txt", "fine")
        archive.writestr("folder/notes.txt", f"token {HF}")
    found = scan_bytes(buffer.getvalue(), "bundle.zip")
    assert found == Finding("bundle.zip", "a Hugging Face token", ("in zip member folder/notes.txt",))


def test_zip_member_limit_is_respected():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.txt", "fine")
        archive.writestr("b.txt", f"token {HF}")
    assert scan_bytes(buffer.getvalue(), "z", limits=Limits(max_zip_members=1)) is None
    assert scan_bytes(buffer.getvalue(), "z", limits=Limits(max_zip_members=2)) is not None


def test_base64_runs_are_decoded_standard_url_safe_and_wrapped():
    payload = f"the token is {HF} ok".encode()
    standard = base64.b64encode(payload)
    found = scan_bytes(b"data: " + standard, "x")
    assert found == Finding("x", "a Hugging Face token", ("in base64 text at byte 6",))
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff" + payload).rstrip(b"=")
    assert b"-" in urlsafe or b"_" in urlsafe
    assert scan_bytes(b"x=" + urlsafe, "x").what == "a Hugging Face token"
    wrapped = base64.encodebytes(b"." * 50 + payload)  # 76-character lines
    assert b"\n" in wrapped.strip() and scan_bytes(wrapped, "x").what == "a Hugging Face token"


def test_base64_depth_and_run_limits():
    payload = f"token {HF}".encode()
    twice = base64.b64encode(base64.b64encode(payload))
    assert scan_bytes(twice, "x").where == ("in base64 text at byte 0", "in base64 text at byte 0")
    assert scan_bytes(twice, "x", limits=Limits(max_depth=1)) is None
    assert scan_bytes(twice, "x", limits=Limits(max_depth=2)) is not None
    assert scan_bytes(base64.b64encode(payload), "x", limits=Limits(max_base64_runs=0)) is None
    filler = base64.b64encode(b"nothing to see here at all, really")
    data = filler + b" " + base64.b64encode(payload)
    assert scan_bytes(data, "x", limits=Limits(max_base64_runs=1)) is None
    assert scan_bytes(data, "x", limits=Limits(max_base64_runs=2)) is not None


def test_unpacked_bytes_are_bounded():
    data = gzip.compress(b"." * 5000 + f"token {HF}".encode())
    assert scan_bytes(data, "x", limits=Limits(max_unpacked_bytes=4000)) is None
    assert scan_bytes(data, "x", limits=Limits(max_unpacked_bytes=6000)) is not None


def safetensors(header: dict, body: bytes = b"\x00" * 64) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def test_a_file_that_only_looks_like_safetensors_is_scanned_whole(tmp_path):
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x02" + HF.encode())
    assert scan_file(tmp_path, "short.safetensors").what == "a Hugging Face token"
    too_long = struct.pack("<Q", 10**9) + b"{" + HF.encode()
    (tmp_path / "long.safetensors").write_bytes(too_long)
    assert scan_file(tmp_path, "long.safetensors").where == ("at byte 9",)
    not_json = struct.pack("<Q", 40) + b"[" + HF.encode() + b" " * 8
    (tmp_path / "list.safetensors").write_bytes(not_json)
    assert scan_file(tmp_path, "list.safetensors").where == ("at byte 9",)


def test_weights_are_searched_raw_never_decoded(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"\x00" * 10 + HF.encode())
    assert scan_file(tmp_path, "model.bin") == Finding("model.bin", "a Hugging Face token", ("at byte 10",))
    (tmp_path / "encoded.bin").write_bytes(base64.b64encode(f"token {HF}".encode()))
    assert scan_file(tmp_path, "encoded.bin") is None
    (tmp_path / "packed.pt").write_bytes(gzip.compress(HF.encode()))
    assert scan_file(tmp_path, "packed.pt") is None


def test_content_rules_report_the_first_match_offset():
    rule = next(r for r in CONTENT_RULES if r.what == "an AWS access key id")
    assert rule.find(b"id=AKIAABCDEFGHIJKLMNOP;") == 3
    assert rule.find(b"AKIAABCDEFGHIJKLMNOPQ") is None  # too long: not a key id
    assert rule.find(b"xAKIA AKIAABCDEFGHIJKLMNOP") == 6  # the second anchor is the key


def test_a_rule_is_checked_within_96_bytes_before_its_anchor_and_512_after():
    """The window keeps large files fast; a match that reaches further than it is not one."""

    def service_account(gap: int) -> bytes:  # the match starts at "type", gap + 8 bytes before the anchor
        return b'{"private_key": "x", "type"' + b" " * gap + b':"service_account"}'

    assert scan_bytes(service_account(88), "key.txt").what == "a Google Cloud service-account key"
    assert scan_bytes(service_account(89), "key.txt") is None

    def key_id(gap: int) -> bytes:  # the match ends gap + 59 bytes after the anchor's start
        return b'"private_key_id"' + b" " * gap + b':"' + b"0123456789abcdef" * 2 + b'01234567"'

    assert scan_bytes(key_id(469), "key.txt").what == "a Google Cloud service-account key"
    assert scan_bytes(key_id(470), "key.txt") is None


def numbers(fmt: str, count: int = 2048) -> bytes:
    """Binary 32-bit integers between 256 and 65535: zero bytes where UTF-32 text of another script has them."""
    return struct.pack(f"{fmt}{count}I", *(300 + 7 * i for i in range(count)))


@pytest.mark.parametrize(
    "binary",
    [numbers("<"), numbers(">"), b"\0" * 8192],
    ids=["little-endian numbers", "big-endian numbers", "zero padding"],
)
def test_binary_data_is_not_taken_for_utf16_or_utf32_text(binary):
    """Taken for text, the base64 after it would be decoded as UTF-16/32 garbage and the token missed."""
    data = binary + b"\n" + base64.b64encode(f"token {HF}".encode())
    found = scan_bytes(data, "ids.dat")
    assert found == Finding("ids.dat", "a Hugging Face token", (f"in base64 text at byte {len(binary) + 1}",))


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("block", [1 << 17, 3 << 16])
def test_utf16_and_utf32_text_past_the_first_read_block_is_decoded(tmp_path, monkeypatch, codec, block):
    """Later blocks start where the overlap with the previous one begins: decoding starts at a whole
    character there, whatever the block size."""
    from briskbert.hub_cards import secrets

    monkeypatch.setattr(secrets, "_BLOCK", block)
    unit = 2 if codec.startswith("utf-16") else 4
    line = "A log line written on Windows, nothing to see.\n"
    lines = line * (block // (len(line) * unit) + 1)
    text = lines + f"token={HF}\n" + lines * 2
    (tmp_path / "log.txt").write_bytes(text.encode(codec))
    assert len(lines.encode(codec)) > block  # the token is in the second block only
    found = scan_files(tmp_path, ["log.txt"])
    assert found == [Finding("log.txt", "a Hugging Face token", (f"in {codec.upper()} text",))]


def test_a_base64_run_right_at_the_start_after_one_character_is_decoded():
    quoted = b'"' + base64.b64encode(f"token {HF}".encode()) + b'"'  # a JSON string value
    assert scan_bytes(quoted, "x").where == ("in base64 text at byte 1",)


def test_a_run_mixing_the_standard_and_url_safe_alphabets_is_not_base64():
    encoded = base64.b64encode(b"\xfb\xef\xbe\xfb token " + HF.encode())  # the four bytes encode as +++++y
    assert encoded.count(b"+") == 5 and b"/" not in encoded
    assert scan_bytes(encoded, "x") is not None
    assert scan_bytes(encoded.replace(b"+", b"-"), "x") is not None  # all URL-safe (- without _): decoded
    assert scan_bytes(encoded.replace(b"+", b"-", 1), "x") is None  # both alphabets: not base64


def test_a_base64_run_with_one_character_glued_to_its_end_is_decoded():
    payload = f"token {HF}".encode()
    payload += b"." * (-len(payload) % 3)  # no padding: the run's length is a multiple of 4
    run = base64.b64encode(payload) + b"x"
    assert len(run) % 4 == 1 and scan_bytes(run, "x").where == ("in base64 text at byte 0",)


def test_the_unpacked_budget_bounds_decoding_never_the_files_own_bytes():
    plain = b"." * 5000 + f"token {HF}".encode()
    assert scan_bytes(plain, "x", limits=Limits(max_unpacked_bytes=0)).where == ("at byte 5006",)
    assert scan_bytes(gzip.compress(plain), "x", limits=Limits(max_unpacked_bytes=0)) is None
    spent = base64.b64encode(b"." * 3000) + b"\n" + plain  # the base64 run uses the budget up
    assert scan_bytes(spent, "x", limits=Limits(max_unpacked_bytes=1000)).what == "a Hugging Face token"
    encoded_after_text = b"." * 5000 + b"\n" + base64.b64encode(f"token {HF}".encode())
    found = scan_bytes(encoded_after_text, "x", limits=Limits(max_unpacked_bytes=1000))
    assert found.where == ("in base64 text at byte 5001",)  # the file's own 5000 bytes are not unpacked
    assert scan_bytes(gzip.compress(plain), "x", limits=Limits(max_unpacked_bytes=-1)) is None


def test_the_unpacked_budget_is_exact_across_read_blocks():
    """A secret that ends on the budget's last byte is found even when that byte is a read of its own."""
    key = b"-----BEGIN PRIVATE KEY-----"  # without its last dash it is no key
    payload = b"\0" * ((16 << 20) + 1 - len(key)) + key  # the last byte is past the first 16 MiB read
    packed = gzip.compress(payload)
    found = scan_bytes(packed, "x", limits=Limits(max_unpacked_bytes=len(payload)))
    assert found == Finding("x", "a private key", ("in gzip data",))
    assert scan_bytes(packed, "x", limits=Limits(max_unpacked_bytes=len(payload) - 1)) is None


def test_a_header_length_past_the_end_of_the_file_is_not_safetensors(tmp_path):
    truncated = struct.pack("<Q", 100) + b"{" + HF.encode() + b"}"  # claims 100 bytes, holds 37
    (tmp_path / "cut.safetensors").write_bytes(truncated)
    assert scan_file(tmp_path, "cut.safetensors").where == ("at byte 9",)


def test_zip_members_count_against_the_unpacked_budget():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("log.txt", b"." * 5000 + f"token {HF}".encode())
    assert scan_bytes(buffer.getvalue(), "z", limits=Limits(max_unpacked_bytes=4000)) is None
    assert scan_bytes(buffer.getvalue(), "z", limits=Limits(max_unpacked_bytes=6000)) is not None


def test_a_zip_member_with_a_non_ascii_name_is_scanned():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notizen-für-später.txt", f"token {HF}")  # the name sets the UTF-8 flag bit
    assert zipfile.ZipFile(buffer).infolist()[0].flag_bits & 0x800
    assert scan_bytes(buffer.getvalue(), "z").where == ("in zip member notizen-für-später.txt",)


@pytest.mark.parametrize("name", ["model.txt", "model.tmp", "model.safetensors.part"])
def test_only_a_safetensors_file_is_read_as_one(tmp_path, name):
    """The same bytes under another name are scanned whole, tensor bytes included."""
    (tmp_path / name).write_bytes(safetensors({"__metadata__": {}}, body=b"token " + HF.encode()))
    assert scan_file(tmp_path, name).what == "a Hugging Face token"


def test_a_large_file_is_read_in_bounded_blocks(tmp_path):
    """A multi-gigabyte checkpoint is never held whole: the scan keeps three 16 MiB buffers at a time."""
    import tracemalloc

    with open(tmp_path / "pytorch_model.bin", "wb") as fh:
        fh.truncate(96 << 20)  # sparse: 96 MiB of zeros that take no disk space
    tracemalloc.start()
    try:
        assert scan_file(tmp_path, "pytorch_model.bin") is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (3 * 16 + 1) << 20, peak / (1 << 20)  # a 16 MiB block, it with the overlap, one copy


def test_a_base64_blob_longer_than_the_read_overlap_is_decoded_whole():
    """A 200 KB run (a base64-encoded archive, say) that lies within one 16 MiB read block. (A run longer
    than the 64 KiB overlap that crosses a block boundary is decoded from a misaligned start.)"""
    blob = base64.b64encode(bytes(range(256)) * 600 + f"token {HF}".encode())
    assert len(blob) > 64 << 10
    data = b"." * ((15 << 20) - 100_000) + b" " + blob
    found = scan_bytes(data, "x")
    assert found.where == (f"in base64 text at byte {(15 << 20) - 100_000 + 1}",)


def test_rules_findings_and_limits_are_immutable_values():
    """The rule tables are shared module constants: nothing may change them by accident, and they hash."""
    import dataclasses

    for value in (NAME_RULES[0], CONTENT_RULES[0], Finding("a", "b"), Limits()):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.what = "changed"
        assert hash(value) == hash(dataclasses.replace(value))
    assert len(set(NAME_RULES)) == len(NAME_RULES) and len(set(CONTENT_RULES)) > 1


@pytest.mark.parametrize(
    "prefix, body",
    [
        ("hf_", "LOGGINGVERBOSITYDEFAULTLEVELWARNING2"),
        ("npm_", "PACKAGELOCKJSONVERSION3LOCKFILEFORMAT"),
        ("sk-", "A1B2" * 9),
    ],
)
def test_a_body_in_one_case_after_a_generic_prefix_is_not_a_token(prefix, body):
    """Only the body after hf_, npm_ or sk- is checked for random-looking mixed case, never the prefix."""
    assert scan_bytes((prefix + body).encode(), "notes.md") is None
    assert scan_bytes((prefix + body.lower()).encode(), "notes.md") is None


@pytest.mark.parametrize("depth", [0, -1])
def test_a_depth_limit_of_zero_or_less_decodes_nothing(depth):
    limits = Limits(max_depth=depth)
    assert scan_bytes(f"token {HF}".encode(), "x", limits=limits).where == ("at byte 6",)
    assert scan_bytes(base64.b64encode(f"token {HF}".encode()), "x", limits=limits) is None
    assert scan_bytes(gzip.compress(f"token {HF}".encode()), "x", limits=limits) is None


def test_a_weights_file_is_searched_whole_whatever_the_unpacked_budget(tmp_path, monkeypatch):
    from briskbert.hub_cards import secrets

    (tmp_path / "model.bin").write_bytes(b"\x00" * 5000 + HF.encode())
    assert scan_file(tmp_path, "model.bin", limits=Limits(max_unpacked_bytes=0)).where == ("at byte 5000",)
    monkeypatch.setattr(secrets, "_BLOCK", 1 << 17)  # a token in the second read block
    (tmp_path / "big.bin").write_bytes(b"\x00" * (200 << 10) + HF.encode())
    assert scan_file(tmp_path, "big.bin").where == (f"at byte {200 << 10}",)


def test_the_shortest_token_in_use_is_found_in_the_shortest_utf16_text():
    """Eight characters: the shortest token the scan looks for, 16 bytes in UTF-16 without a byte-order mark."""
    (rule,) = token_rule("tok-1234")
    assert rule.find(b"a tok-1234") == 2
    found = scan_bytes("tok-1234".encode("utf-16-le"), "x", token="tok-1234")
    assert found == Finding("x", "the access token in use", ("in UTF-16-LE text",))


def test_a_base64_run_split_by_the_read_blocks_is_decoded_whole(tmp_path, monkeypatch):
    from briskbert.hub_cards import secrets

    monkeypatch.setattr(secrets, "_BLOCK", 1 << 17)
    run = base64.b64encode(
        b"." * 150 + f"token {HF}".encode()
    )  # 248 characters, the token in its second half
    start = (1 << 17) - 102  # 102 characters in the first block, the rest in the second
    (tmp_path / "notes.txt").write_bytes(b"." * (start - 1) + b" " + run)
    assert scan_files(tmp_path, ["notes.txt"])[0].where == (f"in base64 text at byte {start}",)


def test_sixteen_bit_numbers_with_a_tenth_of_zero_low_bytes_are_not_utf16():
    """Big-endian numbers below 256: zero high bytes like UTF-16-BE text, but a tenth of the low bytes are zero
    too (text has none): binary, so the base64 after them is decoded as it is."""
    encoded = b"\n" + base64.b64encode(f"token {HF}!!".encode())
    numbers = [0] * 100 + list(range(1, 256)) * 3 + list(range(1, 106))  # 970 values, 100 of them zero
    data = struct.pack(">970H", *numbers) + encoded
    assert data[:2000][1::2].count(0) == 100  # the sampled 2000 bytes: exactly a tenth of the odd bytes are 0
    assert scan_bytes(data, "ids.dat").where == ("in base64 text at byte 1941",)


def test_negative_limits_decode_nothing():
    assert (
        scan_bytes(base64.b64encode(f"token {HF}".encode()), "x", limits=Limits(max_base64_runs=-1)) is None
    )


def test_once_the_unpacked_budget_is_spent_no_further_base64_is_decoded():
    archive = base64.b64encode(zipped_credentials())
    data = base64.b64encode(b"." * 1002) + b" " + archive  # the first run unpacks to 1002 bytes
    assert scan_bytes(data, "x", limits=Limits(max_unpacked_bytes=1002)) is None
    found = scan_bytes(data, "x", limits=Limits(max_unpacked_bytes=1003))
    assert found.what == "AWS credentials" and found.where[-1] == "as zip member .aws/credentials"


def zipped_credentials() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(".aws/credentials", "[default]\n")
    return buffer.getvalue()


def test_the_text_encoding_is_decided_by_the_start_of_the_file(tmp_path, monkeypatch):
    """A later read block that starts with UTF-16 text does not turn the ASCII around it into UTF-16."""
    from briskbert.hub_cards import secrets

    monkeypatch.setattr(secrets, "_BLOCK", 1 << 17)
    utf16 = ("A note written on Windows.\n" * 200).encode("utf-16-le")
    tail = b"\n" + base64.b64encode(f"token {HF}".encode())
    (tmp_path / "mixed.txt").write_bytes(b"." * (1 << 17) + utf16 + tail)
    where = f"in base64 text at byte {(1 << 17) + len(utf16) + 1}"
    assert scan_files(tmp_path, ["mixed.txt"])[0].where == (where,)


def test_a_safetensors_file_shorter_than_its_length_field_is_scanned_whole(tmp_path):
    (tmp_path / "tiny.safetensors").write_bytes(b"{}")
    assert scan_file(tmp_path, "tiny.safetensors") is None
