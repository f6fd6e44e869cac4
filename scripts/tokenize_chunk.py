"""Rule tokenize: one chunk -> its tokens (shard format), per-document sidecar and stats."""

import time
from pathlib import Path

from shardflow.core.atomic import write_json
from shardflow.core.runlog import configure_logging
from shardflow.train.prepare import TokenizeParams, tokenize_chunk
from shardflow.train.tokenizer import load_tokenizer

smk = snakemake  # noqa: F821 - injected by Snakemake
params = TokenizeParams(**smk.params.tokenize)
log = configure_logging(smk.log[0], "tokenize", {"tokenize": params, "chunk": smk.input.chunk})
start = time.perf_counter()
tokenizer = load_tokenizer(Path(smk.input.tokenizer).parent)
summary = tokenize_chunk(smk.input.chunk, tokenizer, smk.output.tokens, params)
seconds = time.perf_counter() - start
write_json(smk.output.stats, {**summary, "seconds": seconds, "tokens_per_s": summary["tokens"] / seconds})
log.info("%d documents, %d tokens (%d train / %d val) in %.1f s", summary["documents"], summary["tokens"],
         summary["train_tokens"], summary["val_tokens"], seconds)
