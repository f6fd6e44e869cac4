"""Rule merge: embed_<i>.npy/.ids.parquet -> embeddings.npy + ids.parquet; per-chunk job records -> jobs.json."""

from shardflow.core.jobs import write_job_table
from shardflow.core.runlog import configure_logging
from shardflow.embed.merge import MergeParams, merge_embeddings

smk = snakemake  # noqa: F821 - injected by Snakemake
params = MergeParams()
log = configure_logging(smk.log[0], "merge", params)
summary = merge_embeddings(list(smk.input.npy), list(smk.input.ids), smk.output.npy, smk.output.ids, params)
jobs = write_job_table(smk.output.jobs, list(smk.input.stats), list(smk.input.benchmarks))
log.info("merged: %s; %d chunk jobs in %s", summary, len(jobs), smk.output.jobs)
