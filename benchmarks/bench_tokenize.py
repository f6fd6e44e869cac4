"""The engine's host-side tokenization: through the tokenizers backend (what the engine
uses when it gives transformers' ids) against transformers' tokenizer call (the
baseline), on the same texts, interleaved rounds, medians.

    python benchmarks/bench_tokenize.py                      # bundled MiniLM, 20,000 synthetic texts
    python benchmarks/bench_tokenize.py --model <folder> --n 50000

Prints both medians and `backend/transformers time ratio: <x>` (below 1: the backend is faster).
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
    args = ap.parse_args(argv)

    from bench_engine import model_or_bundled, synthetic_texts

    from shardflow.embed import EmbedParams, load_encoder

    model = model_or_bundled(args.model)
    texts = synthetic_texts(args.n, 0)
    enc = load_encoder(EmbedParams(model=str(model), device="cpu"))
    if enc.backend is None:
        sys.exit("this tokenizer is not tokenized through the backend (see the engine's log)")
    ways = {"transformers": enc._tokenize_hf, "backend": enc.tokenize}
    secs: dict[str, list[float]] = {k: [] for k in ways}
    ids = {}
    for r in range(args.rounds):
        for name in ways if r % 2 == 0 else reversed(list(ways)):
            t0 = time.perf_counter()
            ids[name] = ways[name](texts)
            secs[name].append(time.perf_counter() - t0)
    assert ids["backend"] == ids["transformers"], "the backend gave other ids"
    tokens = sum(map(len, ids["backend"]))
    med = {k: statistics.median(v) for k, v in secs.items()}
    for k, v in med.items():
        print(f"{k:<13} {v:6.2f} s  {tokens / v:>10.0f} tokens/s  ({args.n} texts, {tokens} tokens, same ids)")
    print(f"backend/transformers time ratio: {med['backend'] / med['transformers']:.3f}")


if __name__ == "__main__":
    main()
