"""report: figures for `snakemake --report` and a machine-readable summary; landing:
the report's first screen.

Needs: the job table merge wrote (per-chunk stats and benchmarks), the manifest,
the verification JSON and the merged matrix. Writes results/<dataset>/report/{throughput,timeline,norms,map}.png
(flagged for the HTML report) and summary.json (records, tokens, wall time,
items/s, GPU-hours, estimated cost). landing writes results/report.rst, the global
description `snakemake --report` opens on: per stage and data set, records in and
out, rejects, wall time, throughput, GPU-hours and cost, and the metrics when
evaluated (shardflow.workflow.landing).
"""


rule report:
    input:
        jobs="results/{dataset}/embed/jobs.json",
        manifest="results/{dataset}/chunks/manifest.json",
        verification="results/{dataset}/verification.json",
        npy="results/{dataset}/embeddings.npy",
    output:
        throughput=report(
            "results/{dataset}/report/throughput.png",
            caption="captions/throughput.rst",
            category="Embedding",
            subcategory="{dataset}",
        ),
        timeline=report(
            "results/{dataset}/report/timeline.png",
            caption="captions/timeline.rst",
            category="Embedding",
            subcategory="{dataset}",
        ),
        norms=report(
            "results/{dataset}/report/norms.png",
            caption="captions/norms.rst",
            category="Embedding",
            subcategory="{dataset}",
        ),
        map=report(
            "results/{dataset}/report/map.png",
            caption="captions/map.rst",
            category="Embedding",
            subcategory="{dataset}",
        ),
        summary=report(
            "results/{dataset}/report/summary.json",
            caption="captions/summary.rst",
            category="Embedding",
            subcategory="{dataset}",
        ),
    log:
        "logs/report/{dataset}.log",
    conda:
        "../envs/report.yaml"
    params:
        map_method=config["report"]["map"],
        map_points=config["report"]["map_points"],
        gpu_hour_price=config["report"]["gpu_hour_price"],
        currency=config["report"]["currency"],
        # The GPUs each embed job held, which its stats do not record: GPU-hours count them.
        gpus=plan.job_gpus(config, "embed"),
    script:
        "../scripts/report.py"


rule landing:
    input:
        unpack(landing_inputs),
    output:
        LANDING,
    log:
        "logs/report/landing.log",
    conda:
        "../envs/core.yaml"
    params:
        sections=landing_params,
        gpu_hour_price=config["report"]["gpu_hour_price"],
        currency=config["report"]["currency"],
        # The embedding section's GPU-hours count each embed job's GPUs, as report's do.
        embed_gpus=plan.job_gpus(config, "embed"),
    script:
        "../scripts/landing.py"
