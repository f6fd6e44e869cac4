"""What `embedding.compile_cache` saves: the compile (warm-up) seconds of a job that
finds the cache empty (the baseline), against the same job run again in a fresh process
that finds the first one's kernels in the cache. Each run is its own process, as each
workflow job is. A third job embeds the same texts with `compile: false`: issue 13 asks
for a compiled job faster end to end than an eager one.

    python benchmarks/bench_compile_cache.py                   # bundled MiniLM, CPU, 600 texts
    python benchmarks/bench_compile_cache.py --model <folder> --device cuda --n 20000

Prints the three runs, `warm compile job / eager job encode-time ratio: <x>` and, last,
`warm/cold compile-time ratio: <x>`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

JOB = """
import json, sys
sys.path[:0] = ["", "benchmarks"]  # this checkout's shardflow, not an installed copy
from bench_engine import synthetic_texts
from shardflow.embed import EmbedParams, load_encoder
args = json.loads(sys.argv[1])
texts = synthetic_texts(args["n"], 0)
keys = ("seconds", "warmup_seconds", "warmup_shapes", "steady_tokens_per_s", "padding_fraction", "tokens_per_s",
        "tokenize_seconds", "collate_seconds", "host_wait_seconds", "launch_seconds", "gather_seconds", "batches",
        "cuda_graphs", "cuda_graphs_reason", "graphs_captured", "graph_replays", "graph_capture_seconds")
out = {}
for encode in range(1 + args["again"]):  # again: a second encoder in the same, now warm, process
    enc = load_encoder(EmbedParams(model=args["model"], device=args["device"], compile_cache=args["cache"],
                                   threads=args["threads"], **args.get("params", {"compile": True})))
    for name, value in args.get("attrs", {}).items():  # an engine setting that is not a param
        setattr(enc, name, value)
    enc.encode(texts)
    s = enc.last_stats.as_dict()
    out.update({("again_" if encode else "") + k: s[k] for k in keys})
print(json.dumps(out))
"""


def job_parser(doc: str, n: int) -> argparse.ArgumentParser:
    """The command line of a benchmark made of `run_job` jobs."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder (default: the bundled MiniLM)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=n, help="synthetic texts per job")
    ap.add_argument("--threads", type=int, default=2, help="torch threads on the CPU")
    return ap


def run_job(
    args: argparse.Namespace, cache: str, params: dict | None = None, again: bool = False, attrs: dict | None = None
) -> dict:
    """One embedding job of `args.n` synthetic texts (the `job_parser` arguments) in a
    fresh process (its own torch, dynamo and compile state), with its compile cache in
    `cache` and `params` as EmbedParams fields (default compile: true; `attrs`: Encoder
    attributes set after loading). Returns the encode's stats; with `again`, also a
    second encode by a new encoder in the same process (keys prefixed `again_`)."""
    from bench_engine import model_or_bundled

    job = {"model": model_or_bundled(args.model), "device": args.device, "n": args.n, "cache": cache,
           "threads": args.threads if args.device == "cpu" else None, "again": again}
    if params is not None:
        job["params"] = params
    if attrs:
        job["attrs"] = attrs
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", JOB, json.dumps(job)], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip().splitlines()[-1]
    return json.loads(out)


def main(argv: list[str] | None = None) -> None:
    args = job_parser(__doc__, n=600).parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache:
        runs = []
        for label, params in (
            ("cold (empty cache)", None),
            ("warm (the cold run's cache)", None),
            ("eager (compile: false)", {"compile": False}),
        ):
            stats = run_job(args, cache, params)
            runs.append(stats)
            print(
                f"{label:<28} encode {stats['seconds']:6.2f} s, compile (warm-up) {stats['warmup_seconds']:6.2f} s "
                f"over {stats['warmup_shapes']} graphs, steady {stats['steady_tokens_per_s']:.0f} tokens/s",
                flush=True,
            )
    cold, warm, eager = runs
    print(f"warm compile job / eager job encode-time ratio: {warm['seconds'] / eager['seconds']:.3f}")
    print(f"warm/cold compile-time ratio: {warm['warmup_seconds'] / cold['warmup_seconds']:.3f}")


if __name__ == "__main__":
    main()
