"""Task search: the search job (batch.search_queries) against numpy brute force.

A synthetic corpus of `--docs` unit vectors of `--dim` (random directions) is searched by
a file of `--queries` unit vectors, `--planted` of them noisy copies of a corpus row (so
that row is known to be their best hit), as the workflow's search job does it: on the
CPU, torch backend, the k best a query written to hits.parquet with its summary and
figure, in slices of `search.slice_queries` queries, one pass over the corpus each
(`--slice-bytes` overrides search.SLICE_BYTES["cpu"] to make more passes). The baseline,
run in the same invocation on the same vectors, is what one writes with numpy alone: the
float32 scores of a block of 1,024 queries against the whole corpus at once,
argpartition to the k + 1 best and a sort of those, ties to the lower row. Both are
exact; the script prints each one's seconds, the ratio, the job's queries a second and
passes, its peak RSS, and how many queries' hit rows agree. Float32 sums in another
order can swap two scores equal to about 1e-7: a query whose rows differ only at ranks
whose baseline score is within 1e-6 of a neighbouring rank's (the k-th and (k+1)-th
among them), with the same scores there, is counted apart as a tie; any other
difference is a disagreement.

    python benchmarks/bench_search.py                          # 20,000 queries x 50,000 docs x 384, one pass: about 20 s on 2 CPU threads
    python benchmarks/bench_search.py --slice-bytes 10000000   # the same in slices of 5,120 queries: 4 passes

The last line is exactly `search speed-up over numpy brute force: <x>`.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from shardflow.core.columns import write_ids_parquet
from shardflow.retrieval import search
from shardflow.retrieval.batch import SearchParams, search_queries
from shardflow.retrieval.search import slice_queries

BASELINE_BLOCK = 1024  # queries scored at once: the job's QUERY_BLOCK
TIE = 1e-6


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def vectors(docs: int, queries: int, dim: int, planted: int, seed: int = 0):
    """(corpus, queries, planted query rows, their corpus rows): unit float32 vectors,
    generated in float32 so the setup's memory stays below the search's."""
    rng = np.random.default_rng(seed)
    x = unit(rng.standard_normal((docs, dim), dtype=np.float32))
    q = unit(rng.standard_normal((queries, dim), dtype=np.float32))
    where = np.sort(rng.choice(queries, planted, replace=False))
    of = rng.integers(0, docs, size=planted)
    # 0.05 of the vector's length as noise: a cosine of about 0.999 to its row, where
    # random directions in 384 dimensions reach about 0.25 at best.
    noise = rng.standard_normal((planted, dim), dtype=np.float32) * np.float32(0.05 / math.sqrt(dim))
    q[where] = unit(x[of] + noise)
    return x, q, where, of


def brute_force(q: np.ndarray, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of each query's k + 1 best corpus rows, score descending then row
    ascending: the (k+1)-th shows where a tie crosses the cut."""
    kk = min(k + 1, len(x))
    rows = np.empty((len(q), kk), np.int64)
    scores = np.empty((len(q), kk), np.float32)
    for start in range(0, len(q), BASELINE_BLOCK):
        s = q[start:start + BASELINE_BLOCK] @ x.T
        best = np.argpartition(s, len(x) - kk, axis=1)[:, len(x) - kk:] if kk < len(x) else \
            np.broadcast_to(np.arange(len(x)), s.shape)
        best_s = np.take_along_axis(s, best, 1)
        order = np.lexsort((best, -best_s), axis=1)
        rows[start:start + len(s)] = np.take_along_axis(best, order, 1)
        scores[start:start + len(s)] = np.take_along_axis(best_s, order, 1)
    return rows, scores


