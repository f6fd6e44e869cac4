"""Rule summarise_report: job table, manifest, summaries -> figures + summary.json."""

from shardflow.core.runlog import configure_logging
from shardflow.summarise.report import SummaryReportParams, build_report

smk = snakemake  # noqa: F821 - injected by Snakemake
params = SummaryReportParams(gpu_hour_price=smk.params.gpu_hour_price, currency=smk.params.currency, gpus=smk.params.gpus)
log = configure_logging(smk.log[0], "summarise_report", params)
outputs = {k: smk.output[k] for k in ("throughput", "timeline", "lengths", "summary")}
build_report(smk.input.jobs, smk.input.manifest, smk.input.summaries, outputs, params)
