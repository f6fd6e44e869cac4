"""Parameter sweeps: many runs of one stage over a grid, a sample of one or a list of points, and seeds.

spec     the `sweeps:` config section parsed and checked at parse time (SweepSpec)
sample   random search: a grid's points (values or ranges) drawn at parse time, stable across versions
paths    point ids: readable, stable, path-safe folder names that decode back
metrics  the metric names each stage's jobs write: a misspelt one fails the parse
shared   retrieval embeddings named by their settings: equal settings, one set
table    the runs table (one row per point and seed) and its summary over seeds
plots    each metric against each parameter; heatmaps for pairs (scatters over 30 values a side, and for a sample); best point marked
export   the summary as Markdown and LaTeX (booktabs), best values in bold
report   everything a finished sweep writes, from one call
bench    expand_and_name(n): the parse-time cost of an n-point sweep
adopt    a finished sweep's jobs moved to their point's new id after its grid gained or lost a key

How a workflow uses it (the rules are thin):
  - parse time: `specs = parse_sweeps(config["sweeps"], config, validate)`; one job per
    (point, seed), its folder `paths.job_dir(spec.folder, point, seed)` under the sweeps
    root, wildcards constrained to `paths.POINT_ID_REGEX` and `paths.SEED_REGEX`;
  - the job rule's `params:` carries `spec.job_config(point, seed)` (only its stage's
    sections), so a job reruns when its own values change and for nothing else;
  - the collecting rule takes every job's outputs as input (a new grid value or seed
    adds jobs and reruns only them and the collection), and `spec.tables_record()`
    through a recorded param (Snakemake records builtins only, not a SweepSpec), builds
    `table.run_result(...)` per job and calls `report.write_report`, whose files
    `report.output_files` lists.
"""

from shardflow.sweep.paths import (
    POINT_ID_REGEX,
    SEED_REGEX,
    job_dir,
    parse_point_id,
    point_id,
)
from shardflow.sweep.spec import (
    STAGES,
    SweepError,
    SweepSpec,
    apply_point,
    parse_sweeps,
)
from shardflow.sweep.table import (
    RunResult,
    aggregate,
    best,
    collect,
    run_result,
    summarise,
)

__all__ = [
    "POINT_ID_REGEX", "SEED_REGEX", "STAGES", "RunResult", "SweepError", "SweepSpec", "aggregate",
    "apply_point", "best", "collect", "job_dir", "parse_point_id", "parse_sweeps", "point_id",
    "run_result", "summarise",
]
