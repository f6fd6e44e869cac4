"""Rule embed: one chunk -> embeddings (.npy), ids (.parquet), stats (.json)."""

from shardflow.core.gpujob import start_gpu_job

smk = snakemake  # noqa: F821 - injected by Snakemake
cfg = dict(smk.params.embedding, compile_cache=smk.params.compile_cache)  # the cache folder: not recorded
chunk = int(smk.wildcards.chunk) if "chunk" in smk.wildcards.keys() else None
job = start_gpu_job(smk, "embed", {"embedding": cfg, "input": smk.input[0]})

from shardflow.core.atomic import write_json  # noqa: E402 - after pinning (start_gpu_job)
from shardflow.core.models import resolve_model  # noqa: E402
from shardflow.core.s3 import logical_path  # noqa: E402
from shardflow.embed.engine import EmbedParams, embed_chunk  # noqa: E402
from shardflow.workflow.provenance import made_with  # noqa: E402

params = EmbedParams(**{**cfg, "model": resolve_model(cfg["model"]), "device": job.device, "threads": job.threads})
stats = embed_chunk(smk.input[0], smk.output.npy, smk.output.ids, params, smk.params.resume_root, job.log)
# The report reads these names; the engine's own names are kept alongside.
stats.update(chunk=chunk, input=logical_path(smk.input[0]), tokens=stats["real_tokens"])
stats.update(start_time=stats["start_unix"], end_time=stats["end_unix"])
stats["made_with"] = made_with("embedding", params.model, stats.get("device", job.device), job.threads)  # provenance
write_json(smk.output.stats, stats)
job.log.info("done: %s", stats)
