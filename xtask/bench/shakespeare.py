"""PyTorch counterpart of the `shakespeare` example: the same character decoder trained the
same way, to compare a whole run (loss and wall time) side by side.

- Data: `datasets/shakespeare/tiny.txt`, the last tenth of its characters held out; the
  vocabulary is the text's distinct characters, sorted (65).
- Model: `common.char_model(PRESET)`: 4 layers, 4 heads, width 128, block 64, no
  dropout; GPT-2 or Llama style as the example's `--preset`.
- Training as `examples/shakespeare/main.rs` sets up the learner: ITERS AdamW steps
  (0.9, 0.99) of 12 windows drawn at random offsets, weight decay 0.1, 100 warmup steps
  to 1e-3 then a cosine down to 1e-4, gradients clipped at norm 1; the validation loss
  on 600 fixed held-out windows every EVAL_EVERY steps; then 400 characters sampled
  with a sliding context (temperature 0.8, top-k 20). The windows come from Python's
  generator, not the zoo's: the same sampling, other draws.
- Reported: the validation loss at the end and the wall time of training.

Usage: python shakespeare.py [--preset gpt2|llama] [--iters 2000] [--eval-every 250]
                             [--threads 2] [--seed 1337]
"""

import argparse
import time
from pathlib import Path

import torch

from common import char_model, start, train_step, warmup_cosine

ROOT = Path(__file__).resolve().parents[2]
BLOCK, BATCH, VALID_WINDOWS = 64, 12, 600

p = argparse.ArgumentParser()
p.add_argument("--preset", choices=["gpt2", "llama"], default="gpt2")
p.add_argument("--iters", type=int, default=2000)
p.add_argument("--eval-every", type=int, default=250)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--seed", type=int, default=1337)
p.add_argument("--datasets", type=Path, default=ROOT / "datasets")
a = p.parse_args()
if a.iters <= 0 or a.eval_every <= 0 or a.iters % a.eval_every:
    raise SystemExit(f"error: --eval-every must be > 0 and divide --iters, got "
                     f"{a.eval_every} and {a.iters}")
start(a.threads)
torch.manual_seed(a.seed)

text = (a.datasets / "shakespeare/tiny.txt").read_text()
cut = len(text) - round(len(text) * 0.1)
chars = sorted(set(text))
index = {c: i for i, c in enumerate(chars)}
train_ids = torch.tensor([index[c] for c in text[:cut]])
val_ids = torch.tensor([index[c] for c in text[cut:]])
gen = torch.Generator().manual_seed(a.seed)


def windows(ids, n):
    """`n` windows of BLOCK + 1 ids at random offsets, as (inputs, targets)."""
    starts = torch.randint(0, len(ids) - BLOCK, (n,), generator=gen)
    rows = torch.stack([ids[s:s + BLOCK + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


val_inputs, val_targets = windows(val_ids, VALID_WINDOWS)


def valid_loss(model):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, VALID_WINDOWS, BATCH):
            logits = model(input_ids=val_inputs[i:i + BATCH]).logits
            total += torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), val_targets[i:i + BATCH].reshape(-1),
                reduction="sum").item()
    model.train()
    return total / val_targets.numel()


model = char_model(a.preset, len(chars), BLOCK)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
schedule = warmup_cosine(1e-3, 1e-4, 100, a.iters)
t0 = time.perf_counter()
losses = []
for step in range(1, a.iters + 1):
    inputs, targets = windows(train_ids, BATCH)
    losses.append(train_step(model, opt, schedule(step), inputs, targets))
    if step % a.eval_every == 0:
        print(f"step {step:>5}: train_loss {sum(losses) / len(losses):.4f} "
              f"valid_loss {valid_loss(model):.4f}", flush=True)
        losses = []
secs = time.perf_counter() - t0
model.eval()
context = val_inputs[:1, : BLOCK // 2]
out = []
with torch.no_grad():
    for _ in range(400):
        logits = model(input_ids=context[:, -BLOCK:]).logits[:, -1] / 0.8
        top = torch.topk(logits, 20)
        probs = torch.softmax(top.values, dim=-1)
        nxt = top.indices.gather(1, torch.multinomial(probs, 1, generator=gen))
        context = torch.cat([context, nxt], dim=1)
        out.append(chars[nxt.item()])
print("".join(out))
print(f"{a.preset}: trained {a.iters} steps in {secs:.1f} s on torch {torch.__version__} "
      f"({a.threads} threads), valid_loss {valid_loss(model):.4f}")
