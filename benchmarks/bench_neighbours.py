"""Task neighbours: the chunk jobs' exact search and the merge, against numpy brute force.

A synthetic corpus of `--docs` unit vectors of `--dim` (random directions; `--twins` of
them are copies of another document with a little noise, as near-duplicates are) is
searched as the workflow's neighbours jobs do (shardflow.retrieval.neighbours
chunk_neighbours, one call a chunk, `--chunks`), then merged (merge_neighbours: the
table, the pairs at `--threshold`, the groups). The baseline, run in the same
invocation on the same vectors, is what one writes with numpy alone: the float32
similarity of a block of 4,096 rows against all rows at once, the diagonal masked,
argpartition to the k best and a sort of those. Both are exact; the script prints each
one's seconds, the ratio, and how many documents' neighbour lists agree (ties can order
differently in the last float32 bit: a list that differs only there counts as agreeing
where its scores match to 1e-5).

    python benchmarks/bench_neighbours.py                  # 50,000 x 384, about a minute on 2 CPU threads
    python benchmarks/bench_neighbours.py --device cuda    # the neighbours jobs on a GPU (the baseline stays numpy)

The last line is exactly `neighbours search speed-up over numpy brute force: <x>`.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from shardflow.core.columns import write_ids_parquet
from shardflow.retrieval.neighbours import NeighbourParams, chunk_neighbours, chunk_rows, merge_neighbours

BASELINE_BLOCK = 4096


def corpus(docs: int, dim: int, twins: int, seed: int = 0) -> np.ndarray:
    """`docs` unit vectors; the last `twins` are noisy copies of earlier ones."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(docs, dim)).astype(np.float32)
    if twins:
        of = rng.integers(0, docs - twins, size=twins)
        x[docs - twins:] = x[of] + rng.normal(scale=0.05, size=(twins, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute_force(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of each row's k best other rows, score descending then row ascending."""
    rows = np.empty((len(x), k), np.int64)
    scores = np.empty((len(x), k), np.float32)
    for start in range(0, len(x), BASELINE_BLOCK):
        s = x[start:start + BASELINE_BLOCK] @ x.T
        s[np.arange(len(s)), np.arange(start, start + len(s))] = -np.inf
        best = np.argpartition(-s, k, axis=1)[:, :k]
        best_s = np.take_along_axis(s, best, 1)
        order = np.lexsort((best, -best_s), axis=1)
        rows[start:start + len(s)] = np.take_along_axis(best, order, 1)
        scores[start:start + len(s)] = np.take_along_axis(best_s, order, 1)
    return rows, scores


def agreeing(rows: np.ndarray, scores: np.ndarray, table: dict, k: int) -> int:
    """Documents whose k neighbours the workflow lists as the baseline does (or, where a
    tie ordered them otherwise, with the same scores to 1e-5)."""
    got = np.asarray(table["neighbour_row"]).reshape(-1, k)
    got_s = np.asarray(table["score"]).reshape(-1, k)
    same = (got == rows).all(axis=1)
    close = np.isclose(got_s, scores, atol=1e-5).all(axis=1)
    return int((same | close).sum())


def run(docs: int, dim: int, k: int, chunks: int, twins: int, threshold: float, device: str, work: Path) -> dict:
    import pyarrow.parquet as pq

    x = corpus(docs, dim, twins)
    npy, ids = str(work / "embeddings.npy"), str(work / "ids.parquet")
    np.save(npy, x)
    write_ids_parquet(ids, [f"doc-{i}" for i in range(docs)])
    per = [docs // chunks + (i < docs % chunks) for i in range(chunks)]
    manifest = {"chunks": [{"items": n} for n in per]}
    params = NeighbourParams(k=k, duplicate_threshold=threshold, device=device)

    start = time.perf_counter()
    tables = []
    for chunk in range(chunks):
        tables.append(str(work / f"chunk_{chunk}.parquet"))
        chunk_neighbours(npy, ids, chunk_rows(manifest, chunk), params, tables[-1])
    searched = time.perf_counter() - start
    outputs = {name: str(work / f"{name}.out") for name in ("table", "pairs", "groups", "summary", "figure")}
    start = time.perf_counter()
    summary = merge_neighbours(tables, ids, params, outputs)
    merged = time.perf_counter() - start
    ours_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # before the baseline's blocks

    start = time.perf_counter()
    rows, scores = brute_force(x, k)
    baseline = time.perf_counter() - start
    table = pq.read_table(outputs["table"], columns=["neighbour_row", "score"]).to_pydict()
    return {
        "docs": docs, "dim": dim, "k": k, "chunks": chunks, "device": device,
        "neighbours_search_s": round(searched, 3), "merge_s": round(merged, 3),
        "numpy_brute_force_s": round(baseline, 3),
        "agreeing_documents": agreeing(rows, scores, table, k),
        "near_duplicate_pairs": summary["near_duplicate_pairs"], "groups": summary["groups"],
        "neighbours_peak_rss_mib": ours_peak,
        "speedup": round(baseline / searched, 2),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--twins", type=int, default=1000, help="noisy copies planted (near-duplicates)")
    ap.add_argument("--threshold", type=float, default=0.95)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2, help="torch's (numpy's BLAS keeps its own: every core)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.docs, args.dim, args.k, args.chunks, args.twins, args.threshold, args.device, Path(tmp))
    print(json.dumps(result))
    print(f"neighbours search speed-up over numpy brute force: {result['speedup']}")
    return result


if __name__ == "__main__":
    main()
