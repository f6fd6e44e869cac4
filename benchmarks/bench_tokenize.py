"""The engine's host-side tokenization, on the same texts, interleaved rounds, medians:

- transformers  the tokenizer's call through transformers (the first baseline)
- backend       the `tokenizers` backend directly, whole texts (what the engine did
                before it cut long texts; the second baseline)
- heads         the engine: the backend on the head of each long text that truncation
                keeps (shardflow.embed.prefix), the rest whole

    python benchmarks/bench_tokenize.py                      # bundled MiniLM, 20,000 synthetic texts
    python benchmarks/bench_tokenize.py --model <folder> --n 50000 --texts demo

All three must give the same ids. Prints the medians, `backend/transformers time
ratio: <x>` and, last, `heads/backend time ratio: <x>` (below 1: faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder (default: the bundled MiniLM)")
    ap.add_argument("--n", type=int, default=20000, help="synthetic texts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--texts", choices=("synthetic", "demo"), default="synthetic")
    args = ap.parse_args(argv)

    from bench_engine import demo_texts, model_or_bundled, synthetic_texts

    from shardflow.embed import EmbedParams, load_encoder

    model = model_or_bundled(args.model)
    texts = synthetic_texts(args.n, 0) if args.texts == "synthetic" else demo_texts(None, args.n, 0)
    enc = load_encoder(EmbedParams(model=str(model), device="cpu"))
    if enc.backend is None or enc.prefix is None:
        sys.exit("this tokenizer is not tokenized through the backend, or not from heads (see the engine's log)")
    texts = [enc.prompt + t for t in texts]
    ways = {"transformers": enc._tokenize_hf, "backend": lambda t: enc._tokenize_backend(enc.backend, t), "heads": enc.prefix}
    secs: dict[str, list[float]] = {k: [] for k in ways}
    ids = {}
    for r in range(args.rounds):
        for name in ways if r % 2 == 0 else reversed(list(ways)):
            t0 = time.perf_counter()
            ids[name] = ways[name](texts)
            secs[name].append(time.perf_counter() - t0)
    assert ids["backend"] == ids["transformers"] == ids["heads"], "the ways gave different ids"
    tokens = sum(map(len, ids["backend"]))
    med = {k: statistics.median(v) for k, v in secs.items()}
    for k, v in med.items():
        print(f"{k:<13} {v:6.2f} s  {tokens / v:>10.0f} tokens/s  ({args.n} {args.texts} texts, {tokens} tokens, same ids)")
    cut, retried = enc.prefix.cut // args.rounds, enc.prefix.retried // args.rounds
    print(f"heads: {cut} texts a round tokenized from their head, {retried} of them whole after all")
    print(f"backend/transformers time ratio: {med['backend'] / med['transformers']:.3f}")
    print(f"heads/backend time ratio: {med['heads'] / med['backend']:.3f}")


if __name__ == "__main__":
    main()
