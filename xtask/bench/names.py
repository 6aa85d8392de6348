"""PyTorch counterpart of the `names` example: the same character GPT trained the same way,
to compare a whole run (loss and wall time) side by side.

- Data: `datasets/names/first_names.txt`, each name as `$name$` over the 27-symbol
  vocabulary (`$`, a-z); 10% of the names held out (a seeded split of its own: Python
  cannot replay the zoo's generator, so the split is a different one of the same size).
- Model: `common.char_model("char")`, the zoo's `DecoderConfig::char_gpt` (width 64,
  4 heads, 4 layers, block 16, exact GELU, dropout 0.1).
- Training as `examples/src/lib.rs` sets up the learner: EPOCHS epochs of shuffled
  batches of 64, AdamW (0.9, 0.99), weight decay 0.01, 50 warmup steps to 3e-3 then a
  cosine down to 3e-4, gradients clipped at norm 1, the validation loss after each
  epoch (as burn-train does).
- Reported: the token-weighted validation NLL per character (end token included) and
  the wall time of training.

Usage: python names.py [--epochs 30] [--threads 2] [--seed 42]
"""

import argparse
import random
import time
from pathlib import Path

import torch

from common import char_model, start, train_step, warmup_cosine

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 16

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=30)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--seed", type=int, default=42)
p.add_argument("--datasets", type=Path, default=ROOT / "datasets")
a = p.parse_args()
if a.epochs <= 0:
    raise SystemExit(f"error: epochs must be > 0, got {a.epochs}")
start(a.threads)
torch.manual_seed(a.seed)

names = [n.strip() for n in (a.datasets / "names/first_names.txt").read_text().splitlines()
         if n.strip()]
random.Random(a.seed).shuffle(names)
n_val = round(len(names) * 0.1)
train_names, val_names = names[:-n_val], names[-n_val:]
symbols = "$abcdefghijklmnopqrstuvwxyz"
index = {c: i for i, c in enumerate(symbols)}


def encode(name):
    return [index[c] for c in f"${name}$"]


def batches(group, size, shuffle):
    """(inputs, targets) of `size` names, padded with 0 and targets of -100."""
    order = list(range(len(group)))
    if shuffle:
        random.shuffle(order)
    for i in range(0, len(order), size):
        seqs = [encode(group[j]) for j in order[i:i + size]]
        t = max(len(s) for s in seqs) - 1
        inputs = torch.zeros(len(seqs), t, dtype=torch.long)
        targets = torch.full((len(seqs), t), -100, dtype=torch.long)
        for r, s in enumerate(seqs):
            inputs[r, :len(s) - 1] = torch.tensor(s[:-1])
            targets[r, :len(s) - 1] = torch.tensor(s[1:])
        yield inputs, targets


def val_nll(model):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for inputs, targets in batches(val_names, 256, False):
            logits = model(input_ids=inputs).logits
            total += torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                ignore_index=-100, reduction="sum").item()
            count += (targets != -100).sum().item()
    model.train()
    return total / count


model = char_model("char", len(symbols), BLOCK)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99), weight_decay=0.01)
steps_per_epoch = (len(train_names) + 63) // 64
schedule = warmup_cosine(3e-3, 3e-4, 50, a.epochs * steps_per_epoch)
random.seed(a.seed)
t0 = time.perf_counter()
step = 0
for epoch in range(1, a.epochs + 1):
    losses = []
    for inputs, targets in batches(train_names, 64, True):
        step += 1
        losses.append(train_step(model, opt, schedule(step), inputs, targets))
    print(f"epoch {epoch:>3}: train_loss {sum(losses) / len(losses):.4f} "
          f"valid_loss {val_nll(model):.4f}", flush=True)
secs = time.perf_counter() - t0
print(f"trained {a.epochs} epochs in {secs:.1f} s on torch {torch.__version__} "
      f"({a.threads} threads)")
print(f"names: val_nll={val_nll(model):.4f}")