def compare(got: np.ndarray, got_s: np.ndarray, rows: np.ndarray, scores: np.ndarray) -> tuple[int, int, int]:
    """(agreeing, ties, disagreeing) queries: the job's k hit rows (`got`, scores `got_s`)
    against the baseline's k + 1 (`rows`, `scores`). A tie differs only at ranks whose
    baseline score is within TIE of the rank above or below it, the job's scores
    matching there."""
    k = got.shape[1]
    differs = got != rows[:, :k]
    padded = np.pad(scores.astype(np.float64), ((0, 0), (1, 1)), constant_values=np.inf)
    tied = (np.abs(padded[:, 1:k + 1] - padded[:, :k]) <= TIE) | (np.abs(padded[:, 1:k + 1] - padded[:, 2:k + 2]) <= TIE)
    close = np.abs(got_s.astype(np.float64) - scores[:, :k]) <= TIE
    same = ~differs.any(axis=1)
    tie = ~same & (~differs | (tied & close)).all(axis=1)
    return int(same.sum()), int(tie.sum()), int((~same & ~tie).sum())


def run(docs: int, queries: int, dim: int, k: int, planted: int, slice_bytes: int | None, work: Path) -> dict:
    import pyarrow.parquet as pq

    x, q, where, of = vectors(docs, queries, dim, planted)
    paths = {name: str(work / name) for name in ("docs.npy", "doc_ids.parquet", "queries.npy", "query_ids.parquet")}
    np.save(paths["docs.npy"], x)
    np.save(paths["queries.npy"], q)
    write_ids_parquet(paths["doc_ids.parquet"], [f"doc-{i}" for i in range(docs)])
    write_ids_parquet(paths["query_ids.parquet"], [f"q-{i}" for i in range(queries)])
    outputs = {"hits": str(work / "hits.parquet"), "summary": str(work / "summary.json"),
               "figure": str(work / "figure.png")}
    params = SearchParams(k=k, device="cpu")

    kept = search.SLICE_BYTES["cpu"]
    if slice_bytes is not None:
        search.SLICE_BYTES["cpu"] = slice_bytes
    try:
        step = slice_queries("cpu", dim, min(k, docs))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        start = time.perf_counter()
        search_queries(paths["docs.npy"], paths["doc_ids.parquet"], paths["queries.npy"],
                       paths["query_ids.parquet"], params, outputs)
        searched = time.perf_counter() - start
        ours_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # before the baseline's blocks
    finally:
        search.SLICE_BYTES["cpu"] = kept

    start = time.perf_counter()
    rows, scores = brute_force(q, x, k)
    baseline = time.perf_counter() - start
    hits = pq.read_table(outputs["hits"], columns=["row", "score"])
    got = hits["row"].to_numpy().reshape(queries, -1)
    got_s = hits["score"].to_numpy().reshape(queries, -1)
    agreeing, ties, disagreeing = compare(got, got_s, rows, scores)
    return {
        "queries": queries, "docs": docs, "dim": dim, "k": k,
        "slice_queries": step, "passes": math.ceil(queries / step),
        "search_s": round(searched, 3), "numpy_brute_force_s": round(baseline, 3),
        "queries_per_s": round(queries / searched),
        "agreeing_queries": agreeing, "tie_differences": ties, "disagreeing_queries": disagreeing,
        "planted": planted, "planted_ranked_first": int((got[where, 0] == of).sum()),
        "peak_rss_before_search_mib": before, "search_peak_rss_mib": ours_peak,
        "speedup": round(baseline / searched, 2),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--planted", type=int, default=1000, help="queries that are noisy copies of a corpus row")
    ap.add_argument("--slice-bytes", type=int, default=None,
                    help=f"search.SLICE_BYTES['cpu'] for this run (default {search.SLICE_BYTES['cpu']:,}): "
                         "fewer bytes, smaller slices, more passes over the corpus")
    ap.add_argument("--threads", type=int, default=2, help="torch's (numpy's BLAS keeps its own: every core)")
    args = ap.parse_args(argv)
    if not 0 <= args.planted <= args.queries:
        ap.error(f"--planted {args.planted}: expected 0 to --queries ({args.queries})")
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.docs, args.queries, args.dim, args.k, args.planted, args.slice_bytes, Path(tmp))
    print(json.dumps(result))
    print(f"search speed-up over numpy brute force: {result['speedup']}")
    return result


if __name__ == "__main__":
    main()
