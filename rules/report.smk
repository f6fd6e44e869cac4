"""report: figures for `snakemake --report` and a machine-readable summary.

Needs: per-chunk stats and benchmarks, the manifest, the verification JSON and
the merged matrix. Writes results/<dataset>/report/{throughput,timeline,norms,map}.png
(flagged for the HTML report) and summary.json (records, tokens, wall time,
items/s, GPU-hours, estimated cost).
"""


rule report:
    input:
        stats=chunk_stats,
        benchmarks=chunk_benchmarks,
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
    script:
        "../scripts/report.py"
