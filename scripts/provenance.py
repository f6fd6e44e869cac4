"""Rule provenance: git, config hash, versions, hardware, checksums, timings -> provenance.json."""

from shardflow.core.atomic import write_json
from shardflow.core.models import resolve_model
from shardflow.workflow.provenance import build_manifest
from shardflow.core.runlog import configure_logging

smk = snakemake  # noqa: F821 - injected by Snakemake
log = configure_logging(smk.log[0], "provenance", {"model": smk.params.model, "repo": smk.params.repo})
manifest = build_manifest(
    repo=smk.params.repo,
    config=dict(smk.params.config),
    inputs=list(smk.input.sources) + list(smk.input.chunks),
    outputs=list(smk.input.outputs),
    benchmarks=list(smk.input.benchmarks),
    model_path=resolve_model(smk.params.model),
)
write_json(smk.output[0], manifest)
log.info("git %s, config %s, model %s", manifest["git"], manifest["config_sha256"][:12], manifest["model"])
