"""What a sweep cost, each job counted once.

A run's `wall_time_s` and `gpu_hours` (the runs table) count every job whose output it
read, so that points stay comparable; but points can share jobs (a retrieval sweep's
points read one embedding set when their embedding settings agree, or the main run's),
and summing the table over points counts those more than once. `sweep_cost` counts
each job once, by its benchmark file, and says where the jobs came from:

    sweep     the sweep's own jobs (benchmarks/sweeps/<folder>/...)
    shared    embeddings shared between sweeps (benchmarks/sweeps/_embeddings/...)
    main_run  jobs of the main run whose outputs the sweep read and is charged for (any
              other benchmark: a retrieval sweep's embed, merge and embed_queries jobs
              when its embedding settings are the main run's)

A run is charged its own jobs and, for retrieval, the embedding jobs it reads; the
inputs every point shares as they are (split chunks, token shards, the tokenizer) are
charged to none.

A job's GPU-hours count the killed attempts before its last, as a stage's report counts
them (core.jobs.earlier_attempt_costs: CUDA seconds from their records in the parts
folder, a lower bound, x the GPUs the job held, as its last attempt's seconds are); `earlier_attempts`, `earlier_attempt_seconds` and
`earlier_attempt_gpu_hours` say how much of the total that was. Their seconds are not in
`wall_time_s`, which stays the benchmarks' (the last attempts').

A training job resumed from its checkpoint (after a kill, or a failed attempt retried)
writes no attempt records: its GPU-hours add the training seconds of the attempts before
its last, as make status counts them (core.jobs.earlier_train_seconds: its metrics'
train_seconds_total less the last attempt's wall_seconds, a lower bound), x the GPUs it
held. They are not in the `earlier_attempt_*` figures, which count attempt records.

An embed job records its GPU-hours, one GPU a chunk job, and the records they paid for,
but no price: the collection counts every GPU a chunk job held, in the record's
`gpu_hours` too, and prices those (`with_cost`, at `report.gpu_hour_price` in
`report.currency`, its `Price`: params of the collections of PRICED_STAGES' sweeps
only), so that a changed price or currency reruns the collection, in seconds, and not
the jobs, each of which reads two sets of vectors. Every figure in money it writes says
its currency: the tables' `currency` column and the cost metrics' headers and axes
(`money_label`), and `best.json` and `cost.json` (which then prices the sweep's
GPU-hours too).

    cost = sweep_cost([[JobCost("benchmarks/sweeps/s/p1/seed=0/train.tsv", 12.0, 0.0033)], ...], "s")
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardflow.core.files import read_json
from shardflow.core.jobs import (
    earlier_attempt_costs,
    finished_job_gpu_hours,
    priced,
    read_benchmark,
)
from shardflow.sweep.shared import SHARED_FOLDER

SHARED_PREFIX = f"benchmarks/sweeps/{SHARED_FOLDER}/"
ORIGINS = ("sweep", "shared", "main_run")
FIGURES = ("seconds", "gpu_hours", "earlier_attempts", "earlier_attempt_seconds", "earlier_attempt_gpu_hours")
# The stages whose jobs' records leave their cost to the collection, and the metrics
# with_cost adds to each of their records (names a sweep may rank by, as the jobs wrote
# them before: shardflow.sweep.metrics).
PRICED_STAGES = ("embed",)
COST_METRICS = ("estimated_cost", "estimated_cost_per_million_records", "gpu_hour_price")


@dataclass(frozen=True)
class Price:
    """What a priced sweep's collection (PRICED_STAGES) prices GPU-hours at:
    `report.gpu_hour_price`, in `report.currency` (both its params, rules/common.smk
    sweep_price)."""

    gpu_hour_price: float
    currency: str


def metric_currency(metric: str, currency: str | None) -> str | None:
    """The currency a sweep's `metric` is in: `currency` for a cost metric (COST_METRICS,
    the ones the collection prices), else None."""
    return currency if metric in COST_METRICS else None


def money_label(metric: str, currency: str | None) -> str:
    """`metric` as a table's header or a figure's axis names it: a cost metric with its
    currency ("estimated_cost (EUR)"), any other as it is."""
    unit = metric_currency(metric, currency)
    return f"{metric} ({unit})" if unit else metric


@dataclass(frozen=True)
class JobCost:
    """One job a run read: its benchmark file, its seconds and its GPU-hours, the killed
    attempts before its last included (how many, their seconds and GPU-hours)."""

    benchmark: str
    seconds: float
    gpu_hours: float = 0.0
    earlier_attempts: int = 0
    earlier_attempt_seconds: float = 0.0
    earlier_attempt_gpu_hours: float = 0.0

    def figures(self) -> tuple[float, ...]:
        """What it adds to a total, in FIGURES' order (a missing, NaN, figure counts as nothing)."""
        return tuple(_figure(getattr(self, name)) for name in FIGURES)


