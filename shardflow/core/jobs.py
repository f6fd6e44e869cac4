"""The record of a stage's chunk jobs: their statistics and Snakemake benchmarks.

Each chunk job writes a small stats JSON; Snakemake writes a benchmark TSV for it.
The stage's merge collects both into one table (`jobs.json`), so that the report,
verification and provenance read one file instead of two per chunk: the DAG keeps
one edge per chunk job, into merge, whatever the chunk count.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field

from shardflow.core.atomic import write_json
from shardflow.core.files import read_json
from shardflow.core.s3 import logical_path

TIMING_KEYS = ("s", "max_rss", "cpu_time")
# A GPU job's peak GPU memory in its stats, MiB (core.devices.peak_memory; null on the CPU).
PEAK_GPU_KEYS = ("peak_gpu_mem_mib", "peak_gpu_mem_reserved_mib")


@dataclass
class EngineCounters:
    """What every batched engine counts for a chunk job's stats record (the embedder's
    EncodeStats and the generator's SummariseStats add their own items and tokens)."""

    batches: int = 0
    oom_backoffs: int = 0
    resumed_parts: int = 0
    parts: int = 0
    seconds: float = 0.0
    start_unix: float = 0.0
    end_unix: float = 0.0
    # Killed attempts at this job before the one that finished it, from their records in
    # the resume folder (core.parts.attempt_totals): how many, the seconds from each one's
    # start to its last saved part (a lower bound), and those seconds by device.
    earlier_attempts: int = 0
    earlier_attempt_seconds: float = 0.0
    earlier_attempt_devices: dict[str, float] = field(default_factory=dict)

    def per_second(self, count: float) -> float:
        return count / max(self.seconds, 1e-9)


# What a chunk job's last attempt computed itself, by stage (EngineCounters' subclasses,
# and the lead and extractive summarisers' record); the rest of its `items` came from the resume
# parts of an earlier, killed attempt, whose time the job's `seconds` do not hold.
COMPUTED_ITEMS_KEYS = ("items_embedded", "items_generated")


def items_computed(stats: dict) -> int:
    """The records a chunk job's last attempt computed (`COMPUTED_ITEMS_KEYS`): what its
    `seconds` measure, and so what a rate counts. A record with none of those keys (one
    from before the key, as lead and extractive records until 2026-11-28) counts all of
    its `items`, as a rate always had."""
    for key in COMPUTED_ITEMS_KEYS:
        if key in stats:
            return stats[key]
    return stats.get("items", 0)


def read_benchmark(path: str | os.PathLike) -> dict:
    """One Snakemake benchmark TSV (the last repeat) as floats where possible.

    Snakemake writes it in place, not through a temporary: a run killed while writing it
    leaves it cut short, a power loss may leave zeros. A file the csv module cannot read
    (NUL bytes, which Python 3.10's refuses), or whose time `s` is no finite number of
    seconds (every reader adds it up), is a ValueError naming it."""
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except csv.Error as exc:
        raise ValueError(f"{path}: not a benchmark table ({exc})") from exc
    if not rows:
        raise ValueError(f"{path}: empty benchmark file")
    out = {}
    for k, v in rows[-1].items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            out[k] = v
    if "s" in out and not (isinstance(out["s"], float) and math.isfinite(out["s"])):
        shown = repr(out["s"])  # a row of zeros may be long: its start is enough
        raise ValueError(f"{path}: s is {shown[:40]}{'...' if len(shown) > 40 else ''}, not a number of seconds")
    return out


def write_job_table(path: str | os.PathLike, stats_paths: list[str], bench_paths: list[str]) -> list[dict]:
    """One row per chunk job, in chunk order: {"stats", "benchmark", "benchmark_path"}."""
    if len(stats_paths) != len(bench_paths):
        raise ValueError(f"{len(stats_paths)} stats files but {len(bench_paths)} benchmark files")
    rows = []
    for stats_path, bench_path in zip(stats_paths, bench_paths, strict=True):
        stats = read_json(stats_path)  # a stats file cut short names itself, among a thousand
        rows.append({"stats": stats, "benchmark": read_benchmark(bench_path), "benchmark_path": logical_path(bench_path)})
    write_json(path, {"format": "shardflow.jobs/1", "jobs": rows})
    return rows


def read_job_table(path: str | os.PathLike) -> list[dict]:
    """The job rows of a merge's job table (`jobs.json`: {"jobs": [...]}); anything else
    is a ValueError naming the file (a bare KeyError named neither it nor the key)."""
    table = read_json(path)
    jobs = table.get("jobs") if isinstance(table, dict) else None
    if not isinstance(jobs, list):
        raise ValueError(f"{os.fspath(path)}: not a job table (an object with a 'jobs' list)")
    return jobs


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Seconds during which at least one of the (start, end) intervals ran: overlaps
    counted once, gaps between them not at all."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def gpus_held(stats: dict, gpus: int = 1) -> int:
    """The GPUs one job held, from its stats: `gpus`, else `world_size` (a training run's
    processes, one per GPU), else `gpus`, the GPUs its rule gave each job
    (resources.<rule>.gpu, shardflow.workflow.plan.job_gpus): the embed, embed_queries,
    summarise and retrieval_evaluate jobs' stats record none, and the cluster bills every
    GPU a job holds. The stage reports and a sweep's collection get it through their
    params; make status gives it too (shardflow.workflow.status.finish)."""
    return int(stats.get("gpus", stats.get("world_size", gpus)))


