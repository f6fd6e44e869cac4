"""merge: per-chunk embeddings into one memory-mappable matrix, in chunk order.

Needs: every embed_<i>.npy and .ids.parquet. Writes results/<dataset>/embeddings.npy
and ids.parquet (row k of one is row k of the other), streaming.
"""


rule merge:
    input:
        npy=chunk_embeddings,
        ids=chunk_ids,
    output:
        npy="results/{dataset}/embeddings.npy",
        ids="results/{dataset}/ids.parquet",
    log:
        "logs/merge/{dataset}.log",
    benchmark:
        "benchmarks/merge/{dataset}.tsv"
    conda:
        "../envs/core.yaml"
    script:
        "../scripts/merge.py"
