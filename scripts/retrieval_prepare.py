"""Rule retrieval_prepare: BEIR / MS MARCO -> corpus.jsonl, queries.jsonl, qrels.json."""

from shardflow.retrieval.pipeline import RetrievalSpec, prepare
from shardflow.core.runlog import configure_logging

smk = snakemake  # noqa: F821 - injected by Snakemake
spec = RetrievalSpec(**smk.params.spec)
log = configure_logging(smk.log[0], "retrieval_prepare", spec)
stats = prepare(spec, smk.output.corpus, smk.output.queries, smk.output.qrels)
log.info("prepared: %s", stats)
