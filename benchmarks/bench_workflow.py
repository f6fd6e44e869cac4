"""Whole-workflow overhead and split/merge memory, measured in one invocation.

1. Overhead: the same corpus (default 20,000 documents) embedded
   (a) by the engine alone: one fresh Python process that loads the model once,
       embeds every text with all --threads and writes embeddings + ids, and
   (b) by `snakemake --cores <threads>` with the default config (`resources.embed.threads:
       auto`: the cores shared by the embed jobs that run at once) running
       split -> embed_<i> (N chunks) -> merge,
   interleaved, each round in the reverse order of the last (engine, workflow;
   workflow, engine; ...), median of --rounds. A second baseline, the engine called
   in this process (imports paid in the first call, no output written), is printed
   too unless --skip-in-process.
   Prints workflow/engine wall-time ratio (target <= 1.15 on CPU, 20k docs, 4 chunks).
2. Memory: peak RSS of split and of merge, each in a fresh subprocess, at 1x and
   10x corpus size. Prints the 10x/1x ratio (flat = within 20%).

    .venv/bin/python benchmarks/bench_workflow.py                  # full (CPU, 2 cores: ~40 min)
    .venv/bin/python benchmarks/bench_workflow.py --docs 2000 --rounds 1   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_corpus(path: Path, n_docs: int, seed: int = 0) -> None:
    """n_docs real-text documents: demo docstrings, each made distinct by a numbered prefix."""
    from shardflow.corpus.demo import DemoParams, build_demo_corpus

    base = path.with_suffix(".base.jsonl")
    build_demo_corpus(str(base), DemoParams(max_docs=3000, min_words=20))
    texts = [json.loads(line)["text"] for line in base.read_text().splitlines()]
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n_docs):
            t = texts[int(rng.integers(len(texts)))]
            fh.write(json.dumps({"id": f"doc{i}", "text": f"Note {i}: {t}"}) + "\n")
    base.unlink()


_ENGINE_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from shardflow.corpus.chunks import read_chunk
from shardflow.core.columns import write_ids_parquet
from shardflow.core.npyio import write_npy
from shardflow.embed.engine import EmbedParams, load_encoder
from shardflow.core.models import resolve_model
ids, texts = read_chunk(sys.argv[1])
enc = load_encoder(EmbedParams(model=resolve_model("default"), device="cpu", threads=int(sys.argv[2])))
write_npy(sys.argv[3], enc.encode(texts))
write_ids_parquet(sys.argv[4], ids)
"""


def engine_alone(corpus: Path, threads: int, workdir: Path) -> float:
    """The script a user would write: one fresh interpreter that loads the model once,
    embeds the whole corpus with all `threads` and writes the matrix and the ids."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", _ENGINE_SCRIPT.format(repo=str(REPO)), str(corpus), str(threads),
           str(workdir / "embeddings.npy"), str(workdir / "ids.parquet")]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return time.perf_counter() - start


def engine_in_process(corpus: Path, threads: int) -> float:
    """A second baseline, kinder to the engine: this process, torch and transformers
    already imported (after round 1), no output written."""
    from shardflow.core.models import resolve_model
    from shardflow.corpus.chunks import read_chunk
    from shardflow.embed.engine import EmbedParams, load_encoder

    start = time.perf_counter()
    _, texts = read_chunk(corpus)
    enc = load_encoder(EmbedParams(model=resolve_model("default"), device="cpu", threads=threads))
    enc.encode(texts)
    return time.perf_counter() - start


def workflow(corpus: Path, n_chunks: int, threads: int, workdir: Path) -> float:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    cfg = workdir / "config.yaml"
    cfg.write_text(
        json.dumps(
            {
                "dataset": "bench",
                "n_chunks": n_chunks,
                "input": {"path": str(corpus)},
                "gpu_jobs": {"device": "cpu"},
            }
        )
    )
    snakemake = str(Path(sys.executable).parent / "snakemake")
    start = time.perf_counter()
    subprocess.run(
        [snakemake, "results/bench/ids.parquet", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
         "--cores", str(threads), "--configfile", str(cfg), "--quiet", "all"],
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    return time.perf_counter() - start


_PEAK = """
import json, sys
sys.path.insert(0, {repo!r})
what, args = sys.argv[1], json.loads(sys.argv[2])
if what == "split":
    from shardflow.corpus.readers import ReaderOptions
    from shardflow.corpus.split import SplitParams, split_corpus
    split_corpus([args["corpus"]], ReaderOptions(), SplitParams(n_chunks=4),
                 args["chunks"], args["manifest"], args["rejects"])
