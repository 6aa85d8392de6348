"""PyTorch counterpart of zoo-bench's `bert` binary: HF `transformers` BertModel
(bert-base-uncased's configuration, random weights, no pooler, eval mode, no grad) on
token ids of BATCH x LEN; one warm-up, then the median of RUNS forward passes.

Usage: python bert.py [--batch 8] [--len 128] [--runs 5] [--threads 2]
"""

import argparse

import torch
from transformers import BertConfig, BertModel

from common import parse_timed, report, timed_runs

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8)
p.add_argument("--len", type=int, default=128)
a = parse_timed(p)
model = BertModel(BertConfig(), add_pooling_layer=False).eval()
ids = (torch.arange(a.batch * a.len) * 7919 % 29000 + 1000).reshape(a.batch, a.len)
with torch.inference_mode():
    times = timed_runs(a.runs, 1, lambda: model(input_ids=ids))
report(f"bert-base forward {a.batch}x{a.len}", a, times)
