"""PyTorch counterpart of zoo-bench's `vit` binary: HF `transformers` ViTModel
(google/vit-base-patch16-224's configuration, random weights, no pooler, eval mode, no
grad) on BATCH random 224x224 images; one warm-up, then the median of RUNS forward passes.

Usage: python vit.py [--batch 1] [--runs 5] [--threads 2]
"""

import argparse
import statistics

import torch
from transformers import ViTConfig, ViTModel

from common import print_result, start, timed_runs

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1)
p.add_argument("--runs", type=int, default=5)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
start(a.threads)
model = ViTModel(ViTConfig(), add_pooling_layer=False).eval()
pixels = torch.randn(a.batch, 3, 224, 224)
with torch.inference_mode():
    times = timed_runs(a.runs, 1, lambda: model(pixel_values=pixels))
print(
    f"vit-b/16 forward {a.batch}x3x224x224 on torch {torch.__version__} "
    f"({a.threads} threads): {1e3 * statistics.median(times):.1f} ms (median of {a.runs})"
)
print_result(times)
