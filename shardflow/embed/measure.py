"""What one embedding run measured, for an embed sweep's table: its speed per device,
what it cost, and how far its vectors are from a reference run's.

A sweep over embedding settings (token budget, dtype, kernels, packing, compile, ...)
picks the fastest settings whose vectors stay faithful, so each job reports both:

- speed from its chunk jobs' own records (merge's job table): records and tokens per
  second while encoding, summed over the jobs' encode seconds, so a job's rate does not
  depend on how many jobs ran beside it; the same with compile warm-up left out
  (`steady_*`); and per second of the whole job, model loading included (`job_*`);
- what it needs: the largest chunk job's peak GPU memory (allocated and reserved, MiB);
- what it cost: GPU-hours, as the embedding report counts them, and `records_paid`, the
  records whose computing they paid for. No price: the sweep's collection prices them
  (shardflow.sweep.cost.with_cost, core.jobs.priced), so that a changed
  `report.gpu_hour_price` reruns the collection, not this job, which reads two sets of
  vectors;
- agreement: the cosine, row by row, between the run's vectors and the reference's
  (the main run's embeddings of the same data set), streamed in row blocks.

    metrics = run_metrics("jobs.json", "verification.json", "embeddings.npy", "ids.parquet",
                          reference=("ref.npy", "ref.ids.parquet"))
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardflow.core.files import read_json
from shardflow.core.jobs import PEAK_GPU_KEYS, peak_gpu_memory, read_job_table
from shardflow.core.npyio import iter_row_blocks, read_header, rows_per_block
from shardflow.core.s3 import logical_path
from shardflow.embed.report import chunk_totals


def _id_blocks(path: str | os.PathLike, rows: int) -> Iterator[pa.Array]:
    """The id column in blocks of exactly `rows` (the last one shorter), whatever the
    file's row groups: two files' blocks line up row for row. Arrow arrays, never
    Python strings: a few MB at a time, not the column (about 120 bytes an id as
    Python objects, several GB for tens of millions of rows)."""
    pending: list[pa.Array] = []
    have = 0
    for batch in pq.ParquetFile(path).iter_batches(columns=["id"], batch_size=rows):
        pending.append(batch.column(0))
        have += len(batch)
        while have >= rows:
            joined = pa.concat_arrays(pending)
            yield joined.slice(0, rows)
            pending, have = [joined.slice(rows)], have - rows
    if have:
        yield pa.concat_arrays(pending)


def _first_id_difference(ids: str | os.PathLike, ref_ids: str | os.PathLike, rows: int) -> tuple[int, int, int | None]:
    """(ids in `ids`, ids in `ref_ids`, the first row where they differ or None)."""
    n, ref_n = pq.ParquetFile(ids).metadata.num_rows, pq.ParquetFile(ref_ids).metadata.num_rows
    at = 0
    for a, b in zip(_id_blocks(ids, rows), _id_blocks(ref_ids, rows), strict=False):
        if not a.equals(b):
            # equal lengths (the blocks line up) except for the shorter file's last one
            k = min(len(a), len(b))
            differ = pc.not_equal(a.slice(0, k), b.slice(0, k)).to_numpy(zero_copy_only=False)
            hits = np.flatnonzero(differ)
            return n, ref_n, at + (int(hits[0]) if len(hits) else k)
        at += len(a)
    return n, ref_n, (None if n == ref_n else min(n, ref_n))


# Each of the two sets is read this much at a time (in float64), whatever its width.
VECTOR_BLOCK_BYTES = 32 << 20


def _blocks(path: str | os.PathLike, rows: int) -> Iterator[np.ndarray]:
    """Row blocks in float64: norms and dot products in one precision. A float32 norm
    is off by about 1e-7 relative, which a cosine of two equal vectors then shows as
    0.9999998, and overflows for components near float32's largest."""
    for block in iter_row_blocks(path, rows):
        yield block.astype(np.float64)


