"""Rule landing: each stage's records -> results/report.rst, the report's first screen."""

from shardflow.core.runlog import configure_logging
from shardflow.embed.report import ReportParams
from shardflow.workflow.landing import (
    embedding_section,
    neighbours_section,
    retrieval_section,
    search_section,
    summarisation_section,
    sweep_section,
    training_section,
    write_landing,
)

smk = snakemake  # noqa: F821 - injected by Snakemake
report = ReportParams(gpu_hour_price=smk.params.gpu_hour_price, currency=smk.params.currency, gpus=smk.params.embed_gpus)
log = configure_logging(smk.log[0], "landing", {"sections": smk.params.sections, "report": report})
builders = {
    "embedding": lambda ds, files: embedding_section(ds, files, report),
    "retrieval": retrieval_section,
    "neighbours": neighbours_section,
    "search": search_section,
    "summarisation": summarisation_section,
    "training": lambda ds, files: training_section(ds, files, report),
    "sweep": sweep_section,
}
# Each file as this job has it (the named input: in S3 storage, its local copy); the
# params only say which file is which, and are what Snakemake records.
sections = [
    builders[stage](ds, {name: smk.input[f"{stage}_{ds}_{name}"] for name in files})
    for stage, ds, files in smk.params.sections
]
write_landing(smk.output[0], sections)
log.info("wrote %s: %s", smk.output[0], ", ".join(s.title for s in sections))
