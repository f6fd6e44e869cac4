"""Rule retrieval_evaluate: exact top-k search + MTEB metrics + report figure."""

import torch

from shardflow.retrieval.pipeline import EvaluateParams, plot_per_query, search_and_score
from shardflow.core.runlog import configure_logging

smk = snakemake  # noqa: F821 - injected by Snakemake
torch.set_num_threads(smk.threads)
params = EvaluateParams(
    top_k=smk.params.top_k,
    block_size=smk.params.block_size,
    backend=smk.params.backend,
    drop_identical_ids=smk.params.drop_identical_ids,
    # Scheduled as a CPU job (gpu=0): search on the CPU even if CUDA is there.
    device="cpu" if smk.resources.get("gpu", 1) == 0 else None,
)
log = configure_logging(smk.log[0], "retrieval_evaluate", params)
i = smk.input
search_and_score(
    i.docs, i.doc_ids, i.queries, i.query_ids, i.qrels, params, smk.output.metrics, smk.output.per_query, smk.output.run
)
plot_per_query(smk.output.per_query, smk.output.metrics, smk.output.figure)
