"""PyTorch counterpart of zoo-bench's `sdpa` binary: causal
`torch.nn.functional.scaled_dot_product_attention` on [1, 8, LEN, 64] random queries, keys
and values, under `torch.inference_mode()`; one warm-up, then the median of RUNS calls.

Usage: python sdpa.py [--len 512] [--runs 5] [--threads 2]
"""

import argparse

import torch
import torch.nn.functional as F

from common import parse_timed, report, timed_runs

p = argparse.ArgumentParser()
p.add_argument("--len", type=int, default=512)
a = parse_timed(p)
q, k, v = (torch.randn(1, 8, a.len, 64) for _ in range(3))
with torch.inference_mode():
    times = timed_runs(a.runs, 1, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
report(f"sdpa causal, 8 heads x 64, T = {a.len},", a, times)
