"""Rule gather_shards: tokenized chunks (or, for a position split, the one text file) ->
the shard folder (train/val shards, metadata.json, the tokenizer's files); per-chunk job records ->
tokenize/jobs.json."""

from pathlib import Path

from shardflow.core.jobs import write_job_table
from shardflow.core.runlog import configure_logging
from shardflow.train.prepare import ShardParams, TextFileParams, gather_shards, prepare_text_file
from shardflow.train.tokenizer import load_tokenizer

smk = snakemake  # noqa: F821 - injected by Snakemake
p = dict(smk.params.shards)
split = p.pop("split")
if split == "position":
    params = TextFileParams(val_fraction=p["val_fraction"], tokens_per_shard=p["tokens_per_shard"],
                            shard_mb=p["shard_mb"], dtype=p["dtype"])
else:
    params = ShardParams(tokens_per_shard=p["tokens_per_shard"], shard_mb=p["shard_mb"], dedup=p["dedup"],
                         dtype=p["dtype"], group_field=p["group_field"])
log = configure_logging(smk.log[0], "gather_shards", {"split": split, "shards": params})
out_dir = Path(smk.output.shards)
tokenizer_dir = Path(smk.input.tokenizer).parent
if split == "position":
    meta = prepare_text_file(smk.input.text, load_tokenizer(tokenizer_dir), out_dir, params, tokenizer_dir)
else:
    meta = gather_shards(list(smk.input.tokens), out_dir, params, tokenizer_dir)
jobs = write_job_table(smk.output.jobs, list(smk.input.stats), list(smk.input.benchmarks))
t = meta["totals"]
log.info("%d train / %d val tokens in %d shards (%s); %d tokenize jobs in %s", t["train"]["tokens"],
         t["val"]["tokens"], len(meta["shards"]), meta["dtype"], len(jobs), smk.output.jobs)
