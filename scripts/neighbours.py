"""Rule neighbours: one chunk's documents searched against the whole corpus -> their k nearest."""

from shardflow.core.gpujob import start_gpu_job

smk = snakemake  # noqa: F821 - injected by Snakemake
p = smk.params
job = start_gpu_job(smk, "neighbours", {"k": p.k, "block_size": p.block_size, "backend": p.backend})

import torch  # noqa: E402 - after pinning

from shardflow.core.atomic import write_json  # noqa: E402 - after pinning (start_gpu_job)
from shardflow.core.files import read_json  # noqa: E402
from shardflow.core.models import resolve_model  # noqa: E402
from shardflow.embed.stconfig import load_model_spec  # noqa: E402
from shardflow.retrieval.neighbours import NeighbourParams, chunk_neighbours, chunk_rows  # noqa: E402
from shardflow.workflow.provenance import made_with  # noqa: E402

torch.set_num_threads(job.threads)
model = resolve_model(p.model)
params = NeighbourParams(
    k=p.k,
    block_size=p.block_size,
    backend=p.backend,
    similarity=load_model_spec(model).similarity,
    # cpu for a CPU job even if CUDA is there; auto, cuda or cuda:N (gpu_jobs.device) for a GPU job
    device=job.device,
)
chunk = int(smk.wildcards.chunk)
rows = chunk_rows(read_json(smk.input.manifest), chunk)
job.log.info("chunk %d: rows %d to %d, %s", chunk, rows.start, rows.stop - 1, params)
stats = chunk_neighbours(smk.input.npy, smk.input.ids, rows, params, smk.output.table)
stats.update(chunk=chunk, start_time=stats["start_unix"], end_time=stats["end_unix"])
# For provenance, as the embed jobs record theirs: the device the search ran on (faiss's the
# CPU), whose ties and float sums decide the neighbours; the model whose similarity it used.
stats["made_with"] = made_with("embedding", model, stats["device"], job.threads)
write_json(smk.output.stats, stats)
job.log.info("done: %s", {k: v for k, v in stats.items() if k != "made_with"})
