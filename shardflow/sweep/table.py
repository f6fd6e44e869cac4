"""A sweep's results as tables: one row per run (point and seed), and per point over seeds.

runs     sweep, point, each varied parameter (its own typed column, named by its dotted
         key), seed, every numeric metric the runs wrote (for a retrieval sweep scored
         away from retrieval.relevance_level 1, `relevance_level`: each run's level),
         wall_time_s, gpu_hours, and where the collection priced them (an embed sweep:
         cost.Price) `currency`, the currency of its cost metrics (cost.COST_METRICS)
summary  per point: each parameter, n_seeds, <metric>_mean and <metric>_std (sample
         std, ddof=1: NaN with one seed) for every metric, wall_time_s_mean,
         gpu_hours_total, `currency` as in runs, and `best` (True on the best point of
         spec.best)

Both are written as Parquet and CSV, atomically.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from shardflow.core.atomic import atomic_path
from shardflow.sweep.paths import format_value, plain
from shardflow.sweep.spec import SweepError, SweepSpec

RUN_COLUMNS = ("sweep", "point", "seed", "wall_time_s", "gpu_hours")
# The currency of a priced sweep's cost metrics: a column of its tables, no metric.
CURRENCY = "currency"


@dataclass(frozen=True)
class RunResult:
    """What one job of a sweep produced."""

    point: str  # point id
    seed: int
    metrics: Mapping[str, float] = field(default_factory=dict)
    wall_time_s: float = math.nan
    gpu_hours: float = 0.0
    # Metrics computed on a ranking shallower than their k (beyond_depth): marked in the tables.
    beyond_depth: frozenset[str] = frozenset()


# A retrieval record's metrics at a k deeper than its ranking (retrieval.top_k 100 and
# all.recall_at_1000): computed on the hits there are, not the metric at k. The record
# lists them (shardflow.retrieval.pipeline.shallow_metrics); one written before it did
# is read from its top_k (the ranking's depth) and n_documents, as they are listed.
BEYOND_DEPTH = "beyond_ranking_depth"
_AT_K = re.compile(r"_at_(\d+)$")


def beyond_depth(metrics: Mapping[str, Any]) -> frozenset[str]:
    """The names (as flatten_metrics gives them) a job's record computed on a ranking
    shallower than their k; none for a record of another stage."""
    if BEYOND_DEPTH in metrics:
        return frozenset(metrics[BEYOND_DEPTH])
    depth, documents = metrics.get("top_k"), metrics.get("n_documents")
    if not isinstance(metrics.get("all"), Mapping) or not isinstance(depth, int) or not isinstance(documents, int):
        return frozenset()
    if depth >= documents:  # every document ranked: nothing deeper to find
        return frozenset()
    return frozenset(
        name for name in flatten_metrics(metrics) if (at := _AT_K.search(name)) and int(at.group(1)) > depth
    )


# A retrieval record's relevance level (retrieval.relevance_level, trec_eval's -l): written
# only where it is not 1 (shardflow.retrieval.pipeline.search_and_score), so a retrieval
# record without it was scored at 1.
RELEVANCE_LEVEL = "relevance_level"


def relevance_levels(spec: SweepSpec, results: Iterable[RunResult]) -> dict[str, tuple[int, ...]]:
    """{point: the relevance levels its runs were scored at, sorted} of a retrieval sweep
    some run of which was scored away from 1; empty where every run was scored at 1 (and
    for another stage), so those tables and figures are drawn as before the level existed.
    A sweep cannot vary the level (spec: it is shared by every job), but runs kept from
    before the config's level changed (`--touch`, `--rerun-triggers mtime`) can differ."""
    if spec.stage != "retrieval":
        return {}
    by_point: dict[str, set[int]] = {}
    for r in results:
        by_point.setdefault(r.point, set()).add(int(r.metrics.get(RELEVANCE_LEVEL, 1)))
    if all(levels == {1} for levels in by_point.values()):
        return {}
    return {pid: tuple(sorted(by_point[pid])) for pid in spec.ids if pid in by_point}


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a (nested) metrics record, nested keys joined with '.'. A null
    is a metric without a value (a diverged run's loss, mfu on the CPU): NaN, as its
    point has no mean then; a name the record does not hold at all is not there. A NaN
    or an infinity reads as a null: a training record from before metrics.json was strict
    JSON holds one for a diverged run's loss (null now), and an infinite best_val_loss in
    every seed would otherwise be the best mean, which best.json cannot hold. A record's
    `made_with` (what the job ran with, core.madewith: its threads, cuDNN version) holds
    no metric and is passed over."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if not prefix and key == "made_with":
            continue
        name = f"{prefix}{key}"
        value = plain(value)
        if isinstance(value, Mapping):
            out.update(flatten_metrics(value, f"{name}."))
        elif value is None:
            out[name] = math.nan
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value) if math.isfinite(value) else math.nan
    return out


