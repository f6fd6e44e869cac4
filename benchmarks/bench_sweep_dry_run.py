"""Dry-run cost of a 1,000-point sweep against the plain workflow's dry run, same invocation.

A sweep's points are jobs known at parse time, and parse-time code runs again in every
remote job, so planning a big sweep must stay cheap. This writes a training sweep of
train.lr (40 values) x train.n_layer (25 values), seeds [0] (1,000 sweep_train jobs and
one collect_sweep job) over a few KB of text, and times, in rounds, each in the reverse
order of the last (so drift on a shared machine falls on both alike):

- baseline  `snakemake -n` of the default workflow (the demo corpus, 4 embed chunks)
- sweep     `snakemake -n results/sweeps/<name>/summary.parquet` with the sweep config
- chunks-N  (with --chunks N ...) `snakemake -n` of the embedding workflow planned into
            N chunks (`n_chunks: N` over 20 tiny records: the graph comes from the config
            alone), N embed jobs: what a corpus of millions of documents costs to look at
            before any job runs

each in its own fresh working directory (no results: every job is scheduled). Medians
are reported; the target is a sweep dry run of at most 10 s.

    .venv/bin/python benchmarks/bench_sweep_dry_run.py [--rounds 3] [--lrs 40] [--layers 25]
    .venv/bin/python benchmarks/bench_sweep_dry_run.py --chunks 2000 10000 --no-sweep

Each chunk count prints `chunks-N/baseline dry-run time ratio: <x>`; the last line is
exactly `sweep/baseline dry-run time ratio: <x>` (with --no-sweep, the last chunk
count's line).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
TARGET_S = 10.0


def sweep_config(folder: Path, n_lr: int, n_layers: int) -> Path:
    text = folder / "input.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 100)
    cfg = {
        "dataset": "bench", "tasks": ["training"], "n_chunks": 1,
        "input": {"path": str(text), "format": "text", "text_mode": "files"},
        "shards": {"tokenizer": "char", "split": "position"},
        "train": {"n_head": 1, "n_embd": 16},
        "sweeps": {"bench": {
            "stage": "train",
            "grid": {"train.lr": [round(1e-4 * (i + 1), 6) for i in range(n_lr)],
                     "train.n_layer": list(range(1, n_layers + 1))},
            "seeds": [0],
            "metrics": {"best_val_loss": "min"},
        }},
    }
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def chunks_config(folder: Path, n_chunks: int) -> Path:
    records = folder / "records.jsonl"
    records.write_text("".join(f'{{"id": "d{i}", "text": "hello world"}}\n' for i in range(20)))
    cfg = {"dataset": "bench", "tasks": ["embedding"], "n_chunks": n_chunks, "input": {"path": str(records)}}
    path = folder / f"chunks-{n_chunks}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def dry_run(workdir: Path, *args: str) -> tuple[float, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), "-n", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, cwd=workdir, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout + proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lrs", type=int, default=40)
    ap.add_argument("--layers", type=int, default=25)
    ap.add_argument("--chunks", type=int, nargs="*", default=[], metavar="N",
                    help="also time the embedding workflow's dry run planned into N chunks, for each N")
    ap.add_argument("--no-sweep", action="store_true", help="leave the sweep out (with --chunks)")
    args = ap.parse_args()
    if args.no_sweep and not args.chunks:
        ap.error("--no-sweep leaves only the baseline: give --chunks N")
    points = args.lrs * args.layers
    times: dict[str, list[float]] = {"baseline": []}
    if not args.no_sweep:
        times["sweep"] = []
    times.update({f"chunks-{n}": [] for n in args.chunks})
    with tempfile.TemporaryDirectory() as tmp:
        cfg = sweep_config(Path(tmp), args.lrs, args.layers)
        chunk_cfgs = {f"chunks-{n}": chunks_config(Path(tmp), n) for n in args.chunks}
        for i in range(args.rounds):
            kinds = list(times)
            for kind in kinds if i % 2 == 0 else reversed(kinds):  # no side always goes first
                work = Path(tmp) / f"{kind}-{i}"
                work.mkdir()
                if kind == "baseline":
                    s, _ = dry_run(work)
                elif kind == "sweep":
                    s, out = dry_run(work, "results/sweeps/bench/summary.parquet", "--configfile", str(cfg))
                    if i == 0 and not any(line.split() == ["sweep_train", str(points)] for line in out.splitlines()):
                        sys.exit(f"the sweep's jobs are not in the dry run:\n{out[-2000:]}")
                else:
                    s, out = dry_run(work, "--configfile", str(chunk_cfgs[kind]))
                    n = kind.removeprefix("chunks-")
                    if i == 0 and not any(line.split() == ["embed", n] for line in out.splitlines()):
                        sys.exit(f"the {n} embed jobs are not in the dry run:\n{out[-2000:]}")
                times[kind].append(s)
                print(f"round {i + 1}: {kind:8s} {s:6.2f} s", file=sys.stderr)
    median = {kind: statistics.median(t) for kind, t in times.items()}
    base = median["baseline"]
    print(f"baseline dry run (default workflow): {base:.2f} s (median of {args.rounds})")
    for n in args.chunks:
        took = median[f"chunks-{n}"]
        print(f"dry run planned into {n} chunks (embedding: {n} embed jobs): {took:.2f} s (median of {args.rounds})")
        print(f"chunks-{n}/baseline dry-run time ratio: {took / base:.2f}")
    if not args.no_sweep:
        sweep = median["sweep"]
        print(f"sweep dry run ({points} points x 1 seed: {points} sweep_train jobs and the collection): {sweep:.2f} s "
              f"(median of {args.rounds}; target <= {TARGET_S:.0f} s: {'met' if sweep <= TARGET_S else 'MISSED'})")
        print(f"sweep/baseline dry-run time ratio: {sweep / base:.2f}")

if __name__ == "__main__":
    main()
