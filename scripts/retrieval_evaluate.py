"""Rule retrieval_evaluate: exact top-k search + MTEB metrics + report figure."""

from shardflow.core.gpujob import start_gpu_job

smk = snakemake  # noqa: F821 - injected by Snakemake
p = smk.params
job = start_gpu_job(smk, "retrieval_evaluate", {"top_k": p.top_k, "block_size": p.block_size, "backend": p.backend})

import time  # noqa: E402

import torch  # noqa: E402 - after pinning (start_gpu_job)

from shardflow.core.atomic import write_json  # noqa: E402
from shardflow.core.madewith import made_with  # noqa: E402
from shardflow.core.models import resolve_model  # noqa: E402
from shardflow.embed.stconfig import load_model_spec  # noqa: E402
from shardflow.retrieval.pipeline import EvaluateParams, plot_per_query, search_and_score  # noqa: E402

torch.set_num_threads(job.threads)
model = resolve_model(p.model)
params = EvaluateParams(
    top_k=p.top_k,
    block_size=p.block_size,
    backend=p.backend,
    drop_identical_ids=p.drop_identical_ids,
    relevance_level=p.get("relevance_level", 1),  # given only away from 1 (rules/common.smk retrieval_scoring)
    similarity=load_model_spec(model).similarity,
    # The job's device: cpu for a CPU job even if CUDA is there; auto, cuda or cuda:N
    # (gpu_jobs.device) for a GPU job, resolved by the pipeline.
    device=job.device,
)
job.log.info("search params %s", params)
i = smk.input
started = time.time()
metrics = search_and_score(
    i.docs, i.doc_ids, i.queries, i.query_ids, i.qrels, params, smk.output.metrics, smk.output.per_query, smk.output.run
)
search_seconds = time.time() - started
plot_per_query(smk.output.per_query, smk.output.metrics, smk.output.figure)
# For provenance, as the embed jobs record theirs: the device the search ran on (faiss's
# the CPU, whatever the job was given), whose ties and float sums decide the metrics; the
# model is the one whose similarity it searched by.
# `seconds`: the search and its scoring, from reading the ids to the files written, without
# the job's start-up (imports, CUDA): make estimate's rate (the benchmark holds the rest).
write_json(smk.output.stats, {"made_with": made_with("embedding", model, metrics["device"], job.threads),
                              "seconds": search_seconds})
