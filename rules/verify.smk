"""verify: the merged embeddings are complete and sane, or the workflow stops.

Needs: the merged matrix and ids, the split manifest (records read). Writes
results/<dataset>/verification.json; on failure the job fails with a message
listing each failed check (the failed result is kept in the log folder).
"""


rule verify:
    input:
        npy="results/{dataset}/embeddings.npy",
        ids="results/{dataset}/ids.parquet",
        manifest="results/{dataset}/chunks/manifest.json",
    output:
        "results/{dataset}/verification.json",
    log:
        "logs/verify/{dataset}.log",
    conda:
        "../envs/core.yaml"
    params:
        model=config["embedding"]["model"],
        norm_tolerance=config["verify"]["norm_tolerance"],
        failed_json="logs/verify/{dataset}.failed.json",
        # A failed row names its embed job's log; where the log lies reruns nothing.
        embed_log=untracked(chunk_logs("embed")),
    script:
        "../scripts/verify.py"