def origin(benchmark: str, folder: str) -> str:
    """'sweep', 'shared' or 'main_run' for a job's benchmark path: relative to the
    workdir, or where a storage plugin keeps its local copy (.snakemake/storage/s3/
    <bucket>/<prefix>/benchmarks/...)."""
    path = "/" + benchmark.replace("\\", "/")
    if f"/benchmarks/sweeps/{folder}/" in path:
        return "sweep"
    if f"/{SHARED_PREFIX}" in path:
        return "shared"
    return "main_run"


def _figure(value: float) -> float:
    """A job's seconds or GPU-hours for a sum: a missing (NaN) figure counts as nothing."""
    return 0.0 if math.isnan(value) else value


def _total(jobs: Iterable[JobCost]) -> dict:
    jobs = list(jobs)

    def summed(name: str) -> float:
        return sum((_figure(getattr(j, name)) for j in jobs), 0.0)

    return {
        "jobs": len(jobs), "wall_time_s": round(summed("seconds"), 3), "gpu_hours": round(summed("gpu_hours"), 6),
        # Of those GPU-hours, the killed attempts' (core.jobs.earlier_attempt_costs).
        "earlier_attempts": int(summed("earlier_attempts")),
        "earlier_attempt_seconds": round(summed("earlier_attempt_seconds"), 3),
        "earlier_attempt_gpu_hours": round(summed("earlier_attempt_gpu_hours"), 6),
    }


def sweep_cost(runs: Iterable[Iterable[JobCost]], folder: str, price: Price | None = None) -> dict:
    """The sweep's total over its distinct jobs, by origin, next to the sum over runs;
    with a `price` (a sweep of PRICED_STAGES), also what those GPU-hours cost
    (`estimated_cost`, core.jobs.priced), at which `gpu_hour_price`, in which `currency`.

    A benchmark file read by several runs must carry the same figures in each (it is one
    file); a disagreement is a bug in the caller and raises ValueError."""
    seen: dict[str, JobCost] = {}
    read: list[JobCost] = []
    for jobs in runs:
        for job in jobs:
            read.append(job)
            known = seen.setdefault(job.benchmark, job)
            if known.figures() != job.figures():
                raise ValueError(f"{job.benchmark}: read twice with different figures ({known} != {job})")
    by_origin = {name: _total(j for j in seen.values() if origin(j.benchmark, folder) == name) for name in ORIGINS}
    summed = _total(read)  # what summing the runs table gives: shared jobs once per run that read them
    total = _total(seen.values())
    money = {}
    if price is not None:
        cost = priced(total["gpu_hours"], price.gpu_hour_price)["estimated_cost"]
        money = {"estimated_cost": round(cost, 6), "gpu_hour_price": price.gpu_hour_price, "currency": price.currency}
    return {
        **total,
        **money,
        "by_origin": by_origin,
        "summed_over_runs": {"wall_time_s": summed["wall_time_s"], "gpu_hours": summed["gpu_hours"]},
    }


@dataclass(frozen=True)
class JobRecord:
    """One sweep job's metrics and the jobs whose outputs it read (its own included)."""

    point: str
    seed: int
    metrics: dict[str, Any]
    costs: tuple[JobCost, ...]

    @property
    def wall_time_s(self) -> float:
        return sum(c.seconds for c in self.costs)

    @property
    def gpu_hours(self) -> float:
        return sum(c.gpu_hours for c in self.costs)


