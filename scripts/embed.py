"""Rule embed: one chunk -> embeddings (.npy), ids (.parquet), stats (.json).

The GPU slot is taken before torch is imported: CUDA_VISIBLE_DEVICES set after
CUDA initialises has no effect.
"""

from shardflow.core.gpu_slots import pin_gpu
from shardflow.core.runlog import configure_logging

smk = snakemake  # noqa: F821 - injected by Snakemake
cfg = dict(smk.params.embedding)
pinning, devices = cfg.pop("gpu_pinning"), cfg.pop("gpu_devices")
chunk = int(smk.wildcards.chunk) if "chunk" in smk.wildcards.keys() else None
log = configure_logging(smk.log[0], "embed", {"embedding": cfg, "input": smk.input[0]})
if smk.resources.get("gpu", 1) == 0:  # scheduled as a CPU job: run as one, take no GPU slot
    cfg["device"], pinning = "cpu", "off"
visible = pin_gpu(devices, mode=pinning, job=f"embed {smk.input[0]}")
log.info("CUDA_VISIBLE_DEVICES=%s (gpu_pinning=%s)", visible, pinning)

from shardflow.core.atomic import write_json  # noqa: E402 - after pinning, see above
from shardflow.embed.engine import EmbedParams, embed_chunk  # noqa: E402
from shardflow.core.models import resolve_model  # noqa: E402

params = EmbedParams(**{**cfg, "model": resolve_model(cfg["model"]), "threads": smk.threads})
stats = embed_chunk(smk.input[0], smk.output.npy, smk.output.ids, params, smk.params.resume_root, log)
# The report reads these names; the engine's own names are kept alongside.
stats.update(chunk=chunk, input=smk.input[0], tokens=stats["real_tokens"])
stats.update(start_time=stats["start_unix"], end_time=stats["end_unix"])
write_json(smk.output.stats, stats)
log.info("done: %s", stats)
