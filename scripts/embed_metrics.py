"""Rule sweep_embed_metrics: an embed sweep job's run -> its speed, GPU-hours and agreement with the main run."""

from shardflow.core.atomic import write_json
from shardflow.core.runlog import configure_logging
from shardflow.embed.measure import run_metrics

smk = snakemake  # noqa: F821 - injected by Snakemake
# No price: collect_sweep_<name> prices the GPU-hours (a changed price reruns only it).
reference = (smk.input.ref_npy, smk.input.ref_ids) if "ref_npy" in smk.input.keys() else None
log = configure_logging(smk.log[0], "embed_metrics", {"reference": reference[0] if reference else None})
metrics = run_metrics(smk.input.jobs, smk.input.verification, smk.input.npy, smk.input.ids, reference=reference)
write_json(smk.output[0], metrics)
log.info("metrics: %s", metrics)
