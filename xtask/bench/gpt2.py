"""PyTorch counterpart of zoo-bench's `gpt2` binary: HF `transformers` GPT2LMHeadModel
(gpt2's configuration, random weights, eval mode, no grad, SDPA attention).

- --mode forward: logits of every position of BATCH x LEN ids, ms per forward pass;
- --mode generate: greedy `generate` with the KV cache, NEW tokens after a PROMPT-token
  prompt, ms per new token (the prompt's pass included).

One warm-up, then RUNS timed calls.

Usage: python gpt2.py [--mode forward|generate] [--batch 1] [--len 128] [--prompt 16] [--new 64] [--runs 5] [--threads 2]
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from common import parse_timed, report, timed_runs

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["forward", "generate"], default="forward")
p.add_argument("--batch", type=int, default=1)
p.add_argument("--len", type=int, default=128)
p.add_argument("--prompt", type=int, default=16)
p.add_argument("--new", type=int, default=64)
a = parse_timed(p)
model = GPT2LMHeadModel(GPT2Config()).eval()


def ids(n):
    """The zoo program's ids: (i * 7919) % 50000 + 100."""
    return torch.arange(n) * 7919 % 50000 + 100


with torch.inference_mode():
    if a.mode == "forward":
        x = ids(a.batch * a.len).reshape(a.batch, a.len)
        times = timed_runs(a.runs, 1, lambda: model(input_ids=x))
        report(f"gpt2-small forward {a.batch}x{a.len}", a, times)
    else:
        x = ids(a.prompt).reshape(1, a.prompt)
        attention = torch.ones_like(x)

        def run():
            out = model.generate(
                input_ids=x,
                attention_mask=attention,
                do_sample=False,
                max_new_tokens=a.new,
                min_new_tokens=a.new,
                pad_token_id=0,
            )
            assert out.shape[1] == a.prompt + a.new, out.shape

        times = timed_runs(a.runs, 1, run)
        report(f"gpt2-small greedy generation, prompt {a.prompt} + {a.new} new,", a, times, per=a.new)
