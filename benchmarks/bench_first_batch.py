"""How long the device waits before its first batch, and what the whole encode takes:
windows tokenized and sorted in two character bands (what the engine does,
`core.batching.sort_groups`) against the baseline of the whole window tokenized and sorted
first, and against `--bands` bands (the lead, then the rest in bands of equal characters:
the device starts on each as it is tokenized). Same encoder, same texts, interleaved
rounds, medians.

    python benchmarks/bench_first_batch.py                                 # bundled MiniLM, CPU
    python benchmarks/bench_first_batch.py --model <folder> --device cuda --n 4000
    python benchmarks/bench_first_batch.py --model <minilm> --device cuda --texts demo --n 3000

Prints per variant the first-batch wait, the encode time, tokenize seconds and padding,
then `bands/whole-window first-batch wait ratio` and `encode time ratio` (below 1: the
engine's two bands are faster), and `<N> bands/bands encode time ratio` (below 1: more
bands are faster than the engine's two). On a 2-core CPU tokenizing competes with the model
for the cores, so the encode ratios there say little; on a GPU host they are the ones to read.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]


def whole_windows(_texts, windows):
    """The baseline: each window one group, tokenized and sorted as a whole."""
    return [(w, np.arange(b - a), True) for w, a, b in windows]


@contextlib.contextmanager
def sorting(groups=whole_windows):
    """The engine cutting windows with `groups` (default: the baseline) inside the block."""
    from shardflow.embed import engine

    saved, engine.sort_groups = engine.sort_groups, groups
    try:
        yield
    finally:
        engine.sort_groups = saved


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder (default: the bundled MiniLM)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=4096, help="texts")
    ap.add_argument("--texts", choices=("synthetic", "demo"), default="synthetic", help="text set (as bench_engine.py)")
    ap.add_argument("--bands", type=int, default=8, help="the third variant's bands (sort_groups(bands=...))")
    ap.add_argument("--window", type=int, default=4096, help="texts per window (config default: 4096)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads on the CPU")
    args = ap.parse_args(argv)

    from bench_engine import demo_texts, model_or_bundled, row_cosines, synthetic_texts

    from shardflow.core.batching import sort_groups
    from shardflow.embed import EmbedParams, load_encoder

    model = model_or_bundled(args.model)
    texts = synthetic_texts(args.n, 0) if args.texts == "synthetic" else demo_texts(None, args.n, 0)
    enc = load_encoder(
        EmbedParams(model=str(model), device=args.device, window=args.window,
                    threads=args.threads if args.device == "cpu" else None)
    )
    enc.encode(texts[:256])  # the device's start-up paid before either variant
    more = f"{args.bands} bands"
    variants = {"whole window": whole_windows, "bands": sort_groups, more: functools.partial(sort_groups, bands=args.bands)}
    runs: dict[str, list[dict]] = {k: [] for k in variants}
    out = {}
    for r in range(args.rounds):
        for name in variants if r % 2 == 0 else reversed(list(variants)):
            with sorting(variants[name]):
                out[name] = enc.encode(texts)
            runs[name].append(s := enc.last_stats.as_dict())
            print(f"# round {r + 1}, {name}: first batch after {s['first_batch_seconds']:.3f} s, "
                  f"encode {s['seconds']:.2f} s", flush=True)
    med = {k: {f: statistics.median(s[f] for s in v) for f in ("first_batch_seconds", "seconds", "tokenize_seconds", "padding_fraction")}
           for k, v in runs.items()}
    for k, m in med.items():
        print(f"{k:<13} first batch after {m['first_batch_seconds']:6.3f} s, encode {m['seconds']:7.2f} s, "
              f"tokenize {m['tokenize_seconds']:5.2f} s, padding {100 * m['padding_fraction']:4.1f} %  "
              f"({args.n} texts, window {args.window}, {args.device})")
    print(f"# cosine bands vs whole window: min {row_cosines(out['bands'], out['whole window']).min():.7f}")
    print(f"# cosine {more} vs bands: min {row_cosines(out[more], out['bands']).min():.7f}")
    b, w, m = med["bands"], med["whole window"], med[more]

    def ratio(x: float, y: float) -> str:
        return f"{x / y:.3f}" if y > 0 else "n/a (a wait below the clock's resolution)"

    print(f"{more}/bands first-batch wait ratio: {ratio(m['first_batch_seconds'], b['first_batch_seconds'])}")
    print(f"{more}/bands encode time ratio: {ratio(m['seconds'], b['seconds'])}")
    print(f"bands/whole-window first-batch wait ratio: {ratio(b['first_batch_seconds'], w['first_batch_seconds'])}")
    print(f"bands/whole-window encode time ratio: {ratio(b['seconds'], w['seconds'])}")


if __name__ == "__main__":
    main()
