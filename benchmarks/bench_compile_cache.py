"""What `embedding.compile_cache` saves: the compile (warm-up) seconds of a job that
finds the cache empty (the baseline), against the same job run again in a fresh process
that finds the first one's compiled code in the cache. Each run is its own process, as
each workflow job is. Two ways to compile, each with a cache of its own: `jit`
(torch.compile, the default compile_mode: every job traces the model again and loads the
cached kernels) and `aot` (compile_mode: aot, shardflow.embed.aot: the first job builds a
package, later jobs load it). A last job embeds the same texts with `compile: false`:
issue 13 asks for a compiled job faster end to end than an eager one.

    python benchmarks/bench_compile_cache.py                   # bundled MiniLM, CPU, 600 texts
    python benchmarks/bench_compile_cache.py --model <folder> --device cuda --n 20000
    python benchmarks/bench_compile_cache.py --modes aot        # one mode

Prints the runs, per mode `<mode>: warm compile job / eager job encode-time ratio: <x>`
and the cold job's, and, last, per mode `<mode>: warm/cold compile-time ratio: <x>`.
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
keys = ("seconds", "compile", "warmup_seconds", "warmup_shapes", "steady_tokens_per_s", "padding_fraction", "tokens_per_s",
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
    ap = job_parser(__doc__, n=600)
    ap.add_argument(
        "--modes",
        default="jit,aot",
        help="compile modes to run cold and warm: jit (torch.compile), aot (compile_mode: aot)",
    )
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"jit", "aot"}:
        raise SystemExit(f"--modes {args.modes!r}: jit, aot or both")
    runs: dict[str, dict] = {}
    for mode in modes:
        params = {"compile": True, "compile_mode": "aot"} if mode == "aot" else None
        with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache:  # each mode starts empty
            for label in ("cold (empty cache)", "warm (the cold run's cache)"):
                runs[f"{mode} {label}"] = run_job(args, cache, params)
                report(f"{mode} {label}", runs[f"{mode} {label}"])
    with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache:
        runs["eager"] = eager = run_job(args, cache, {"compile": False})
        report("eager (compile: false)", eager)
    for mode in modes:
        cold, warm = runs[f"{mode} cold (empty cache)"], runs[f"{mode} warm (the cold run's cache)"]
        print(f"{mode}: warm compile job / eager job encode-time ratio: {warm['seconds'] / eager['seconds']:.3f}")
        print(f"{mode}: cold compile job / eager job encode-time ratio: {cold['seconds'] / eager['seconds']:.3f}")
    for mode in modes:
        cold, warm = runs[f"{mode} cold (empty cache)"], runs[f"{mode} warm (the cold run's cache)"]
        print(f"{mode}: warm/cold compile-time ratio: {warm['warmup_seconds'] / max(cold['warmup_seconds'], 1e-9):.3f}")


def report(label: str, stats: dict) -> None:
    print(
        f"{label:<34} encode {stats['seconds']:6.2f} s, compile (warm-up) {stats['warmup_seconds']:6.2f} s "
        f"over {stats['warmup_shapes']} graphs, steady {stats['steady_tokens_per_s']:.0f} tokens/s"
        + (f"; {stats['compile']}" if stats.get("compile", "off") != "off" else ""),
        flush=True,
    )


if __name__ == "__main__":
    main()
