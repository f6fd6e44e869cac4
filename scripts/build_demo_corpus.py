"""Rule build_demo_corpus: stdlib docstrings -> resources/demo/corpus.jsonl."""

from shardflow.core.runlog import configure_logging
from shardflow.corpus.demo import DemoParams, build_demo_corpus

smk = snakemake  # noqa: F821 - injected by Snakemake
params = DemoParams(max_docs=smk.params.max_docs, min_words=smk.params.min_words)
log = configure_logging(smk.log[0], "build_demo_corpus", params)
stats = build_demo_corpus(smk.output[0], params)
log.info("wrote %d documents to %s", stats["documents"], smk.output[0])
