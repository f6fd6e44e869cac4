"""Rule provenance: git, config hash, versions, hardware, checksums, timings -> provenance.json."""

from shardflow.core import jobs
from shardflow.core.atomic import write_json
from shardflow.core.files import read_json
from shardflow.core.hashing import sha256_file
from shardflow.core.models import resolve_model
from shardflow.core.runlog import configure_logging
from shardflow.core.s3 import logical_path
from shardflow.workflow.provenance import build_manifest

smk = snakemake  # noqa: F821 - injected by Snakemake
log = configure_logging(smk.log[0], "provenance", {"models": smk.params.models, "repo": smk.params.repo})
split = read_json(smk.input.manifest)
inputs = {**split["source_sha256"], **{c["path"]: c["sha256"] for c in split["chunks"]}}
inputs.update({p: sha256_file(p) for p in smk.input.raw})  # the retrieval data set's files (BEIR, MS MARCO)
tables = [jobs.read_job_table(table) for table in smk.input.jobs]
timings = {k: v for rows in tables for k, v in jobs.timings(rows).items()}
made = [r["stats"]["made_with"] for rows in tables for r in rows if "made_with" in r["stats"]]
timings.update({p: {k: jobs.read_benchmark(p).get(k) for k in jobs.TIMING_KEYS} for p in smk.input.benchmarks})
manifest = build_manifest(
    repo=smk.params.repo,
    config=dict(smk.params.config),
    input_sha256=inputs,
    outputs=list(smk.input.outputs),
    timings=timings,
    model_paths={role: resolve_model(name) for role, name in smk.params.models.items()},
    jobs_made_with=made,
    name=logical_path,
    stats=list(smk.input.stats),  # embed_queries': what the query encoder ran with
)
for warning in manifest["warnings"]:
    log.warning("%s", warning)
write_json(smk.output[0], manifest)
log.info("git %s, config %s, model %s", manifest["git"], manifest["config_sha256"][:12], manifest["model"])
