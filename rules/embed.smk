"""embed_<i>: one chunk through the embedding model, one GPU per job (or, on a
local host without GPUs, a share of the cores: no gpu resource, `resources.embed.threads: auto`).

Needs: results/<dataset>/chunks/chunk_<i>.jsonl. Writes the chunk's embeddings
(.npy), ids (.ids.parquet, row k = row k) and run statistics (.stats.json).
A killed job resumes from its last finished part, kept in the undeclared
results/<dataset>/.resume/ or `gpu_jobs.resume_dir`/<dataset>/ (Snakemake deletes
declared outputs of failed jobs).
"""


rule embed:
    input:
        "results/{dataset}/chunks/chunk_{chunk}.jsonl",
    output:
        npy=chunk_vectors("results/{dataset}/embed/embed_{chunk}.npy"),
        ids="results/{dataset}/embed/embed_{chunk}.ids.parquet",
        stats="results/{dataset}/embed/embed_{chunk}.stats.json",
    log:
        "logs/embed/{dataset}/chunk_{chunk}.log",
    benchmark:
        "benchmarks/embed/{dataset}/chunk_{chunk}.tsv"
    retries: rule_resources("embed", None)["retries"]
    conda:
        "../envs/embed.yaml"
    threads: job_threads("embed")
    resources:
        **job_resources("embed"),
        **embed_disk(),
    params:
        **gpu_job_params(),
        embedding=stage_params("embedding"),
        compile_cache=untracked(stage_value("embedding", "compile_cache")),
        resume_root=untracked(job_resume_root),
    script:
        "../scripts/embed.py"
