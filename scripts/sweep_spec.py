"""Rule sweep_spec: what decides a sweep's tables (its params) -> spec.json."""

from shardflow.sweep.spec import write_tables_record

smk = snakemake  # noqa: F821 - injected by Snakemake
write_tables_record(smk.output[0], smk.params.spec, smk.log[0])
