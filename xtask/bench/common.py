"""Shared by the PyTorch bench scripts: the thread count and the result line that
`cargo xtask bench` reads (the same fields the zoo's bench programs print)."""

import json
import math
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def start(threads):
    """Sets torch's intra-op threads (and one inter-op thread) before any work."""
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)


def parse_timed(p):
    """Adds the timing options every timed script takes (`--runs`, `--threads`) to the
    script's parser, parses the command line and starts torch on those threads."""
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    start(a.threads)
    return a


def report(what, a, times, per=1, after="", **extra):
    """Prints the line for a person, `{what} on torch V (N threads): {median} ms[ per
    token] (median of R){after}`, then [`print_result`]'s line, both per `per` tokens."""
    median = 1e3 * statistics.median(times) / per
    unit = "ms per token" if per > 1 else "ms"
    print(
        f"{what} on torch {torch.__version__} ({a.threads} threads): {median:.2f} {unit} "
        f"(median of {a.runs}){after}"
    )
    print_result(times, per, **extra)


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


def char_model(preset, vocab, block):
    """The zoo's small character decoders as `transformers` models with random weights.

    - "char": `DecoderConfig::char_gpt`: width 64, 4 heads, 4 layers, exact GELU,
      dropout 0.1 (the names example and the bench's character GPT);
    - "gpt2" / "llama": the Shakespeare configuration, 4 layers, 4 heads, width 128, no
      dropout (Llama: SwiGLU of 341, 2 KV heads, RMSNorm 1e-6, untied head, no biases).
    """
    if preset == "char":
        cfg = GPT2Config(vocab_size=vocab, n_positions=block, n_embd=64, n_layer=4, n_head=4,
                         activation_function="gelu", resid_pdrop=0.1, embd_pdrop=0.1,
                         attn_pdrop=0.1)
        return GPT2LMHeadModel(cfg)
    if preset == "gpt2":
        cfg = GPT2Config(vocab_size=vocab, n_positions=block, n_embd=128, n_layer=4, n_head=4,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return GPT2LMHeadModel(cfg)
    if preset == "llama":
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=341,
                          num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=block, rms_norm_eps=1e-6,
                          tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
        return LlamaForCausalLM(cfg)
    raise ValueError(f"unknown preset {preset!r}")


def warmup_cosine(peak, low, warmup, total):
    """The zoo learner's schedule (`zoo_train::schedule::WarmupCosine`) as a function of
    the optimiser step s, counted from 1: linear warmup to `peak`, then a half cosine down
    to `low` at `total`, and `low` after it."""
    def lr(s):
        if 0 < warmup and s <= warmup:
            return peak * s / warmup
        if s >= total:
            return low
        progress = (s - warmup) / max(1, total - warmup)
        return low + 0.5 * (peak - low) * (1.0 + math.cos(math.pi * progress))

    return lr


def train_step(model, opt, lr, inputs, targets, clip=1.0):
    """One AdamW step with the zoo learner's settings: cross-entropy over the targets that
    are not -100, the gradient clipped to norm `clip`, the learning rate set first.
    Returns the loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    logits = model(input_ids=inputs).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=-100)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss.item()
