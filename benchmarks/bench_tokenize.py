"""The engine's host-side tokenization, on the same texts, interleaved rounds, medians:

- transformers  the tokenizer's call through transformers (the first baseline)
- backend       the `tokenizers` backend directly, whole texts (what the engine did
                before it cut long texts; the second baseline)
- heads         the engine: the backend on the head of each long text that truncation
                keeps (shardflow.embed.prefix), the rest whole; the head's length follows
                the characters a token this text set needs (learned from the first call)
- heads@6       the same with the head's length fixed at 6 characters a token (the
                engine before 2026-11-27)

    python benchmarks/bench_tokenize.py                      # bundled MiniLM, 20,000 synthetic texts
    python benchmarks/bench_tokenize.py --model <folder> --n 50000 --texts demo
    python benchmarks/bench_tokenize.py --texts dense --n 2000   # codes and numbers: ~1.5 characters a token

All four must give the same ids. Prints the medians, `backend/transformers time
ratio: <x>`, `heads/heads@6 time ratio: <x>` and, last, `heads/backend time ratio: <x>`
(below 1: faster).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]


def dense_texts(n: int, seed: int) -> list[str]:
    """Documents of codes and numbers (inventory lines, measurement tables): about 1.5
    characters a token for WordPiece, where English prose has 4 to 6."""
    rng = random.Random(seed)
    return [
        " ".join(f"x{rng.randint(0, 99999)}y q{rng.randint(0, 999)}z" for _ in range(rng.randint(5, 1500)))
        for _ in range(n)
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder (default: the bundled MiniLM)")
    ap.add_argument("--n", type=int, default=20000, help="synthetic texts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--texts", choices=("synthetic", "demo", "dense"), default="synthetic")
    args = ap.parse_args(argv)

    from bench_engine import demo_texts, model_or_bundled, synthetic_texts

    from shardflow.embed import EmbedParams, load_encoder
    from shardflow.embed.prefix import START_FACTOR, PrefixTokenizer

    model = model_or_bundled(args.model)
    if args.texts == "dense":
        texts = dense_texts(args.n, 0)
    else:
        texts = synthetic_texts(args.n, 0) if args.texts == "synthetic" else demo_texts(None, args.n, 0)
    enc = load_encoder(EmbedParams(model=str(model), device="cpu"))
    if enc.backend is None or enc.prefix is None:
        sys.exit("this tokenizer is not tokenized through the backend, or not from heads (see the engine's log)")
    texts = [enc.prompt + t for t in texts]
    fixed = PrefixTokenizer(enc.prefix.encode, enc.max_length, enc.prefix.n_special)

    def heads_fixed(batch):
        fixed.factor = START_FACTOR  # what it learned from the last call undone
        return fixed(batch)

    ways = {
        "transformers": enc._tokenize_hf,
        "backend": lambda t: enc._tokenize_backend(enc.backend, t),
        "heads": enc.prefix,
        "heads@6": heads_fixed,
    }
    enc.prefix(texts[: max(1, len(texts) // 16)])  # as in a job, where the first group's call teaches the later ones
    secs: dict[str, list[float]] = {k: [] for k in ways}
    ids = {}
    for r in range(args.rounds):
        for name in ways if r % 2 == 0 else reversed(list(ways)):
            t0 = time.perf_counter()
            ids[name] = ways[name](texts)
            secs[name].append(time.perf_counter() - t0)
    assert ids["backend"] == ids["transformers"] == ids["heads"] == ids["heads@6"], "the ways gave different ids"
    tokens = sum(map(len, ids["backend"]))
    med = {k: statistics.median(v) for k, v in secs.items()}
    for k, v in med.items():
        print(f"{k:<13} {v:6.2f} s  {tokens / v:>10.0f} tokens/s  ({args.n} {args.texts} texts, {tokens} tokens, same ids)")
    cut, retried = fixed.cut // args.rounds, fixed.retried // args.rounds
    print(f"heads@6: {cut} texts a round tokenized from their head, {retried} of them whole after all")
    print(
        f"heads: learned {enc.prefix.factor:.2f} characters a token (at most {enc.prefix.chars_per_token:.2f} "
        f"seen), {enc.prefix.retried} heads tokenized whole after all in all rounds"
    )
    print(f"backend/transformers time ratio: {med['backend'] / med['transformers']:.3f}")
    print(f"heads/heads@6 time ratio: {med['heads'] / med['heads@6']:.3f}")
    print(f"heads/backend time ratio: {med['heads'] / med['backend']:.3f}")


if __name__ == "__main__":
    main()
