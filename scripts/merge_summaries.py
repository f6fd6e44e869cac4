"""Rule merge_summaries: per-chunk summaries -> summaries.jsonl (checked), job records -> jobs.json."""

from shardflow.core.files import read_json
from shardflow.core.jobs import write_job_table
from shardflow.core.runlog import configure_logging
from shardflow.summarise.merge import merge_summaries

smk = snakemake  # noqa: F821 - injected by Snakemake
log = configure_logging(smk.log[0], "merge_summaries", {"chunks": len(smk.input.summaries)})
manifest = read_json(smk.input.manifest)
result = merge_summaries(list(smk.input.summaries), smk.output.summaries, manifest["total_records"])
jobs = write_job_table(smk.output.jobs, list(smk.input.stats), list(smk.input.benchmarks))
log.info("merged: %s; %d chunk jobs in %s", result["checks"], len(jobs), smk.output.jobs)
