"""The summarisation stage's figures and machine-readable summary.

From the job table merge_summaries wrote (per-chunk stats and Snakemake
benchmarks), the split manifest and the merged summaries: records, rejects, input
and summary lengths, compression, wall time, throughput, GPU-hours and cost, and the
largest job's peak GPU memory.

Input and summary lengths are totals over the merged summaries, one record per
document: an abstractive job's stats count only the texts it generated itself (the
numerators of its rates), not those its resume parts held.
"""

from __future__ import annotations

import json
import logging
from array import array
from dataclasses import dataclass

import numpy as np

from shardflow.core.atomic import write_json
from shardflow.core.fields import check_field_types
from shardflow.core.figures import plot_throughput, plot_timeline, pyplot, save_figure
from shardflow.core.files import read_json
from shardflow.core.jobs import items_computed, job_costs, peak_gpu_memory, priced, read_job_table
from shardflow.summarise.records import iter_summaries

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SummaryReportParams:
    gpu_hour_price: float = 2.5
    currency: str = "USD"
    # The GPUs each summarise job held (resources.summarise.gpu, plan.job_gpus: the rule's
    # param), which its stats do not record: its GPU-hours and cost count them all.
    gpus: int = 1

    def __post_init__(self) -> None:
        # A price of '2.5' or None was kept, and the report stopped in the cost's arithmetic
        # with Python's bare TypeError; True priced the run at 1 an hour, a currency of None
        # went into summary.json as null.
        check_field_types(self)


def run_summary(
    stats: list[dict], benches: list[dict], manifest: dict, params: SummaryReportParams, lengths: np.ndarray
) -> dict:
    """`lengths`: each document's (input, summary) tokens (`document_lengths`): a model's
    tokens for abstractive jobs, whitespace-separated words for lead and extractive
    (`length_unit`; their stats name their method)."""
    costs = job_costs(stats, benches, params.gpus)
    words = bool(stats) and all(s.get("method") in ("lead", "extractive") for s in stats)
    records = sum(s["items"] for s in stats)
    # A job resumed from an earlier attempt's parts summarised only the rest: its time,
    # and so the rate, cover what it summarised (core.jobs.items_computed).
    computed = sum(items_computed(s) for s in stats)
    inp, out = (int(total) for total in lengths.sum(axis=0))
    return {
        "records": records,
        "records_resumed": records - computed,
        "rejected_records": manifest.get("rejected_records", 0),
        "chunks": len(stats),
        "input_tokens": inp,
        "summary_tokens": out,
        "compression_ratio": round(out / max(inp, 1), 6),
        "length_unit": "words" if words else "tokens",
        "truncated_inputs": sum(s.get("truncated", 0) for s in stats),
        "summarise_wall_time_s": round(costs["wall_time_s"], 3),
        "summarise_job_seconds": round(costs["job_seconds"], 3),
        "items_per_s": round(computed / costs["wall_time_s"], 3),
        "devices": costs["devices"],
        "gpu_hours": round(costs["gpu_hours"], 6),
        "estimated_cost": round(priced(costs["gpu_hours"], params.gpu_hour_price)["estimated_cost"], 6),
        "currency": params.currency,
        # Killed attempts before the jobs' last, counted in the GPU-hours and cost (core.jobs.job_costs).
        "earlier_attempts": costs["earlier_attempts"],
        "earlier_attempt_seconds": round(costs["earlier_attempt_seconds"], 3),
        "earlier_attempt_gpu_hours": round(costs["earlier_attempt_gpu_hours"], 6),
        "earlier_attempt_devices": {d: round(t, 3) for d, t in costs["earlier_attempt_devices"].items()},
        # The largest job's peak GPU memory and its chunk (core.jobs.peak_gpu_memory; null on the CPU).
        **peak_gpu_memory(stats),
    }


def document_lengths(summaries_path: str) -> np.ndarray:
    """Each document's (input, summary) tokens (or words, see `records`), [n, 2] int64."""
    # 16 bytes a document, the array's own memory: a list of Python tuples held about
    # 130 (13 GB for 100M summaries) before the array was made from it.
    flat = array("q")
    for r in iter_summaries(summaries_path):
        flat.append(r["input_tokens"])
        flat.append(r["output_tokens"])
    return np.frombuffer(flat, dtype=np.int64).reshape(len(flat) // 2, 2)


def plot_lengths(lengths: np.ndarray, path: str) -> None:
    """Input and summary lengths per document (`document_lengths`)."""
    lengths = lengths.astype(float)
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    if len(lengths):
        a.hist(lengths[:, 0], bins=40, alpha=0.7, label="input")
        a.hist(lengths[:, 1], bins=40, alpha=0.7, label="summary")
        b.hist(lengths[:, 1] / np.maximum(lengths[:, 0], 1), bins=40, color="#5a9e6f")
    a.set_xlabel("length")
    a.set_ylabel("documents")
    a.legend()
    b.set_xlabel("summary length / input length")
    b.set_title("compression per document")
    save_figure(fig, path)


def build_report(jobs_path: str, manifest_path: str, summaries_path: str, outputs: dict, params: SummaryReportParams) -> dict:
    jobs = read_job_table(jobs_path)
    stats, benches = [j["stats"] for j in jobs], [j["benchmark"] for j in jobs]
    manifest = read_json(manifest_path)
    plot_throughput(stats, outputs["throughput"], stage="Summarisation")
    plot_timeline(stats, benches, outputs["timeline"], job="summarise")
    lengths = document_lengths(summaries_path)
    plot_lengths(lengths, outputs["lengths"])
    summary = run_summary(stats, benches, manifest, params, lengths)
    write_json(outputs["summary"], summary)
    log.info("summary: %s", json.dumps(summary))
    return summary