def _on_cuda(device: object) -> bool:
    return str(device).startswith("cuda")


def last_attempt_gpu_hours(stats: dict, seconds: float, gpus: int = 1) -> float:
    """The GPU-hours of a job's last attempt: its `seconds` x the GPUs it held
    (`gpus_held`; `gpus`: its rule's, where its stats name none) where its stats say it
    ran on CUDA, else none. Its killed attempts' are `earlier_attempt_costs`'
    `earlier_attempt_gpu_hours`, counted per GPU alike."""
    return seconds * gpus_held(stats, gpus) / 3600 if _on_cuda(stats.get("device", "")) else 0.0


def earlier_train_seconds(metrics: dict) -> float:
    """The training seconds of a finished train job's attempts before its last (killed, or
    failed and retried), which resumed from their checkpoint: its metrics'
    train_seconds_total (every attempt's training, through the checkpoint the last one
    resumed from) less the last attempt's wall_seconds, which its benchmark counts. A
    lower bound, as a killed chunk attempt's: their start-up and the time after their
    last checkpoint are lost. 0 for any other record, and for a run from scratch (its
    total is within its own wall time).

    A train job writes no attempt records (`earlier_attempt_costs`), so this is the one
    count of its earlier attempts: `finished_job_gpu_hours` adds these seconds to the
    benchmark's before multiplying them by the GPUs the job held."""
    if "train_seconds_total" not in metrics or "wall_seconds" not in metrics:
        return 0.0
    return max(0.0, float(metrics["train_seconds_total"]) - float(metrics["wall_seconds"]))


def finished_job_gpu_hours(stats: dict, benchmark_seconds: float, gpus: int = 1) -> float:
    """The GPU-hours of a finished job as make status, a sweep's cost.json and the first
    page count them: its benchmark's seconds (start-up included) plus the training of a
    resumed train job's attempts before (`earlier_train_seconds`), on the GPUs it held
    (`last_attempt_gpu_hours`). A chunk job's killed attempts are `earlier_attempt_costs`'."""
    return last_attempt_gpu_hours(stats, benchmark_seconds + earlier_train_seconds(stats), gpus)


def earlier_attempt_costs(stats: list[dict], gpus: int = 1) -> dict:
    """What the jobs' stats say of the killed attempts before each one's last
    (`earlier_attempts`, `earlier_attempt_devices`: core.parts.attempt_totals): how many
    (`earlier_attempts`), their seconds (`earlier_attempt_seconds`, a lower bound: from
    each one's start to its last saved part), those on CUDA in GPU-hours
    (`earlier_attempt_gpu_hours`: x the GPUs the job held, `gpus_held` with `gpus`, as its
    last attempt's are: a killed attempt of a two-GPU job held both) and the seconds by device
    (`earlier_attempt_devices`, wall seconds, not per GPU). Stats from before attempt
    records have none: all zero.

    The one count of them: `job_costs` (a stage's reports) and the sweep's cost.json
    (shardflow.sweep.cost, per job) both add these to their GPU-hours."""
    devices: dict[str, float] = {}
    gpu_seconds = 0.0
    for s in stats:
        for device, seconds in (s.get("earlier_attempt_devices") or {}).items():
            devices[str(device)] = devices.get(str(device), 0.0) + seconds
            if _on_cuda(device):
                gpu_seconds += seconds * gpus_held(s, gpus)
    return {
        "earlier_attempts": sum(s.get("earlier_attempts", 0) for s in stats),
        "earlier_attempt_seconds": sum(devices.values()),
        "earlier_attempt_gpu_hours": gpu_seconds / 3600,
        "earlier_attempt_devices": dict(sorted(devices.items())),
    }


