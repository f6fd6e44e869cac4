"""Rule report: per-chunk stats, benchmarks, verification -> figures + summary.json."""

from shardflow.core.runlog import configure_logging
from shardflow.embed.report import ReportParams, build_report

smk = snakemake  # noqa: F821 - injected by Snakemake
params = ReportParams(
    map_method=smk.params.map_method,
    map_points=smk.params.map_points,
    gpu_hour_price=smk.params.gpu_hour_price,
    currency=smk.params.currency,
    gpus=smk.params.gpus,
)
log = configure_logging(smk.log[0], "report", params)
outputs = {k: smk.output[k] for k in ("throughput", "timeline", "norms", "map", "summary")}
build_report(
    smk.input.jobs,
    smk.input.manifest,
    smk.input.verification,
    smk.input.npy,
    outputs,
    params,
)
