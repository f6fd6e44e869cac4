"""Rule score_stored_summaries: summaries already in the input vs its references -> ROUGE metrics."""

from shardflow.core.runlog import configure_logging
from shardflow.summarise.evaluate import score_stored
from shardflow.summarise.params import ScoreParams

smk = snakemake  # noqa: F821 - injected by Snakemake
params = ScoreParams(**smk.params.score)
log = configure_logging(smk.log[0], "score_stored_summaries", {"score": params, "stored_field": smk.params.stored_field})
outputs = {k: smk.output[k] for k in ("metrics", "per_document", "figure")}
scored = score_stored(list(smk.input.sources), smk.params.stored_field, params, outputs)
log.info("%d records rejected; metrics in %s", len(scored.rejects), smk.output.metrics)
