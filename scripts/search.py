"""Rule search: the embedded queries searched against the data set's corpus -> their k nearest."""

from shardflow.core.gpujob import start_gpu_job

smk = snakemake  # noqa: F821 - injected by Snakemake
p = smk.params
job = start_gpu_job(smk, "search", {"k": p.k, "block_size": p.block_size, "backend": p.backend})

import torch  # noqa: E402 - after pinning

from shardflow.core.atomic import write_json  # noqa: E402 - after pinning (start_gpu_job)
from shardflow.core.madewith import made_with  # noqa: E402
from shardflow.core.models import resolve_model  # noqa: E402
from shardflow.embed.stconfig import load_model_spec  # noqa: E402
from shardflow.retrieval.batch import SearchParams, search_queries  # noqa: E402

torch.set_num_threads(job.threads)
model = resolve_model(p.model)
params = SearchParams(
    k=p.k,
    block_size=p.block_size,
    backend=p.backend,
    similarity=load_model_spec(model).similarity,
    # cpu for a CPU job even if CUDA is there; auto, cuda or cuda:N (gpu_jobs.device) for a GPU job
    device=job.device,
)
job.log.info("search params %s", params)
i = smk.input
stats = search_queries(i.docs, i.doc_ids, i.queries, i.query_ids, params, dict(smk.output))
# For provenance, as the embed jobs record theirs: the device the search ran on (faiss's the
# CPU), whose ties and float sums decide the hits; the model whose similarity it used.
# `seconds`: the search, without the job's start-up (make estimate's rate).
stats["made_with"] = made_with("embedding", model, stats["device"], job.threads)
write_json(smk.output.stats, stats)
job.log.info("done: %s", {k: v for k, v in stats.items() if k not in ("made_with", "best_histogram")})
