"""Rule search_queries: the queries file (search.queries) -> queries.jsonl, as read."""

from shardflow.core.runlog import configure_logging
from shardflow.corpus.readers import ReaderOptions
from shardflow.retrieval.batch import prepare_queries

smk = snakemake  # noqa: F821 - injected by Snakemake
p = smk.params
log = configure_logging(smk.log[0], "search_queries", {"format": p.format, "id_field": p.id_field,
                                                        "text_field": p.text_field})
opts = ReaderOptions(format=p.format, id_field=p.id_field, text_field=p.text_field, section="search")
stats = prepare_queries(smk.input.queries, opts, smk.output.queries)
log.info("prepared %s: %s", smk.input.queries, stats)
