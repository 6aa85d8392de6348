"""PyTorch counterpart of zoo-bench's `vit` binary: HF `transformers` ViTModel
(google/vit-base-patch16-224's configuration, random weights, no pooler, eval mode, no
grad) on BATCH random 224x224 images; one warm-up, then the median of RUNS forward passes.

Usage: python vit.py [--batch 1] [--runs 5] [--threads 2]
"""

import argparse
import statistics
import time

import torch
from transformers import ViTConfig, ViTModel

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1)
p.add_argument("--runs", type=int, default=5)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
model = ViTModel(ViTConfig(), add_pooling_layer=False).eval()
pixels = torch.randn(a.batch, 3, 224, 224)
times = []
with torch.inference_mode():
    model(pixel_values=pixels)
    for _ in range(a.runs):
        t = time.perf_counter()
        model(pixel_values=pixels)
        times.append(time.perf_counter() - t)
print(
    f"vit-b/16 forward {a.batch}x3x224x224 on torch {torch.__version__} "
    f"({a.threads} threads): {1e3 * statistics.median(times):.1f} ms (median of {a.runs})"
)
