"""Shared by the PyTorch bench scripts: the thread count and the result line that
`cargo xtask bench` reads (the same fields the zoo's bench programs print)."""

import json
import resource
import statistics
import time

import torch


def start(threads):
    """Sets torch's intra-op threads (and one inter-op thread) before any work."""
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)


def timed_runs(runs, warmup, f):
    """Wall seconds of `runs` calls of f, after `warmup` untimed calls."""
    for _ in range(warmup):
        f()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return times


def print_result(times, per=1, **extra):
    """Prints the human line's median and the `bench-result` JSON line: milliseconds per
    call (or per token, with `per` tokens in a call), sorted, and the peak RSS in MiB
    (`ru_maxrss`, the figure the zoo reads as VmHWM)."""
    runs = sorted(1e3 * t / per for t in times)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    fields = {
        "unit": "ms",
        "median": round(statistics.median(runs), 3),
        "runs": [round(r, 3) for r in runs],
        "peak_rss_mib": round(peak, 1),
    }
    fields.update({k: round(v, 3) for k, v in extra.items()})
    print("bench-result " + json.dumps(fields), flush=True)
