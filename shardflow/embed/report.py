"""Figures and the machine-readable summary of an embedding run.

Inputs are the small records the pipeline already writes (the job table merge
collects from the per-chunk stats and Snakemake benchmarks, the verification JSON
with its norm histogram) plus an even sample of the merged matrix for the 2-D map, so the
report costs the same for 3 thousand or 30 million rows.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import numpy as np

from shardflow.core.atomic import write_json
from shardflow.core.fields import check_field_types, whole_floats_as_ints
from shardflow.core.figures import plot_throughput, plot_timeline, pyplot, save_figure
from shardflow.core.files import read_json
from shardflow.core.jobs import items_computed, job_costs, peak_gpu_memory, priced, read_job_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportParams:
    map_method: str = "pca"  # pca | umap
    map_points: int = 5000
    gpu_hour_price: float = 2.5
    currency: str = "USD"
    seed: int = 0
    # The GPUs each embed job held (resources.embed.gpu, plan.job_gpus: the rule's param),
    # which its stats do not record: its GPU-hours and cost count them all.
    gpus: int = 1

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # 5000.0 (JSON Schema's "integer" takes it) is 5000
        check_field_types(self)


def plot_norms(verification: dict, path: str) -> None:
    plt = pyplot()
    lo, hi, bins = verification["norm_histogram"]["edges"]
    counts = np.asarray(verification["norm_histogram"]["counts"])
    edges = np.linspace(lo, hi, int(bins) + 1)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(edges[:-1] - 1.0, counts, width=np.diff(edges), align="edge", color="#5a9e4b")
    ax.set_xlabel("L2 norm - 1")
    ax.set_ylabel("rows")
    ax.set_title(f"Embedding norms (min {verification['norm_min']:.7f}, max {verification['norm_max']:.7f})")
    save_figure(fig, path)


def sample_rows(npy_path: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """An even stride of at most n rows from a memory-mapped matrix."""
    emb = np.load(npy_path, mmap_mode="r")
    idx = np.unique(np.linspace(0, emb.shape[0] - 1, num=min(n, emb.shape[0])).astype(np.int64))
    return idx, np.asarray(emb[idx], dtype=np.float32)


# UMAP starts from a spectral layout of n_components + 1 eigenvectors, which needs more
# points than that: fewer are mapped by PCA (the map's title says which ran).
UMAP_MIN_POINTS = 4


def map_method(method: str, n_points: int) -> str:
    """The projection that runs for `report.map` on n points."""
    return "pca" if method == "umap" and n_points < UMAP_MIN_POINTS else method


def project_2d(x: np.ndarray, method: str, seed: int) -> np.ndarray:
    if len(x) < 3:
        return np.zeros((len(x), 2), dtype=np.float32)
    if map_method(method, len(x)) == "umap":
        try:
            import umap
        except ImportError as exc:
            raise RuntimeError("report.map is 'umap' but umap-learn is not installed") from exc
        return umap.UMAP(n_components=2, random_state=seed).fit_transform(x)
    # float32 holds the vectors but not always their sums: the mean adds up to len(x) rows,
    # and a row's projection is up to its norm (a centred value, up to twice the largest,
    # times sqrt(dim)). Vectors that large (over about 3e34 in a 5,000-row sample; an
    # unnormalised model's pass verify, which judges norms in float64) are mapped in
    # float64: in float32 the SVD did not converge, or points went to inf, off the map.
    # Any other sample keeps float32, so its map stays as it was, byte for byte.
    if np.abs(x).max() > np.finfo(np.float32).max / (2 * max(len(x), np.sqrt(x.shape[1]))):
        x = x.astype(np.float64)
    centred = x - x.mean(axis=0, keepdims=True)
    # PCA by SVD: deterministic up to sign; fix the sign by the largest loading.
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    comps = vt[:2]
    signs = np.sign(comps[np.arange(2), np.abs(comps).argmax(axis=1)])
    return centred @ (comps * signs[:, None]).T


def plot_map(npy_path: str, path: str, params: ReportParams) -> int:
    plt = pyplot()
    idx, x = sample_rows(npy_path, params.map_points)
    xy = project_2d(x, params.map_method, params.seed)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.scatter(xy[:, 0], xy[:, 1], s=float(np.clip(2000 / max(len(idx), 1), 2, 16)), c=idx, cmap="viridis", alpha=0.7, linewidths=0)
    ran = map_method(params.map_method, len(idx))
    note = f" ({params.map_method.upper()} needs {UMAP_MIN_POINTS})" if ran != params.map_method else ""
    ax.set_title(f"{ran.upper()} map of {len(idx)} embeddings{note} (colour: row)")
    ax.set_xticks([])
    ax.set_yticks([])
    save_figure(fig, path)
    return len(idx)


def chunk_totals(stats: list[dict], benches: list[dict], gpus: int = 1) -> dict:
    """What a run's chunk jobs did (the report's summary and an embed sweep job's
    metrics): `records` out, `computed` by the jobs' final attempts, `tokens` of those,
    `costs` (core.jobs.job_costs, each job on CUDA x its `gpus`: an embed sweep job's
    metrics count one, and its collection multiplies, shardflow.sweep.cost) and `paid`,
    the records whose computing was paid for, over which core.jobs.priced gives the cost
    per million records.

    A job resumed from an earlier attempt's parts computed only the rest: its time, and so
    the rates, cover what it computed (the earlier attempt's tokens are not known). The
    cost counts the killed attempts' time where their records in the resume folder say
    it (core.parts; a lower bound), and then their rows are in the cost per record; a
    job resumed from attempts without records (from before them) counts only its own
    rows (counting the others would make the run look cheaper)."""
    return {
        "records": sum(s["items"] for s in stats),
        "computed": sum(items_computed(s) for s in stats),
        "paid": sum(s["items"] if s.get("earlier_attempts") else items_computed(s) for s in stats),
        "tokens": sum(s["tokens"] for s in stats),
        "costs": job_costs(stats, benches, gpus),
    }


def run_summary(stats: list[dict], benches: list[dict], manifest: dict, verification: dict, params: ReportParams) -> dict:
    totals = chunk_totals(stats, benches, params.gpus)
    costs, records, computed, tokens = totals["costs"], totals["records"], totals["computed"], totals["tokens"]
    wall, job_seconds, gpu_hours = costs["wall_time_s"], costs["job_seconds"], costs["gpu_hours"]
    price = priced(gpu_hours, params.gpu_hour_price, totals["paid"])
    per_million = price["estimated_cost_per_million_records"]
    return {
        "records": records,
        "records_resumed": records - computed,
        "rejected_records": manifest.get("rejected_records", 0),
        "chunks": len(stats),
        "tokens": tokens,  # of the records computed by the jobs' final attempts
        "texts_at_max_length": sum(s.get("at_max_length", 0) for s in stats),  # truncated, likewise
        "embed_wall_time_s": round(wall, 3),
        "embed_job_seconds": round(job_seconds, 3),
        "items_per_s": round(computed / wall, 3),
        "tokens_per_s": round(tokens / wall, 3),
        "devices": costs["devices"],
        "gpu_hours": round(gpu_hours, 6),
        "device_hours": round(costs["device_hours"], 6),
        "gpu_hour_price": params.gpu_hour_price,
        "currency": params.currency,
        # GPU-hours are embed jobs that ran on CUDA (killed attempts included); a CPU-only run costs 0 here.
        "estimated_cost": round(price["estimated_cost"], 6),
        "estimated_cost_per_million_records": None if per_million is None else round(per_million, 6),
        # Killed attempts before the jobs' last, counted in the GPU-hours and cost (core.jobs.job_costs).
        "earlier_attempts": costs["earlier_attempts"],
        "earlier_attempt_seconds": round(costs["earlier_attempt_seconds"], 3),
        "earlier_attempt_gpu_hours": round(costs["earlier_attempt_gpu_hours"], 6),
        "earlier_attempt_devices": {d: round(t, 3) for d, t in costs["earlier_attempt_devices"].items()},
        # The largest job's peak GPU memory and its chunk (core.jobs.peak_gpu_memory; null on the CPU).
        **peak_gpu_memory(stats),
        "verification_ok": verification["ok"],
        "dim": verification["dim"],
        "dtype": verification["dtype"],
    }


def build_report(
    jobs_path: str,
    manifest_path: str,
    verification_path: str,
    npy_path: str,
    outputs: dict,
    params: ReportParams,
) -> dict:
    jobs = read_job_table(jobs_path)
    stats = [j["stats"] for j in jobs]
    benches = [j["benchmark"] for j in jobs]
    manifest = read_json(manifest_path)
    verification = read_json(verification_path)
    plot_throughput(stats, outputs["throughput"])
    plot_timeline(stats, benches, outputs["timeline"])
    plot_norms(verification, outputs["norms"])
    plot_map(npy_path, outputs["map"], params)
    summary = run_summary(stats, benches, manifest, verification, params)
    write_json(outputs["summary"], summary)
    log.info("summary: %s", json.dumps(summary))
    return summary
