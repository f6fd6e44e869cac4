"""Rule train_tokenizer: the data set's texts -> the tokenizer folder (char, bpe, or a copied pretrained one)."""

from pathlib import Path

from shardflow.core.runlog import configure_logging
from shardflow.train.prepare import TokenizerParams, train_tokenizer
from shardflow.train.shards import choose_dtype

smk = snakemake  # noqa: F821 - injected by Snakemake
params = TokenizerParams(**smk.params.tokenizer)
log = configure_logging(smk.log[0], "train_tokenizer", {"tokenizer": params, "dtype": smk.params.dtype,
                                                        "inputs": list(smk.input)})
ident = train_tokenizer(list(smk.input), params, Path(smk.output.tokenizer).parent)
# The shard dtype must hold every id: refused here, once, rather than in every tokenize job.
dtype = choose_dtype(ident["vocab_size"], smk.params.dtype)
log.info("tokenizer %s, vocab_size %d, end-of-text id %d, tokens as %s",
         ident["kind"], ident["vocab_size"], ident["eot_id"], dtype)
