"""Training throughput of shardflow.train against a minimal plain-PyTorch loop, same process.

Both train the same GPT (nanoGPT's CPU Shakespeare config: block 64, batch 12,
4 layers, 4 heads, 128 dims) on the same character-level data, in interleaved
rounds, each in the reverse order of the last (medians reported, so a noisy neighbour
hits both alike):

- shardflow   `train()`: windows read from memory-mapped shards, lr schedule, loss
              bookkeeping; its own tokens/s (training steps only: the single eval
              and checkpoint at the end are excluded, as is the first, warm-up step)
- plain       model + AdamW + grad clipping over random windows of an in-memory
              tensor; no data loader, logging or checkpoints; timed after one warm-up step

Data: ../shared/data/tinyshakespeare/input.txt when present (first 90% train, last
10% val, one id per distinct character), else synthetic tokens.

    python benchmarks/bench_train.py                       # 5 rounds of 200 iterations
    python benchmarks/bench_train.py --reproduce           # + the 2,000-iteration CPU run

`--reproduce` trains nanoGPT's CPU configuration to the end (dropout 0, lr 1e-3 ->
1e-4, warmup 100, beta2 0.99) and reports the best validation loss over the whole
val split (nanoGPT reports about 1.88 from random val batches).
The throughput ratio line is `shardflow/plain tokens/s ratio: <x>`.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from shardflow.train.model import GPT
from shardflow.train.shards import write_shard
from shardflow.train.trainer import TrainParams, make_optimizer, resolve_runtime, train

SHAKESPEARE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
CPU_CONFIG = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, dropout=0.0,
                  lr=1e-3, min_lr=1e-4, warmup_iters=100, beta2=0.99, device="cpu", dtype="float32")


def char_tokens() -> tuple[np.ndarray, int, str]:
    if SHAKESPEARE.exists():
        text = SHAKESPEARE.read_text(encoding="utf-8")
        chars = sorted(set(text))
        lookup = {c: i for i, c in enumerate(chars)}
        return np.array([lookup[c] for c in text], dtype=np.uint16), len(chars), "tinyshakespeare (char)"
    rng = np.random.default_rng(0)
    return rng.integers(0, 65, 1_115_394).astype(np.uint16), 65, "synthetic"


def write_char_shards(folder: Path, tokens: np.ndarray, vocab: int) -> Path:
    n = int(len(tokens) * 0.9)  # nanoGPT's split: first 90% train, last 10% val
    entries = []
    for name, split, part in (("train_000.bin", "train", tokens[:n]), ("val_000.bin", "val", tokens[n:])):
        write_shard(folder / name, part, "uint16")
        entries.append({"file": name, "split": split, "tokens": len(part), "documents": 1, "sha256": None})
    (folder / "metadata.json").write_text(json.dumps({"shards": entries, "vocab_size": vocab, "eot_id": None,
                                                      "dtype": "uint16"}))
    return folder


def plain_loop(data: torch.Tensor, vocab: int, p: TrainParams, iters: int) -> float:
    """tokens/s of the simplest loop that trains the same model on the same batch shape."""
    torch.manual_seed(p.seed)
    model = GPT(p.model_config(vocab))
    optimizer = make_optimizer(model, p, resolve_runtime(p))
    gen = torch.Generator().manual_seed(p.seed)
    T, B = p.block_size, p.batch_size

    def step():
        ix = torch.randint(len(data) - T - 1, (B,), generator=gen)
        rows = torch.stack([data[i : i + T + 1] for i in ix.tolist()]).long()
        _, loss = model(rows[:, :-1], rows[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), p.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    step()  # warm-up, not timed (as the trainer's first step)
    t0 = time.perf_counter()
    for _ in range(iters - 1):
        loss = step()
    loss.item()
    return (iters - 1) * B * T / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=200, help="iterations per method per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--reproduce", action="store_true", help="also run the 2,000-iteration CPU reproduction")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    quiet = logging.getLogger("bench_train.quiet")

    tokens, vocab, source = char_tokens()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shards = write_char_shards(tmp / "shards", tokens, vocab)
        train_part = torch.from_numpy(tokens[: int(len(tokens) * 0.9)].astype(np.int64))
        p = TrainParams(**CPU_CONFIG, max_iters=args.iters, eval_interval=args.iters, eval_windows=20,
                        checkpoint_interval=args.iters)
        print(f"data: {source}, vocab {vocab}; model {p.n_layer}x{p.n_embd}, block {p.block_size}, "
              f"batch {p.batch_size}; {torch.get_num_threads()} threads; {args.iters} iterations x {args.rounds} rounds")
        ours, plain = [], []
        for r in range(args.rounds):
            # Each round reverses the last one's order: drift on a shared machine then falls
            # on both methods alike instead of always on the one that runs second.
            runs = [
                (ours, lambda r=r: train(shards, tmp / f"round{r}" / "model", p, quiet, sample_tokens=1)["tokens_per_second"]),
                (plain, lambda: plain_loop(train_part, vocab, p, args.iters)),
            ]
            for rates, run in runs if r % 2 == 0 else reversed(runs):
                rates.append(run())
            print(f"round {r}: shardflow {ours[-1]:,.0f} tokens/s, plain {plain[-1]:,.0f} tokens/s")
        ratio = statistics.median(o / q for o, q in zip(ours, plain, strict=True))
        print(f"median: shardflow {statistics.median(ours):,.0f} tokens/s, plain {statistics.median(plain):,.0f} tokens/s")
        print(f"shardflow/plain tokens/s ratio: {ratio:.3f}")

        if args.reproduce:
            full = TrainParams(**CPU_CONFIG, max_iters=2000, eval_interval=250, eval_windows="all",
                               checkpoint_interval=2000)
            t0 = time.perf_counter()
            metrics = train(shards, tmp / "reproduce" / "model", full, quiet, sample_tokens=1)
            wall = time.perf_counter() - t0
            print(f"reproduction: best val loss {metrics['best_val_loss']:.4f} (whole val split, step "
                  f"{metrics['best_step']}), final {metrics['final_val_loss']:.4f}; training wall "
                  f"{metrics['wall_seconds']:.1f} s (incl. 8 whole-split evals), call {wall:.1f} s, "
                  f"{metrics['tokens_per_second']:,.0f} tokens/s")


if __name__ == "__main__":
    main()
