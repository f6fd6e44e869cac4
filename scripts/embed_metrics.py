"""Rule sweep_embed_metrics: an embed sweep job's run -> its speed, cost and agreement with the main run."""

from shardflow.core.atomic import write_json
from shardflow.core.runlog import configure_logging
from shardflow.embed.measure import MeasureParams, run_metrics

smk = snakemake  # noqa: F821 - injected by Snakemake
params = MeasureParams(gpu_hour_price=smk.params.gpu_hour_price)
log = configure_logging(smk.log[0], "embed_metrics", params)
reference = (smk.input.ref_npy, smk.input.ref_ids) if "ref_npy" in smk.input.keys() else None
metrics = run_metrics(smk.input.jobs, smk.input.verification, smk.input.npy, smk.input.ids,
                      reference=reference, params=params)
write_json(smk.output[0], metrics)
log.info("metrics: %s", metrics)