else:
    from shardflow.embed.merge import merge_embeddings
    merge_embeddings(args["npy"], args["ids"], args["out_npy"], args["out_ids"])
# VmHWM: this process image's peak RSS (ru_maxrss would include the parent's, kept across exec).
print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


def peak_rss_mb(what: str, args: dict) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _PEAK.format(repo=str(REPO)), what, json.dumps(args)],
        check=True, capture_output=True, text=True,
    ).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def baseline_rss_mb(what: str) -> float:
    """RSS of the same subprocess doing only its imports (the floor under both sizes)."""
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); "
    code += "import shardflow.corpus.split, shardflow.corpus.readers" if what == "split" else "import shardflow.embed.merge"
    code += '; print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")))'
    return int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout) / 1024


def memory(tmp: Path, n_docs: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    results = {}
    for scale in (1, 10):
        d = tmp / f"mem{scale}"
        d.mkdir()
        corpus = d / "corpus.jsonl"
        make_corpus(corpus, n_docs * scale)
        chunks = [str(d / f"chunk_{i}.jsonl") for i in range(4)]
        split_mb = peak_rss_mb("split", {"corpus": str(corpus), "chunks": chunks,
                                         "manifest": str(d / "m.json"), "rejects": str(d / "r.jsonl")})
        rows = n_docs * scale // 4
        npys, ids = [], []
        for i in range(4):
            arr = np.lib.format.open_memmap(d / f"e{i}.npy", mode="w+", dtype=np.float32, shape=(rows, 384))
            arr[:] = 0.05
            arr.flush()
            del arr
            # As embed_<i> writes them (bounded row groups).
            pq.write_table(pa.table({"id": [f"c{i}-{r}" for r in range(rows)]}), d / f"e{i}.parquet",
                           row_group_size=16384)
            npys.append(str(d / f"e{i}.npy"))
            ids.append(str(d / f"e{i}.parquet"))
        merge_mb = peak_rss_mb("merge", {"npy": npys, "ids": ids, "out_npy": str(d / "all.npy"),
                                         "out_ids": str(d / "all.parquet")})
        results[scale] = (split_mb, merge_mb, corpus.stat().st_size / 2**20)
        print(f"{scale:>3}x: {n_docs * scale:>8} docs, corpus {results[scale][2]:7.1f} MB, "
              f"split peak RSS {split_mb:7.1f} MB, merge peak RSS {merge_mb:7.1f} MB")
    for i, what in enumerate(("split", "merge")):
        base = baseline_rss_mb(what)
        ratio = results[10][i] / results[1][i]
        print(f"{what}: peak RSS 10x/1x = {ratio:.3f} (import floor {base:.1f} MB; "
              f"above the floor: {results[1][i] - base:.1f} -> {results[10][i] - base:.1f} MB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-in-process", action="store_true", help="skip the second, in-process engine baseline")
    # Allocator pools (pyarrow's, glibc's) settle at a few tens of MB: measure from a
    # base large enough to be past that, so growth with the corpus is what shows.
    ap.add_argument("--mem-docs", type=int, default=100000, help="1x corpus size of the memory test")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="shardflow-bench-") as tmp:
        tmp = Path(tmp)
        if not args.skip_memory:
            memory(tmp, args.mem_docs)
        if not args.skip_overhead:
            corpus = tmp / "corpus.jsonl"
            make_corpus(corpus, args.docs)
            engine_s, warm_s, flow_s = [], [], []
            runs = [(engine_s, lambda: engine_alone(corpus, args.threads, tmp / "engine"))]
            if not args.skip_in_process:
                runs.append((warm_s, lambda: engine_in_process(corpus, args.threads)))
            runs.append((flow_s, lambda: workflow(corpus, args.chunks, args.threads, tmp / "wf")))
            for r in range(args.rounds):
                for times, run in runs if r % 2 == 0 else reversed(runs):  # no method always goes first
                    times.append(run())
                warm = f", engine in this process {warm_s[-1]:.1f} s" if warm_s else ""
                print(f"round {r + 1}: engine alone {engine_s[-1]:.1f} s{warm}, workflow {flow_s[-1]:.1f} s")
            print(f"workflow: {args.docs} docs, {args.chunks} chunks, {args.threads} cores (engine alone: {args.threads} threads)")
            if warm_s:
                warm_ratio = statistics.median(f / e for f, e in zip(flow_s, warm_s, strict=True))
                print(f"workflow/engine-in-this-process (imports already done) wall-time ratio: {warm_ratio:.3f}")
            ratios = [f / e for f, e in zip(flow_s, engine_s, strict=True)]
            print(f"workflow/engine wall-time ratio: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
