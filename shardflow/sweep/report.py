"""Everything a sweep writes once its runs are done, in one folder, from one call.

    runs.parquet / runs.csv        one row per point and seed (table.collect)
    summary.parquet / summary.csv  per point over seeds, the best point marked
    table.md / table.tex           the summary as a paper's table (export)
    best.json                      the best point: id, parameters, mean, std (and its
                                   relevance levels, in a retrieval sweep scored away from 1)
    points.json                    every point of the spec, in order: its id and parameters
                                   (and `sample`, {points, seed, grid}, where they were
                                   drawn: sample.grid_record)
    cost.json                      what the sweep cost, each job once, by origin (cost.sweep_cost)
    plots/<figure>.png             plots.plot_files(spec)

A priced sweep's (cost.Price: an embed sweep's) figures in money say their currency:
the tables' `currency` column, the cost metrics' headers and axes, best.json's
`currency` where its metric is one, and cost.json's `estimated_cost`, `gpu_hour_price`
and `currency`.

`output_files(spec, folder)` lists them, a pure function of the spec, so the collecting
rule can declare every file at parse time.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterable

from shardflow.core.atomic import write_json
from shardflow.sweep.cost import JobCost, Price, metric_currency, sweep_cost
from shardflow.sweep.export import TABLE_DECIMALS, write_exports
from shardflow.sweep.plots import plot_files, plot_sweep
from shardflow.sweep.spec import SweepSpec
from shardflow.sweep.table import RunResult, best, collect, relevance_levels, summarise, write_table

TABLE_FILES = {
    "runs_parquet": "runs.parquet",
    "runs_csv": "runs.csv",
    "summary_parquet": "summary.parquet",
    "summary_csv": "summary.csv",
    "markdown": "table.md",
    "latex": "table.tex",
    "best": "best.json",
    "points": "points.json",
    "cost": "cost.json",
}


def output_files(spec: SweepSpec, folder: str) -> dict[str, str]:
    """{name: path} of every file write_report writes (figures as plot:<file>)."""
    files = {key: f"{folder}/{name}" for key, name in TABLE_FILES.items()}
    files.update({f"plot:{name}": f"{folder}/plots/{name}" for name in plot_files(spec)})
    return files


def points_record(spec: SweepSpec) -> dict:
    return {
        "sweep": spec.name, "stage": spec.stage, "base": spec.base, "params": list(spec.params),
        "seeds": list(spec.seeds), "points": [{"id": pid, "params": dict(p)} for pid, p in zip(spec.ids, spec.points, strict=True)],
        # How the points were drawn from the grid (spec `sample:`); absent for a grid or a list.
        **({"sample": copy.deepcopy(dict(spec.sample))} if spec.sample else {}),
    }


def write_report(spec: SweepSpec, results: Iterable[RunResult], job_costs: Iterable[Iterable[JobCost]], folder: str,
                 decimals: int = TABLE_DECIMALS, price: Price | None = None) -> dict[str, str]:
    """Tables, exports, best point, points table, cost and figures of one sweep; their
    paths. `job_costs`: per result, the jobs it read (their benchmark files), for
    cost.json; `price`: what the collection priced the results at (a sweep of
    cost.PRICED_STAGES), whose currency every figure in money names."""
    currency = price.currency if price is not None else None
    files = output_files(spec, folder)
    results = list(results)
    runs = collect(spec, results, currency)
    summary = summarise(spec, runs)
    write_table(runs, files["runs_parquet"], files["runs_csv"])
    write_table(summary, files["summary_parquet"], files["summary_csv"])
    # Cells some run of the point computed on a ranking shallower than the metric's k.
    marked = {(r.point, m) for r in results for m in r.beyond_depth if m in spec.goals}
    # A retrieval sweep's relevance levels by point, where some run was scored away from 1.
    levels = relevance_levels(spec, results)
    write_exports(spec, summary, files["markdown"], files["latex"], decimals, currency, marked, levels)
    top = best(summary, spec.best, spec.maximize)
    std = float(top[f"{spec.best}_std"])
    unit = metric_currency(spec.best, currency)
    write_json(files["best"], {
        "sweep": spec.name, "metric": spec.best, "goal": spec.goals[spec.best], "point": top["point"],
        "params": spec.point(top["point"]), "mean": float(top[f"{spec.best}_mean"]),
        "std": None if math.isnan(std) else std, "n_seeds": int(top["n_seeds"]),
        **({"currency": unit} if unit else {}),
        # Where the best value was computed on a ranking shallower than its k (table.beyond_depth).
        **({"beyond_ranking_depth": True} if (top["point"], spec.best) in marked else {}),
        # The levels the best point's runs were scored at, where some run of the sweep's was
        # scored away from 1 (table.relevance_levels), so the report's first page names the
        # level its value counts; none where every run was at 1, as before. Runs of other
        # points kept at another level (--touch) are the tables' and figures' to say.
        **({"relevance_levels": list(levels[top["point"]])} if levels else {}),
    })
    write_json(files["points"], points_record(spec))
    write_json(files["cost"], {"sweep": spec.name, **sweep_cost(job_costs, spec.folder, price)})
    plot_sweep(spec, summary, os.path.join(folder, "plots"), currency, levels)
    return files
