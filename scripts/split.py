"""Rule split: corpus files -> N chunk files + manifest + rejects."""

from shardflow.core.runlog import configure_logging
from shardflow.corpus.readers import BadRecordError, ReaderOptions
from shardflow.corpus.split import SplitParams, split_corpus

smk = snakemake  # noqa: F821 - injected by Snakemake
params = SplitParams(
    n_chunks=smk.params.n_chunks, by=smk.params.by, rate_items_per_s=smk.params.rate_items_per_s
)
reader = ReaderOptions(**smk.params.reader)
log = configure_logging(smk.log[0], "split", {"split": params, "reader": reader, "inputs": list(smk.input)})
try:
    manifest = split_corpus(
        list(smk.input), reader, params, list(smk.output.chunks), smk.output.manifest, smk.output.rejects
    )
except BadRecordError as exc:
    if not exc.skippable:
        raise
    hint = "input.on_bad_record: skip sets such records aside in rejects.jsonl, counted, and goes on"
    raise BadRecordError(exc.source, exc.line, f"{exc.reason} ({hint})", skippable=True) from None
log.info(
    "%d records into %d chunks (%s); %d rejected (see %s)",
    manifest["total_records"],
    manifest["n_chunks"],
    ", ".join(str(c["items"]) for c in manifest["chunks"]),
    manifest["rejected_records"],
    smk.output.rejects,
)
