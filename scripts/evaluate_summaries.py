"""Rule evaluate_summaries: merged summaries vs the input's references -> ROUGE metrics."""

from shardflow.core.runlog import configure_logging
from shardflow.summarise.evaluate import evaluate_summaries
from shardflow.summarise.params import ScoreParams

smk = snakemake  # noqa: F821 - injected by Snakemake
params = ScoreParams(**smk.params.score)
log = configure_logging(smk.log[0], "evaluate_summaries", params)
outputs = {k: smk.output[k] for k in ("metrics", "per_document", "figure")}
scored = evaluate_summaries(
    smk.input.summaries, list(smk.input.sources), params, outputs, system=smk.params.method,
    split_rejects=smk.input.split_rejects,
)
log.info("%d references rejected; metrics in %s", len(scored.rejects), smk.output.metrics)
