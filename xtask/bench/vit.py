"""PyTorch counterpart of zoo-bench's `vit` binary: HF `transformers` ViTModel
(google/vit-base-patch16-224's configuration, random weights, no pooler, eval mode, no
grad) on BATCH random 224x224 images; one warm-up, then the median of RUNS forward passes.

Usage: python vit.py [--batch 1] [--runs 5] [--threads 2]
"""

import argparse

import torch
from transformers import ViTConfig, ViTModel

from common import parse_timed, report, timed_runs

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1)
a = parse_timed(p)
model = ViTModel(ViTConfig(), add_pooling_layer=False).eval()
pixels = torch.randn(a.batch, 3, 224, 224)
with torch.inference_mode():
    times = timed_runs(a.runs, 1, lambda: model(pixel_values=pixels))
report(f"vit-b/16 forward {a.batch}x3x224x224", a, times)
