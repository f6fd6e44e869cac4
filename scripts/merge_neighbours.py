"""Rule merge_neighbours: the chunks' neighbours -> one table, near-duplicates, summary, figure."""

from shardflow.core import jobs
from shardflow.core.runlog import configure_logging
from shardflow.retrieval.neighbours import NeighbourParams, merge_neighbours

smk = snakemake  # noqa: F821 - injected by Snakemake
p = smk.params
log = configure_logging(smk.log[0], "merge_neighbours", {"k": p.k, "duplicate_threshold": p.duplicate_threshold})
rows = jobs.write_job_table(smk.output.jobs, list(smk.input.stats), list(smk.input.benchmarks))
# The similarity the chunks searched by (their model's), as their records say.
similarities = {row["stats"]["similarity"] for row in rows}
if len(similarities) != 1:
    raise ValueError(f"the neighbours jobs searched by different similarities {sorted(similarities)}: rerun them")
params = NeighbourParams(k=p.k, duplicate_threshold=p.duplicate_threshold, similarity=similarities.pop())
log.info("merging %d chunk tables: %s", len(rows), params)
merge_neighbours(list(smk.input.tables), smk.input.ids, params, dict(smk.output))