def agreement(npy: str | os.PathLike, ids: str | os.PathLike, ref_npy: str | os.PathLike,
              ref_ids: str | os.PathLike, block_rows: int = 16384) -> dict:
    """Cosine per row between two embedding sets of the same records in the same order:
    its minimum, mean and 1st percentile, and the rows compared. A pair of zero vectors
    counts as 1, one zero vector against a non-zero one as 0. Raises ValueError naming
    the files where the records or widths differ."""
    n_mine, n_theirs, at = _first_id_difference(ids, ref_ids, block_rows)
    if at is not None:
        raise ValueError(
            f"{ids} and {ref_ids} do not hold the same records in the same order "
            f"({n_mine} and {n_theirs} ids; first difference at row {at})"
        )
    (n, dim), (_, ref_dim) = read_header(npy)[0], read_header(ref_npy)[0]
    if dim != ref_dim:
        raise ValueError(f"{npy} has {dim} dimensions but the reference {ref_npy} has {ref_dim}: another model?")
    cosines = np.empty(n, dtype=np.float64)
    at = 0
    rows = min(block_rows, rows_per_block(dim, np.dtype(np.float64), VECTOR_BLOCK_BYTES))
    for a, b in zip(_blocks(npy, rows), _blocks(ref_npy, rows), strict=True):
        na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        dot = np.einsum("ij,ij->i", a, b)
        both = na * nb
        cos = np.where(both > 0, dot / np.where(both > 0, both, 1.0), np.where((na == 0) & (nb == 0), 1.0, 0.0))
        cosines[at:at + len(cos)] = np.clip(cos, -1.0, 1.0)
        at += len(cos)
    if n == 0:
        return {"cosine_min": None, "cosine_mean": None, "cosine_p1": None, "rows": 0}
    return {
        "cosine_min": float(cosines.min()),
        "cosine_mean": float(cosines.mean()),
        "cosine_p1": float(np.percentile(cosines, 1)),
        "rows": int(n),
    }


def _rate(count: float, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def run_metrics(jobs_path: str | os.PathLike, verification_path: str | os.PathLike, npy: str | os.PathLike,
                ids: str | os.PathLike, *, reference: tuple[str, str] | None) -> dict:
    """The metrics record of one embedding run (see the module docstring): its job table,
    verification, vectors and ids; `reference` is the reference run's (embeddings.npy,
    ids.parquet), or None where none compares (another model): then `agreement` is null
    and `agreement_reason` says why."""
    jobs = read_job_table(jobs_path)
    stats = [j["stats"] for j in jobs]
    benches = [j["benchmark"] for j in jobs]
    totals = chunk_totals(stats, benches)  # resumed rows: in records, not computed
    costs, records, computed, tokens = totals["costs"], totals["records"], totals["computed"], totals["tokens"]
    padded = sum(s["padded_tokens"] for s in stats)
    encode = sum(s["seconds"] for s in stats)
    warmup = sum(s.get("warmup_seconds", 0.0) for s in stats)
    steady_items = computed - sum(s.get("warmup_items", 0) for s in stats)
    steady_tokens = tokens - sum(s.get("warmup_tokens", 0) for s in stats)
    rss = [b["max_rss"] for b in benches if isinstance(b.get("max_rss"), float) and not math.isnan(b["max_rss"])]
    verification = read_json(verification_path)
    out = {
        "records": records,
        "records_resumed": records - computed,
        "tokens": tokens,
        "chunks": len(stats),
        "items_per_s": _rate(computed, encode),
        "tokens_per_s": _rate(tokens, encode),
        "steady_items_per_s": _rate(steady_items, encode - warmup),
        "steady_tokens_per_s": _rate(steady_tokens, encode - warmup),
        "job_items_per_s": _rate(computed, costs["job_seconds"]),
        "encode_seconds": encode,
        "warmup_seconds": warmup,
        "job_seconds": costs["job_seconds"],
        "wall_seconds": costs["wall_time_s"],
        "padding_fraction": 1 - tokens / padded if padded else 0.0,
        # batches split after running out of device memory (the budget lowered for the rest
        # of the job): a point with any did not run at its settings throughout
        "oom_backoffs": sum(s.get("oom_backoffs", 0) for s in stats),
        "max_rss_mb": max(rss) if rss else None,
        # the largest chunk job's peak GPU memory, MiB (null on the CPU: core.jobs.peak_gpu_memory)
        **{k: v for k, v in peak_gpu_memory(stats).items() if k in PEAK_GPU_KEYS},
        "gpu_hours": costs["gpu_hours"],  # killed attempts' CUDA time included (core.jobs.job_costs)
        "earlier_attempts": costs["earlier_attempts"],
        "earlier_attempt_seconds": costs["earlier_attempt_seconds"],
        # what the cost per record divides by: a resumed job's earlier rows where their
        # attempts' time is in the GPU-hours (embed.report.chunk_totals)
        "records_paid": totals["paid"],
        "dim": verification["dim"],
        "dtype": verification["dtype"],
        "devices": costs["devices"],
    }
    if reference is None:
        out["agreement"] = None
        out["agreement_reason"] = "no reference: this point loads another model than the main run"
    else:
        out["agreement"] = {**agreement(npy, ids, *reference), "reference": logical_path(reference[0])}
    return out
