"""Rule split_source (chunking.by: source): source i -> chunk_<i>.jsonl + part manifest,
rejects and record keys, for the data set's split to collect."""

from shardflow.core.runlog import configure_logging
from shardflow.corpus.by_source import split_source
from shardflow.corpus.readers import BadRecordError, ReaderOptions

smk = snakemake  # noqa: F821 - injected by Snakemake
reader = ReaderOptions(**smk.params.reader)
(source,) = smk.input
log = configure_logging(smk.log[0], "split_source", {"reader": reader, "source": source})
try:
    manifest = split_source(
        source,
        reader,
        smk.params.rate_items_per_s,
        smk.output.chunk,
        smk.output.part,
        smk.output.rejects,
        smk.output.record_keys,
    )
except BadRecordError as exc:
    if not exc.skippable:
        raise
    hint = "input.on_bad_record: skip sets such records aside in rejects.jsonl, counted, and goes on"
    raise BadRecordError(exc.source, exc.line, f"{exc.reason} ({hint})", skippable=True) from None
log.info("%d records into %s; %d rejected", manifest["total_records"], smk.output.chunk, manifest["rejected_records"])