def job_costs(stats: list[dict], benches: list[dict], gpus: int = 1) -> dict:
    """Wall time, job time and GPU-hours of a stage's chunk jobs (`priced` says what
    they cost); `gpus`: the GPUs the stage's rule gave each job (resources.<rule>.gpu,
    plan.job_gpus), which their stats do not record.

    The wall time is the time during which at least one job was at work (from each
    job's own start_time to end_time): a gap in which none was, such as while another
    stage's jobs ran on the same cores, does not count, so a stage's throughput is its
    own. A job's time is Snakemake's benchmark `s` (the whole job, model loading
    included), else its own `seconds`; GPU-hours count the jobs that ran on CUDA, each
    x the GPUs it held (`last_attempt_gpu_hours`).

    GPU-hours and device-hours also count the killed attempts before each job's last
    (`earlier_attempt_devices` in its stats, core.parts.attempt_totals; the CUDA ones in
    GPU-hours): a preempted spot pod's time is paid for. Their seconds are a lower bound
    (from each one's start to its last saved part) and are not in the wall time or
    `job_seconds`, which stay the last attempts' (the rates' time);
    `earlier_attempt_costs`' keys say how much was counted. Stats from before attempt
    records have none: nothing added.
    """
    if len(benches) != len(stats):
        # zip() would silently drop the unmatched jobs from the time and cost sums.
        raise ValueError(f"{len(stats)} per-chunk stats but {len(benches)} benchmark records")
    busy = busy_seconds([(s["start_time"], s["end_time"]) for s in stats])
    job_seconds = [b.get("s", s["seconds"]) for s, b in zip(stats, benches, strict=True)]
    final_gpu_hours = sum(last_attempt_gpu_hours(s, t, gpus) for s, t in zip(stats, job_seconds, strict=True))
    earlier = earlier_attempt_costs(stats, gpus)
    gpu_hours = final_gpu_hours + earlier["earlier_attempt_gpu_hours"]
    return {
        "wall_time_s": max(busy, 1e-9),
        "job_seconds": sum(job_seconds),
        "gpu_hours": gpu_hours,
        "device_hours": (sum(job_seconds) + earlier["earlier_attempt_seconds"]) / 3600,
        # The devices the rates ran on (the last attempts'); the killed attempts' are in
        # earlier_attempt_devices, with their seconds.
        "devices": sorted({str(s.get("device")) for s in stats}),
        **earlier,
    }


def peak_gpu_memory(stats: list[dict]) -> dict:
    """The largest peak GPU memory of a stage's jobs, from their stats (each job's own
    peak, core.devices.peak_memory): `peak_gpu_mem_mib` and `peak_gpu_mem_reserved_mib`,
    each the max over the jobs, in MiB; `peak_gpu_mem_chunk`, the chunk of the job with
    the largest allocated peak (its place in the table where its stats name none); and
    `peak_gpu_mem_unrecorded`, the jobs on CUDA whose stats hold no peak (written before
    jobs recorded one), which the max leaves out. The peaks are None where no job has
    one: every job ran on the CPU (a null peak: not on a GPU), or none recorded it."""
    recorded = [(i, s) for i, s in enumerate(stats) if s.get("peak_gpu_mem_mib") is not None]
    unrecorded = sum(1 for s in stats if "peak_gpu_mem_mib" not in s and _on_cuda(s.get("device", "")))
    if not recorded:
        return {"peak_gpu_mem_mib": None, "peak_gpu_mem_reserved_mib": None, "peak_gpu_mem_chunk": None,
                "peak_gpu_mem_unrecorded": unrecorded}
    i, top = max(recorded, key=lambda r: r[1]["peak_gpu_mem_mib"])
    reserved = [s["peak_gpu_mem_reserved_mib"] for _, s in recorded if s.get("peak_gpu_mem_reserved_mib") is not None]
    return {
        "peak_gpu_mem_mib": top["peak_gpu_mem_mib"],
        "peak_gpu_mem_reserved_mib": max(reserved) if reserved else None,
        "peak_gpu_mem_chunk": top.get("chunk", i),
        "peak_gpu_mem_unrecorded": unrecorded,
    }


def priced(gpu_hours: float, gpu_hour_price: float, records_paid: int | None = None) -> dict:
    """What `gpu_hours` cost at `gpu_hour_price` (`estimated_cost`), and per million of the
    `records_paid` whose computing that paid for (`estimated_cost_per_million_records`;
    None where none was, or none is given).

    The one pricing of GPU-hours: the stages' reports price job_costs' GPU-hours with it,
    and an embed sweep's collection the GPU-hours each job recorded (shardflow.sweep.cost.
    with_cost), so that a changed price reruns the collection, not the jobs."""
    cost = gpu_hours * gpu_hour_price
    return {
        "estimated_cost": cost,
        "estimated_cost_per_million_records": cost / records_paid * 1e6 if records_paid else None,
    }


def significant(x: float, digits: int = 2, grouped: bool = False) -> str:
    """`x` in fixed point to `digits` significant digits, trailing zeros dropped (0.0017,
    0.04, 10): never in the scientific notation `:.2g` gives small numbers (4e-05). A
    whole part past `digits` digits is kept whole (2083, not 2.08e+03); `grouped`: with
    thousands separators (17,906), as counts are printed for a person."""
    if not x or not math.isfinite(x):
        return f"{x:g}"
    text = f"{x:{',' if grouped else ''}.{max(0, digits - 1 - math.floor(math.log10(abs(x))))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def money(amount: float) -> str:
    """A cost to the cent; one that is not 0 but would print as 0.00 (under half a cent:
    a short GPU stage at a low price) to two significant digits, 0.0017, so that a GPU
    stage's cost never reads as the 0.00 of one on the CPU. make estimate, make status
    and the report's first page print their costs with it."""
    cents = f"{amount:.2f}"
    return significant(amount) if amount and float(cents) == 0 else cents


def timings(rows: list[dict]) -> dict:
    """{benchmark path: {s, max_rss, cpu_time}} of the table's jobs (for provenance)."""
    return {r["benchmark_path"]: {k: r["benchmark"].get(k) for k in TIMING_KEYS} for r in rows}
