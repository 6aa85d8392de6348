"""The quality section of `docs/precision.md`: what half precision and quantized weights
change in the zoo's outputs, through the `zoo` binary as a user runs it, each precision
in its own process (a device's float type is set once), on flex.

- all-MiniLM-L6-v2 (the real checkpoint): `zoo embed` of the seven test sentences; the
  least cosine, over the sentences, to the zoo's f32 embeddings and to
  sentence-transformers' (the fixture's expected embeddings);
- the GPT-2 fixture (`gpt2-tiny`, random weights): `zoo forward` over its 2 x 10 ids;
  how many of the 20 next-token choices (the argmax of each position's logits) equal
  f32's, and the largest logit difference over the largest f32 logit.

Usage: python quality.py --zoo PATH --minilm DIR --root REPO [--threads 2]
Prints a markdown section on stdout.
"""

import argparse
import json
import os
import subprocess
import tempfile

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--zoo", required=True)
p.add_argument("--minilm", required=True)
p.add_argument("--root", required=True)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()

VARIANTS = [
    ("f32", []),
    ("f16", ["--dtype", "f16"]),
    ("bf16", ["--dtype", "bf16"]),
    ("q8", ["--quantize", "q8"]),
    ("q4", ["--quantize", "q4"]),
]


def run(args):
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads))
    done = subprocess.run([a.zoo, *args, "--device", "flex"], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"zoo {' '.join(args)}: {done.stderr.strip()}")


def flat(v):
    return np.asarray(v, dtype=np.float64)


def least_cosine(x, y):
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    y = y / np.linalg.norm(y, axis=1, keepdims=True)
    return float((x * y).sum(axis=1).min())


tmp = tempfile.mkdtemp(prefix="zoo-quality-")
minilm = json.load(open(os.path.join(a.root, "crates/zoo-encoder/tests/fixtures/minilm/expected.json")))
reference = flat(minilm["embeddings"])
sentences = os.path.join(tmp, "sentences.json")
json.dump({"sentences": minilm["sentences"]}, open(sentences, "w"))
gpt2 = os.path.join(a.root, "crates/zoo-decoder/tests/fixtures/gpt2-tiny")
ids = os.path.join(tmp, "ids.json")
json.dump({"input_ids": json.load(open(os.path.join(gpt2, "expected.json")))["input_ids"]}, open(ids, "w"))

embeddings, logits = {}, {}
for name, extra in VARIANTS:
    out = os.path.join(tmp, f"embed-{name}.json")
    run(["embed", "--model", a.minilm, "--input", sentences, "--output", out, *extra])
    embeddings[name] = flat(json.load(open(out))["embeddings"])
    out = os.path.join(tmp, f"forward-{name}.json")
    # The fixture's widths (24, 40, 72) take blocks of 8, not the default 32.
    block = ["--quant-block", "8"] if "--quantize" in extra else []
    run(["forward", "--model", gpt2, "--input", ids, "--output", out, *extra, *block])
    logits[name] = flat(json.load(open(out))["logits"])

names = [n for n, _ in VARIANTS]
f32_choice = logits["f32"].argmax(axis=-1)
scale = np.abs(logits["f32"]).max()
rows = [
    ("all-MiniLM-L6-v2, least cosine to the zoo's f32 embeddings",
     [least_cosine(embeddings[n], embeddings["f32"]) for n in names], "{:.6f}"),
    ("all-MiniLM-L6-v2, least cosine to sentence-transformers' f32",
     [least_cosine(embeddings[n], reference) for n in names], "{:.6f}"),
    ("GPT-2 fixture, next-token choices equal to f32's (of 20)",
     [int((logits[n].argmax(axis=-1) == f32_choice).sum()) for n in names], "{}"),
    ("GPT-2 fixture, largest logit difference over the largest f32 logit",
     [float(np.abs(logits[n] - logits["f32"]).max() / scale) for n in names], "{:.4f}"),
]
print("\n## Quality\n")
print(
    "What each precision changes in the outputs, through the `zoo` binary on flex, each "
    "precision in its own process (`xtask/bench/quality.py`): `zoo embed` of the seven "
    "test sentences with the real all-MiniLM-L6-v2, and `zoo forward` over the GPT-2 "
    "fixture's 2 × 10 ids (random weights: a stress test of the rounding, not of a "
    "trained model's margins). q8 and q4 quantize MiniLM's layers in blocks of 32 and "
    "the GPT-2 fixture's in blocks of 8 (its widths are 24, 40 and 72).\n"
)
print("| output | " + " | ".join(names) + " |")
print("|---" * (len(names) + 1) + "|")
for title, values, fmt in rows:
    print(f"| {title} | " + " | ".join(fmt.format(v) for v in values) + " |")
