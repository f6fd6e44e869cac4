"""neighbours_<i> -> merge_neighbours: each document's nearest documents in its own
corpus, and the corpus's near-duplicates (task `neighbours`).

Needs: the merged, verified embeddings and ids of the data set (merge, verify) and its
split's manifest (a chunk's rows). Writes, per chunk, the chunk's neighbours table
(.parquet) and its job's record (.stats.json); merged, results/<dataset>/neighbours.parquet,
and under results/<dataset>/neighbours/ the near-duplicate pairs, their groups, a summary,
the job table and a figure for the report. No resume parts: a chunk's search is one
pass over the matrix, short beside its embed job (shardflow.retrieval.neighbours).
"""


rule neighbours:
    input:
        npy="results/{dataset}/embeddings.npy",
        ids="results/{dataset}/ids.parquet",
        verification="results/{dataset}/verification.json",
        manifest="results/{dataset}/chunks/manifest.json",
    output:
        table="results/{dataset}/neighbours/neighbours_{chunk}.parquet",
        stats="results/{dataset}/neighbours/neighbours_{chunk}.stats.json",
    log:
        "logs/neighbours/{dataset}/chunk_{chunk}.log",
    benchmark:
        "benchmarks/neighbours/{dataset}/chunk_{chunk}.tsv"
    retries: rule_resources("neighbours", None)["retries"]
    conda:
        "../envs/embed.yaml"
    threads: job_threads("neighbours")
    resources:
        **job_resources("neighbours"),
    params:
        **gpu_job_params(),
        k=config["neighbours"]["k"],
        block_size=config["neighbours"]["block_size"],
        backend=config["neighbours"]["backend"],
        model=config["embedding"]["model"],
    script:
        "../scripts/neighbours.py"


rule merge_neighbours:
    input:
        tables=per_chunk("results/{dataset}/neighbours/neighbours_{chunk}.parquet"),
        stats=per_chunk("results/{dataset}/neighbours/neighbours_{chunk}.stats.json"),
        benchmarks=per_chunk("benchmarks/neighbours/{dataset}/chunk_{chunk}.tsv"),
        ids="results/{dataset}/ids.parquet",
    output:
        table="results/{dataset}/neighbours.parquet",
        pairs="results/{dataset}/neighbours/near_duplicates.parquet",
        groups="results/{dataset}/neighbours/duplicate_groups.parquet",
        summary="results/{dataset}/neighbours/summary.json",
        jobs="results/{dataset}/neighbours/jobs.json",
        figure=report(
            "results/{dataset}/neighbours/nearest.png",
            caption="captions/neighbours.rst",
            category="Neighbours",
        ),
    log:
        "logs/merge_neighbours/{dataset}.log",
    benchmark:
        "benchmarks/merge_neighbours/{dataset}.tsv"
    conda:
        "../envs/core.yaml"
    params:
        k=config["neighbours"]["k"],
        duplicate_threshold=config["neighbours"]["duplicate_threshold"],
    script:
        "../scripts/merge_neighbours.py"
