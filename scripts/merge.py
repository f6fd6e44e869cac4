"""Rule merge: embed_<i>.npy/.ids.parquet -> embeddings.npy + ids.parquet."""

from shardflow.embed.merge import MergeParams, merge_embeddings
from shardflow.core.runlog import configure_logging

smk = snakemake  # noqa: F821 - injected by Snakemake
params = MergeParams()
log = configure_logging(smk.log[0], "merge", params)
summary = merge_embeddings(list(smk.input.npy), list(smk.input.ids), smk.output.npy, smk.output.ids, params)
log.info("merged: %s", summary)