def run_result(point: str, seed: int, metrics: Mapping[str, Any], benchmark: Mapping[str, Any] | None = None,
               gpus: int = 0, wall_time_s: float | None = None) -> RunResult:
    """A RunResult from a job's metrics record and its Snakemake benchmark (`s`: the
    whole job's seconds); GPU-hours are that time x the GPUs the job held."""
    if wall_time_s is None:
        wall_time_s = float(benchmark["s"]) if benchmark and "s" in benchmark else math.nan
    gpu_hours = wall_time_s * gpus / 3600 if gpus and not math.isnan(wall_time_s) else 0.0
    return RunResult(point, int(seed), flatten_metrics(metrics), float(wall_time_s), gpu_hours, beyond_depth(metrics))


def _typed(values: list[Any]) -> pd.Series:
    """One parameter column in one type; a column mixing types holds their id spellings."""
    present = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in present):
        return pd.Series(values, dtype="boolean")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pd.Series(values, dtype="Int64")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pd.Series([math.nan if v is None else float(v) for v in values], dtype="float64")
    if all(isinstance(v, str) for v in present):
        return pd.Series(values, dtype="string")
    return pd.Series([None if v is None else format_value(v) for v in values], dtype="string")


def collect(spec: SweepSpec, results: Iterable[RunResult], currency: str | None = None) -> pd.DataFrame:
    """The runs table: one row per (point, seed) of the spec, in the spec's order; with a
    `currency` (a priced sweep's: its cost metrics are in it), a CURRENCY column.

    Every job must be there once, and every metric of spec.metrics in every row.
    """
    by_job: dict[tuple[str, int], RunResult] = {}
    for r in results:
        if r.point not in spec.by_id:
            raise SweepError(f"sweep '{spec.name}': a result for unknown point {r.point!r}")
        if (r.point, r.seed) in by_job:
            raise SweepError(f"sweep '{spec.name}': two results for point {r.point} seed {r.seed}")
        by_job[(r.point, r.seed)] = r
    missing = [f"{p} seed {s}" for p, s in spec.jobs() if (p, s) not in by_job]
    if missing:
        raise SweepError(f"sweep '{spec.name}': no result for {len(missing)} run(s): {', '.join(missing[:5])}")
    runs = [by_job[job] for job in spec.jobs()]
    reserved = set(RUN_COLUMNS) | {CURRENCY} | set(spec.params)
    for r in runs:
        absent = [m for m in spec.metrics if m not in r.metrics]
        if absent:
            raise SweepError(f"sweep '{spec.name}': point {r.point} seed {r.seed} has no metric "
                             f"{', '.join(map(repr, absent))} (it has: {', '.join(sorted(r.metrics))})")
    clash = [m for m in spec.metrics if m in reserved]
    if clash:
        raise SweepError(f"sweep '{spec.name}': metric name {clash[0]!r} is also a column of the table")
    # The declared metrics first, then every other metric a run wrote (NaN where absent).
    extra = sorted({m for r in runs for m in r.metrics} - set(spec.metrics) - reserved)
    columns: dict[str, Any] = {"sweep": [spec.name] * len(runs), "point": [r.point for r in runs]}
    for key in spec.params:
        columns[key] = _typed([spec.by_id[r.point][key] for r in runs])
    columns["seed"] = pd.Series([r.seed for r in runs], dtype="int64")
    for m in (*spec.metrics, *extra):
        # A retrieval record leaves its relevance level out at 1: where another record
        # names its level (the column exists), that run's is 1, not a missing value.
        absent = 1.0 if m == RELEVANCE_LEVEL and spec.stage == "retrieval" else math.nan
        columns[m] = pd.Series([r.metrics.get(m, absent) for r in runs], dtype="float64")
    columns["wall_time_s"] = pd.Series([r.wall_time_s for r in runs], dtype="float64")
    columns["gpu_hours"] = pd.Series([r.gpu_hours for r in runs], dtype="float64")
    if currency is not None:
        columns[CURRENCY] = pd.Series([currency] * len(runs), dtype="string")
    return pd.DataFrame(columns)