def with_cost(metrics: Mapping[str, Any], gpu_hour_price: float, gpus: int = 1) -> dict[str, Any]:
    """An embed job's metrics record with its cost at `gpu_hour_price` (COST_METRICS),
    priced as the embedding report prices a run (core.jobs.priced): its `gpu_hours` x
    `gpus`, the GPUs its rule gave each chunk job (resources.embed.gpu), which the job
    counts one a chunk job (shardflow.embed.measure: their stats name none), over the
    `records_paid` it recorded. The record's `gpu_hours` become those GPU-hours, the ones
    its cost is priced from; with `gpus` 1, the numbers the job wrote itself before.
    Raises KeyError where the record has neither (written before the jobs left the cost
    to the collection)."""
    gpu_hours = metrics["gpu_hours"] * gpus
    return {
        **metrics,
        "gpu_hours": gpu_hours,
        **priced(gpu_hours, gpu_hour_price, metrics["records_paid"]),
        "gpu_hour_price": gpu_hour_price,
    }


def _json_object(path: str | os.PathLike) -> dict:
    """A job's metrics or stats record. The collection reads every job's after all of
    them ran: a file cut short or holding another JSON value is a ValueError naming it
    (core.files.read_json: the file and line), as a stage's merge names a stats file."""
    record = read_json(path)
    if not isinstance(record, dict):
        raise ValueError(f"{os.fspath(path)}: a JSON {type(record).__name__}, not an object (a job's record)")
    return record


def read_job_records(shapes: Sequence[tuple], metrics: Sequence[str], stats: Sequence[str],
                     benchmarks: Sequence[str], price: Price | None = None) -> list[JobRecord]:
    """The collecting rule's inputs, read back per job.

    `shapes`: per job (point, seed, number of stats files, number of benchmarks, the GPUs
    of each stats file's job), in the order of the inputs (rules/common.smk,
    sweep_job_shapes): each job's metrics record, its stats files, then its benchmarks,
    the first of which pair with the stats files. The GPUs are its rule's
    (resources.<rule>.gpu, plan.job_gpus), for stats that name none (every job's but
    train's, whose world_size does); a shape without them counts one each.
    GPU-hours: a job whose own stats say it ran on CUDA, its seconds x the GPUs it held
    (core.jobs.last_attempt_gpu_hours), a resumed train job's seconds with the training
    of its attempts before (core.jobs.earlier_train_seconds, as make status counts
    them), and the CUDA seconds of the killed attempts its stats record, x those GPUs
    too, as a stage's report counts them (core.jobs.earlier_attempt_costs). With a `price` (a sweep of PRICED_STAGES) each
    metrics record gets its cost, and its gpu_hours that cost is priced from (with_cost, x
    its chunk jobs' GPUs: its stats files are theirs); a record without what that needs
    raises ValueError naming its file."""
    stats_files, bench_files = iter(stats), iter(benchmarks)
    records = []
    for (point, seed, n_stats, n_bench, *held), metrics_path in zip(shapes, metrics, strict=True):
        gpus = tuple(held[0]) if held else (1,) * n_stats
        if len(gpus) != n_stats:
            raise ValueError(f"job {point} seed {seed}: {n_stats} stats files but GPUs for {len(gpus)}")
        record = _json_object(metrics_path)
        if price is not None:
            try:
                record = with_cost(record, price.gpu_hour_price, max(gpus, default=1))
            except KeyError as exc:
                raise ValueError(
                    f"{metrics_path} has no {exc}: written before the embed sweep's collection priced its jobs; "
                    "snakemake --forcerun sweep_embed_metrics writes it again"
                ) from exc
        costs = []
        for i in range(n_bench):
            path = str(next(bench_files))
            seconds = float(read_benchmark(path).get("s", 0.0))
            job_stats: dict = {}  # none paired: no GPU time known
            held_gpus = 1
            if i < n_stats:
                job_stats, held_gpus = _json_object(next(stats_files)), gpus[i]
            gpu_hours = finished_job_gpu_hours(job_stats, seconds, held_gpus)
            earlier = earlier_attempt_costs([job_stats], held_gpus)
            costs.append(JobCost(path, seconds, gpu_hours + earlier["earlier_attempt_gpu_hours"],
                                 earlier["earlier_attempts"], earlier["earlier_attempt_seconds"],
                                 earlier["earlier_attempt_gpu_hours"]))
        records.append(JobRecord(point, int(seed), record, tuple(costs)))
    return records
