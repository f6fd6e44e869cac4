"""Rule split_<dataset> under chunking.by: source: the sources' parts -> manifest.json
+ rejects.jsonl, after checking ids and groups across sources."""

from shardflow.core.runlog import configure_logging
from shardflow.corpus.by_source import collect_sources
from shardflow.corpus.readers import ReaderOptions

smk = snakemake  # noqa: F821 - injected by Snakemake
reader = ReaderOptions(**smk.params.reader)
log = configure_logging(smk.log[0], "split", {"reader": reader, "parts": len(smk.input.parts)})
manifest = collect_sources(
    list(smk.input.parts),
    list(smk.input.rejects),
    list(smk.input.record_keys),
    reader,
    smk.params.rate_items_per_s,
    smk.output.manifest,
    smk.output.rejects,
)
log.info(
    "%d records in %d chunks, one per source; %d rejected (see %s)",
    manifest["total_records"],
    manifest["n_chunks"],
    manifest["rejected_records"],
    smk.output.rejects,
)
