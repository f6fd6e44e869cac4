# shardflow: split -> embed_<i> -> merge -> verify -> report.
# A table of contents; every rule lives in rules/, every piece of logic in shardflow/.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/corpus.smk"
include: "rules/split.smk"
include: "rules/embed.smk"
include: "rules/merge.smk"
include: "rules/verify.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        final_targets(),
