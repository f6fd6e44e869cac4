"""Rule retrieval_queries: the judged queries of a BEIR / MS MARCO set -> queries.jsonl."""

from shardflow.core.runlog import configure_logging
from shardflow.retrieval.pipeline import prepare_queries

smk = snakemake  # noqa: F821 - injected by Snakemake
params = {"format": smk.params.format, "judged": smk.params.judged, **dict(smk.input.items())}
log = configure_logging(smk.log[0], "retrieval_queries", params)
stats = prepare_queries(smk.params.format, smk.input.queries, smk.input.qrels, smk.output.queries)
log.info("prepared: %s", stats)