def metric_columns(runs: pd.DataFrame, params: Iterable[str]) -> list[str]:
    """The runs table's metric columns, in order."""
    skip = set(RUN_COLUMNS) | {CURRENCY} | set(params)
    return [c for c in runs.columns if c not in skip]


def aggregate(runs: pd.DataFrame, params: Iterable[str], metrics: Iterable[str] | None = None) -> pd.DataFrame:
    """Per point (in first-seen order): parameters, n_seeds, mean and sample std (n - 1) of
    each metric. A point with a seed that has no value (a diverged run's NaN loss, a null)
    has no mean: NaN, never the mean of its other seeds, so it cannot look better than it
    is nor be the best point."""
    params = list(params)
    metrics = list(metrics) if metrics is not None else metric_columns(runs, params)
    groups = runs.groupby("point", sort=False)
    out = groups[["sweep", *params]].first() if "sweep" in runs else groups[params].first()
    out["n_seeds"] = groups["seed"].nunique()
    for m in metrics:
        out[f"{m}_mean"] = groups[m].agg(lambda s: s.mean(skipna=False))
        out[f"{m}_std"] = groups[m].agg(lambda s: s.std(ddof=1, skipna=False))
    if "wall_time_s" in runs:
        out["wall_time_s_mean"] = groups["wall_time_s"].mean()
    if "gpu_hours" in runs:
        out["gpu_hours_total"] = groups["gpu_hours"].sum()
    if CURRENCY in runs:
        out[CURRENCY] = groups[CURRENCY].first()  # one for the sweep
    return out.reset_index()


def best(summary: pd.DataFrame, metric: str, maximize: bool) -> pd.Series:
    """The summary row with the best mean of `metric` (the first such on a tie; NaN never wins)."""
    means = summary[f"{metric}_mean"]
    if means.isna().all():
        raise SweepError(
            f"no point has a value for metric {metric!r}: each has a run that wrote it as null, NaN or Infinity (a diverged "
            "run's loss; a figure its device does not give, such as mfu on the CPU), so none can be ranked by it"
        )
    return summary.loc[means.idxmax() if maximize else means.idxmin()]


def summarise(spec: SweepSpec, runs: pd.DataFrame) -> pd.DataFrame:
    """aggregate() over every metric, with `best` marking the best point of spec.best."""
    summary = aggregate(runs, spec.params)
    summary["best"] = summary["point"] == best(summary, spec.best, spec.maximize)["point"]
    return summary


def write_table(frame: pd.DataFrame, parquet_path: str | os.PathLike, csv_path: str | os.PathLike) -> None:
    """`frame` as Parquet and as CSV, each written atomically."""
    with atomic_path(parquet_path) as tmp:
        frame.to_parquet(tmp, engine="pyarrow", index=False)
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)


def read_table(parquet_path: str | os.PathLike) -> pd.DataFrame:
    return pd.read_parquet(parquet_path, engine="pyarrow")
