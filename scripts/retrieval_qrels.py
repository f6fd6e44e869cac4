"""Rule retrieval_qrels: BEIR / MS MARCO / TREC qrels -> qrels.json."""

from shardflow.core.runlog import configure_logging
from shardflow.retrieval.pipeline import prepare_qrels

smk = snakemake  # noqa: F821 - injected by Snakemake
log = configure_logging(smk.log[0], "retrieval_qrels", {"qrels": smk.input.qrels})
n_queries = prepare_qrels(smk.input.qrels, smk.output.qrels)
log.info("prepared: %d judged queries", n_queries)
