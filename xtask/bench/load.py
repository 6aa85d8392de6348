"""PyTorch counterpart of zoo-bench's `load` binary: `AutoModel.from_pretrained(MODEL,
dtype=...)` on a checkpoint folder, with the resident memory it adds at its peak
(`ru_maxrss` after, less `VmRSS` before) against the weights' bytes in that type.

Usage: python load.py --model DIR [--dtype f32|f16|bf16] [--threads 2]
"""

import argparse
import time

import torch
from transformers import AutoModel

from common import print_result, start

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
start(a.threads)


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
before = rss_mib()
started = time.perf_counter()
model = AutoModel.from_pretrained(a.model, dtype=dtype)
elapsed = time.perf_counter() - started
import resource  # noqa: E402

peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
weights = sum(t.numel() * t.element_size() for t in model.parameters()) / 2**20
added = peak - before
print(
    f"load {a.model} as {a.dtype} on torch {torch.__version__}: {1e3 * elapsed:.0f} ms; "
    f"weights {weights:.1f} MiB; resident memory +{added:.1f} MiB at its peak "
    f"({added / weights:.2f} x the weights; {before:.1f} MiB before)"
)
print_result(
    [elapsed],
    weights_mib=weights,
    rss_added_mib=added,
    rss_added_over_weights=added / weights,
)
