"""`compile` with dynamic shapes (the default) against bucket widths (`length_buckets:
on`, the baseline: what `compile` did before), and eager for reference: each one
embedding job in a fresh process with an empty compile cache, so compile time is in
the encode time as a job pays it.

    python benchmarks/bench_compile_shapes.py                      # bundled MiniLM, CPU, 1,500 texts
    python benchmarks/bench_compile_shapes.py --model <folder> --device cuda --n 20000

Prints per variant the encode seconds (compile included), the seconds and count of the
forwards that compiled, steady tokens/s and padding, then
`dynamic/buckets encode time ratio: <x>` (below 1: dynamic shapes are faster end to end).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

VARIANTS = {
    "eager": {},
    "buckets": {"compile": True, "length_buckets": "on"},
    "dynamic": {"compile": True},
}


def main(argv: list[str] | None = None) -> None:
    from bench_compile_cache import job_parser, run_job

    args = job_parser(__doc__, n=1500).parse_args(argv)
    runs = {}
    for name, params in VARIANTS.items():
        with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache:
            runs[name] = s = run_job(args, cache, params)
        print(f"{name:<8} encode {s['seconds']:7.2f} s, compiling forwards {s['warmup_seconds']:6.2f} s over "
              f"{s['warmup_shapes']} graphs, steady {s['steady_tokens_per_s']:8.0f} tokens/s, padding "
              f"{100 * s['padding_fraction']:4.1f} %  ({args.n} texts, {args.device})", flush=True)
    print(f"dynamic/eager encode time ratio: {runs['dynamic']['seconds'] / runs['eager']['seconds']:.3f}")
    print(f"dynamic/buckets encode time ratio: {runs['dynamic']['seconds'] / runs['buckets']['seconds']:.3f}")


if __name__ == "__main__":
    main()
