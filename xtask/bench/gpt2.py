"""PyTorch counterpart of zoo-bench's `gpt2` binary: HF `transformers` GPT2LMHeadModel
(gpt2's configuration, random weights, eval mode, no grad, SDPA attention), or with
`--model llama-100m` LlamaForCausalLM at the zoo program's 100M-parameter configuration.

- --mode forward: logits of every position of BATCH x LEN ids, ms per forward pass;
- --mode generate: greedy `generate` with the KV cache, NEW tokens after a PROMPT-token
  prompt, ms per new token (the prompt's pass included).

One warm-up, then RUNS timed calls.

Usage: python gpt2.py [--model gpt2|llama-100m] [--mode forward|generate] [--batch 1] [--len 128] [--prompt 16] [--new 64] [--runs 5] [--threads 2]
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from common import parse_timed, report, timed_runs

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["gpt2", "llama-100m"], default="gpt2")
p.add_argument("--mode", choices=["forward", "generate"], default="forward")
p.add_argument("--batch", type=int, default=1)
p.add_argument("--len", type=int, default=128)
p.add_argument("--prompt", type=int, default=16)
p.add_argument("--new", type=int, default=64)
a = parse_timed(p)
if a.model == "gpt2":
    name, span = "gpt2-small", 50000
    model = GPT2LMHeadModel(GPT2Config()).eval()
else:
    name, span = "llama-100m", 31000
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).eval()


def ids(n):
    """The zoo program's ids: (i * 7919) % span + 100."""
    return torch.arange(n) * 7919 % span + 100


with torch.inference_mode():
    if a.mode == "forward":
        x = ids(a.batch * a.len).reshape(a.batch, a.len)
        times = timed_runs(a.runs, 1, lambda: model(input_ids=x))
        report(f"{name} forward {a.batch}x{a.len}", a, times)
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
        report(f"{name} greedy generation, prompt {a.prompt} + {a.new} new,", a, times, per=a.new)
