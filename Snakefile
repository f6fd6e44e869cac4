# shardflow: split_<dataset> -> embed_<i> -> merge -> verify -> report, provenance beside;
# retrieval evaluation on its own data set. A table of contents: every rule lives in
# rules/, every piece of logic in shardflow/ (docs/architecture.md).
import os

from snakemake.utils import min_version

min_version("9.0")


# Relative to this file, so the workflow also runs with --directory elsewhere.
configfile: os.path.join(workflow.basedir, "config/config.yaml")


include: "rules/common.smk"
include: "rules/corpus.smk"
include: "rules/split.smk"
include: "rules/embed.smk"
include: "rules/merge.smk"
include: "rules/verify.smk"
include: "rules/report.smk"
include: "rules/retrieval.smk"
include: "rules/neighbours.smk"
include: "rules/search.smk"
include: "rules/summarise.smk"
include: "rules/train.smk"
include: "rules/sweep.smk"
include: "rules/provenance.smk"


# Inside a SLURM job, retries belong to the controller alone; wildcard constraints hold
# in S3 too; a profile's GPU for jobs that use none is named; a model this machine lacks
# stops the run where a job that loads it has work to do (rules/common.smk).
one_retry_layer()
constraints_in_storage()
name_gpu_requests()
check_models()


# The first screen of `snakemake --report`: the run's headline numbers per stage.
report: landing_text()


rule all:
    default_target: True
    input:
        final_targets(),
