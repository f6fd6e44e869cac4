"""Rule collect_sweep_<name>: every job's metrics and benchmarks -> tables, exports, plots, cost."""

import dataclasses
import os

from shardflow.core.runlog import configure_logging
from shardflow.sweep.cost import Price, read_job_records
from shardflow.sweep.report import write_report
from shardflow.sweep.table import run_result

smk = snakemake  # noqa: F821 - injected by Snakemake
spec = smk.params.spec
# An embed sweep's price and currency (shardflow.sweep.cost.PRICED_STAGES): its jobs record GPU-hours, priced here.
price = Price(smk.params.gpu_hour_price, smk.params.currency) if smk.params.get("gpu_hour_price") is not None else None
log = configure_logging(smk.log[0], "collect_sweep", {"sweep": spec.name, "jobs": len(smk.params.jobs),
                                                      "price": price and dataclasses.asdict(price)})
# Every job's metrics, and the jobs whose outputs it read: its own, and shared
# embeddings or the main run's, which cost.json counts once.
jobs = read_job_records(smk.params.jobs, smk.input.metrics, smk.input.stats, smk.input.benchmarks, price=price)
results = [
    dataclasses.replace(run_result(j.point, j.seed, j.metrics, wall_time_s=j.wall_time_s), gpu_hours=j.gpu_hours)
    for j in jobs
]
folder = os.path.dirname(smk.output.runs_parquet)
files = write_report(spec, results, [j.costs for j in jobs], folder, price=price)
log.info("sweep %s: %d jobs -> %s", spec.name, len(results), folder)
