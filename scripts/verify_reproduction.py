"""Rule verify_reproduction: this run vs the experiment file; fail with a table when off."""

from shardflow.core.atomic import write_json
from shardflow.core.files import read_json
from shardflow.core.runlog import configure_logging
from shardflow.workflow.reproduce import ReproductionError, check_reproduction, failed, read_provenance, render_table

smk = snakemake  # noqa: F821 - injected by Snakemake
log = configure_logging(smk.log[0], "verify_reproduction", {"name": smk.params.name})
provenance = read_provenance(smk.input.provenance)  # refused, naming the file, where not this format's record
metrics = read_json(smk.input.metrics)
rows = check_reproduction(dict(smk.params.expect), provenance, metrics, smk.params.strict_packages)
table = render_table(rows)
log.info("reproduction %s:\n%s", smk.params.name, table)
if failed(rows):
    raise ReproductionError(f"reproduction {smk.params.name!r} FAILED:\n{table}")
write_json(smk.output[0], {"name": smk.params.name, "ok": True, "rows": [r.as_dict() for r in rows]})
