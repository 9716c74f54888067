"""Models in the tools people use: the QA pipeline travels with a push, old transformers is refused, LoRA."""

import json
import textwrap

import pytest
import torch
from fresh_process import ROOT, run_without_project
from hub_fixtures import TOKEN, USER, client_env, run_client

from briskbert.modeling import BriskBertForQuestionAnswering, BriskBertForSequenceClassification
from briskbert.modeling.configuration_briskbert import MINIMUM_TRANSFORMERS
from briskbert.modeling.pipeline_question_answering import (
    BriskBertQuestionAnsweringPipeline,
    register_question_answering_pipeline,
)

QUESTION = "Where does the European lobster live?"
CONTEXT = (
    "Homarus gammarus, known as the European lobster, is a species of clawed lobster from the eastern "
    "Atlantic Ocean, Mediterranean Sea and parts of the Black Sea."
)
ASK = f"""
    import json
    from transformers import pipeline
    answerer = pipeline("question-answering", model=MODEL, trust_remote_code=True)
    print(json.dumps(answerer(question={QUESTION!r}, context={CONTEXT!r})))
"""


# ------------------------------------------------------------------------------------------------- QA
@pytest.mark.slow
def test_qa_pipeline_travels_with_push_to_hub(tokenizer, tiny_model, hub, tmp_path):
    """push_to_hub, then the pipeline by repo id without briskbert (slow: two interpreters and uploads)."""
    qa_model = tiny_model(BriskBertForQuestionAnswering).eval()
    with torch.no_grad():  # an untrained but decisive head, so the best span is well defined
        qa_model.qa_outputs.weight.normal_(0, 1.0)
    register_question_answering_pipeline(qa_model.config)
    folder = tmp_path / "qa"
    qa_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert (folder / "pipeline_question_answering.py").is_file()
    config = json.loads((folder / "config.json").read_text())
    assert config["custom_pipelines"]["question-answering"]["impl"] == (
        "pipeline_question_answering.BriskBertQuestionAnsweringPipeline"
    )
    repo_id = f"{USER}/tiny-qa"
    env = client_env(hub.url, tmp_path / "home")
    run_client(
        f"""
        from briskbert.modeling import BriskBertForQuestionAnswering
        from briskbert.tokenization import BriskBertTokenizer
        BriskBertForQuestionAnswering.from_pretrained({str(folder)!r}).push_to_hub({repo_id!r})
        BriskBertTokenizer.from_pretrained({str(folder)!r}).push_to_hub({repo_id!r})
        """,
        env,
        tmp_path,
    )
    user_env = {**env, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "user-home")}
    user_env["HF_MODULES_CACHE"] = str(tmp_path / "user-home" / "modules")
    out = run_without_project(f"MODEL = {repo_id!r}\n" + textwrap.dedent(ASK), tmp_path, env=user_env)
    got = json.loads(out.strip().splitlines()[-1])
    answerer = BriskBertQuestionAnsweringPipeline(model=qa_model, tokenizer=tokenizer)
    expected = answerer(question=QUESTION, context=CONTEXT)
    assert got["answer"] and got == {**expected, "score": pytest.approx(expected["score"], rel=1e-4)}
    assert TOKEN not in out


# ------------------------------------------------------------------------------------------ transformers 4
def test_old_transformers_is_refused_in_one_sentence_naming_the_minimum(tmp_path):
    """Importing a folder's remote code on transformers 4.57: one sentence naming the minimum, no deep ImportError."""
    code = f"""
        import transformers
        transformers.__version__ = "4.57.1"  # what an old install reports; checked before any 5.x-only import
        sys.path.insert(0, {str(ROOT / "modeling")!r})
        try:
            import configuration_briskbert
        except ImportError as error:
            print("ImportError:", error)
    """
    message = run_without_project(code, tmp_path).strip()
    assert message.startswith("ImportError: ") and "\n" not in message, message
    assert f"transformers>={MINIMUM_TRANSFORMERS}" in message and "4.57.1" in message


# ------------------------------------------------------------------------------------------------- PEFT
def test_lora_on_the_documented_module_names_trains_and_saves(tokenizer, tmp_path, tiny_model):
    """LoRA on qkv, out, up and down: one adapter per projection, only adapters train, a saved one reloads."""
    peft = pytest.importorskip("peft")
    model = tiny_model(BriskBertForSequenceClassification, num_labels=2)
    names = ["qkv", "out", "up", "down"]
    model = peft.get_peft_model(model, peft.LoraConfig(task_type="SEQ_CLS", r=4, target_modules=names))
    adapted = [name.split(".lora_A")[0] for name, _ in model.named_parameters() if "lora_A" in name]
    layers = model.config.num_hidden_layers
    assert sorted(name.rsplit(".", 1)[-1] for name in adapted) == sorted(names * layers)
    trainable = {name for name, param in model.named_parameters() if param.requires_grad}
    assert all("lora_" in name or "classifier" in name for name in trainable)

    batch = tokenizer(["a gorgeous, witty movie.", "a dull mess."], padding=True, return_tensors="pt")
    with torch.no_grad():  # trained adapters: B is no longer zero, so the adapters change the outputs
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()

    model.eval()
    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    with torch.no_grad():
        expected = model(**batch).logits
    base = tiny_model(BriskBertForSequenceClassification, num_labels=2)
    reloaded = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, expected)
