"""Rule collect_sweep_<name>: every job's metrics and benchmarks -> tables, exports, plots."""

import dataclasses
import json
import os

from shardflow.core.jobs import read_benchmark
from shardflow.core.runlog import configure_logging
from shardflow.sweep.report import write_report
from shardflow.sweep.table import run_result

smk = snakemake  # noqa: F821 - injected by Snakemake
spec = smk.params.spec
log = configure_logging(smk.log[0], "collect_sweep", {"sweep": spec.name, "jobs": len(smk.params.jobs)})
stats_files, bench_files = iter(smk.input.stats), iter(smk.input.benchmarks)
results = []
# The inputs hold every job's files in job order (rules/common.smk, sweep_job_files):
# its metrics record, its stats files, then its benchmarks (the first ones pair with
# the stats, for GPU-hours).
for (point, seed, n_stats, n_bench), metrics_path in zip(smk.params.jobs, smk.input.metrics):
    with open(metrics_path, encoding="utf-8") as fh:
        metrics = json.load(fh)
    seconds = [float(read_benchmark(next(bench_files)).get("s", 0.0)) for _ in range(n_bench)]
    gpu_hours = 0.0
    for s in seconds[:n_stats]:
        with open(next(stats_files), encoding="utf-8") as fh:
            stats = json.load(fh)
        # GPU-hours: jobs whose own record says they ran on CUDA, x the GPUs they held.
        if str(stats.get("device", "")).startswith("cuda"):
            gpu_hours += s * int(stats.get("gpus", stats.get("world_size", 1))) / 3600
    result = run_result(point, seed, metrics, wall_time_s=sum(seconds))
    results.append(dataclasses.replace(result, gpu_hours=gpu_hours))
folder = os.path.dirname(smk.output.runs_parquet)
files = write_report(spec, results, folder)
log.info("sweep %s: %d jobs -> %s", spec.name, len(results), folder)
