"""Writes a checkpoint folder of random weights (seed 0) for the loading rows of
`cargo xtask bench precision`: GPT-2 small (`GPT2LMHeadModel(GPT2Config())`, 124M
parameters) or BERT-base (`BertModel(BertConfig())`, 109M), stored in f32, f16 or bf16
with `save_pretrained` (one `model.safetensors`).

Usage: python write_checkpoint.py --kind gpt2|bert --dtype f32|f16|bf16 --out DIR
"""

import argparse

import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--kind", choices=["gpt2", "bert"], required=True)
p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
p.add_argument("--out", required=True)
a = p.parse_args()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()) if a.kind == "gpt2" else BertModel(BertConfig())
dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
model.to(dtype).save_pretrained(a.out)
print(f"wrote {a.out}: {a.kind} in {a.dtype}")
