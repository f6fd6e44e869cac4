"""Rule merge_neighbours: the chunks' neighbours -> one table, near-duplicates, summary, figure."""

from shardflow.core import jobs
from shardflow.core.files import read_json
from shardflow.core.runlog import configure_logging
from shardflow.retrieval.neighbours import NeighbourParams, merge_neighbours

smk = snakemake  # noqa: F821 - injected by Snakemake
p = smk.params
# The similarity the chunks searched by (their model's), as their records say.
similarities = {read_json(path)["similarity"] for path in smk.input.stats}
if len(similarities) != 1:
    raise ValueError(f"the neighbours jobs searched by different similarities {sorted(similarities)}: rerun them")
params = NeighbourParams(k=p.k, duplicate_threshold=p.duplicate_threshold, similarity=similarities.pop())
log = configure_logging(smk.log[0], "merge_neighbours", params)
jobs.write_job_table(smk.output.jobs, list(smk.input.stats), list(smk.input.benchmarks))
merge_neighbours(list(smk.input.tables), smk.input.ids, params, dict(smk.output))
