"""PyTorch counterpart of zoo-bench's `sdpa` binary: causal
`torch.nn.functional.scaled_dot_product_attention` on [1, 8, LEN, 64] random queries, keys
and values, under `torch.inference_mode()`; one warm-up, then the median of RUNS calls.

Usage: python sdpa.py [--len 512] [--runs 5] [--threads 2]
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

from common import print_result, start, timed_runs

p = argparse.ArgumentParser()
p.add_argument("--len", type=int, default=512)
p.add_argument("--runs", type=int, default=5)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
start(a.threads)
q, k, v = (torch.randn(1, 8, a.len, 64) for _ in range(3))
with torch.inference_mode():
    times = timed_runs(a.runs, 1, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
print(
    f"sdpa causal, 8 heads x 64, T = {a.len}, on torch {torch.__version__} "
    f"({a.threads} threads): {1e3 * statistics.median(times):.2f} ms (median of {a.runs})"
)
print_result(times)
