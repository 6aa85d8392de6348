"""PyTorch counterpart of zoo-bench's `train` binary: one AdamW step (forward,
cross-entropy over every position, backward, update, loss read back) of a small
character-level decoder with random weights on the same ids of a 65-character vocabulary.

- --preset char: HF GPT2LMHeadModel of width 64, 4 heads, 4 layers, block 16, exact GELU,
  dropout 0.1, batch 64 (the zoo's `DecoderConfig::char_gpt`);
- --preset gpt2 / llama: GPT2LMHeadModel or LlamaForCausalLM of 4 layers, 4 heads, width
  128, block 64, no dropout, batch 12 (Llama: SwiGLU of 341, 2 KV heads, RMSNorm 1e-6,
  untied head, no biases), as the zoo's Shakespeare configuration.

Three warm-up steps, then the median of RUNS steps.

Usage: python train.py [--preset char|gpt2|llama] [--runs 5] [--threads 2]
"""

import argparse

import torch
import torch.nn.functional as F
from common import char_model, parse_timed, report, timed_runs

VOCAB = 65

p = argparse.ArgumentParser()
p.add_argument("--preset", choices=["char", "gpt2", "llama"], default="char")
a = parse_timed(p)
batch, block = (64, 16) if a.preset == "char" else (12, 64)
model = char_model(a.preset, VOCAB, block)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
# The zoo program's ids: (i * 7919 + 13) % 65, rows of block + 1.
ids = ((torch.arange(batch * (block + 1)) * 7919 + 13) % VOCAB).reshape(batch, block + 1)
inputs, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
last = [float("nan")]


def step():
    logits = model(input_ids=inputs).logits
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    last[0] = loss.item()


times = timed_runs(a.runs, 3, step)
params = sum(p.numel() for p in model.parameters())
what = f"{a.preset} training step ({params} parameters, batch {batch} x {block})"
report(what, a, times, after=f", last loss {last[0]:.3f}")
