"""merge: per-chunk embeddings into one memory-mappable matrix, in chunk order, and
the per-chunk job records into one table.

Needs: every embed_<i>.npy, .ids.parquet, .stats.json and benchmark. Writes
results/<dataset>/embeddings.npy and ids.parquet (row k of one is row k of the
other), streaming, and embed/jobs.json (one row per chunk job: its statistics and
Snakemake benchmark), which verify, report and provenance read instead of every
chunk's files: the DAG reads split -> embed_<i> -> merge -> verify -> report.
"""


rule merge:
    input:
        npy=per_chunk("results/{dataset}/embed/embed_{chunk}.npy"),
        ids=per_chunk("results/{dataset}/embed/embed_{chunk}.ids.parquet"),
        stats=per_chunk("results/{dataset}/embed/embed_{chunk}.stats.json"),
        benchmarks=per_chunk("benchmarks/embed/{dataset}/chunk_{chunk}.tsv"),
    output:
        npy="results/{dataset}/embeddings.npy",
        ids="results/{dataset}/ids.parquet",
        jobs="results/{dataset}/embed/jobs.json",
    log:
        "logs/merge/{dataset}.log",
    benchmark:
        "benchmarks/merge/{dataset}.tsv"
    conda:
        "../envs/core.yaml"
    script:
        "../scripts/merge.py"
