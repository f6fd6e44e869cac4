"""Rule retrieval_prepare: a BEIR corpus / MS MARCO collection -> corpus.jsonl (chunk format)."""

from shardflow.core.runlog import configure_logging
from shardflow.retrieval.pipeline import prepare_corpus

smk = snakemake  # noqa: F821 - injected by Snakemake
log = configure_logging(smk.log[0], "retrieval_prepare", {"format": smk.params.format, "corpus": smk.input.corpus})
n_docs = prepare_corpus(smk.params.format, smk.input.corpus, smk.output.corpus)
log.info("prepared: %d documents", n_docs)
