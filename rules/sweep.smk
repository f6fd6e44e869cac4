"""sweeps: every point x seed of each configured sweep runs as ordinary jobs of its stage.

Needs: the stage's shared inputs (the retrieval corpus chunks and queries; the main
data set's chunks for summarisation; its token shards for training). Writes, per
job, results/sweeps/<sweep>/<point>/seed=<n>/ (the stage's outputs, its metrics
JSON), and per sweep results/sweeps/<sweep>/: runs and summary tables (Parquet, CSV),
table.md and table.tex, best.json, points.json and plots/ (collect_sweep_<name>).

A job's parameters come from the stage's getters (stage_params, rule_resources),
which overlay the job's point and seed when its wildcards name a sweep: a job reruns
when its own values change, never for a key it does not depend on, and a new grid
value or seed adds only its jobs and the collection (shardflow/sweep/__init__.py).
"""

SWEEP_JOB = "results/sweeps/{sweep}/{point}/seed={seed}"
SWEEP_LOG = "logs/sweeps/{sweep}/{point}/seed={seed}"
SWEEP_BENCH = "benchmarks/sweeps/{sweep}/{point}/seed={seed}"


wildcard_constraints:
    sweep=SWEEP_FOLDERS,
    point=POINT_ID_REGEX,
    seed=SEED_REGEX,


if sweeps_of_stage("retrieval"):

    use rule embed as sweep_embed with:
        input:
            f"results/{RETRIEVAL}/chunks/chunk_{{chunk}}.jsonl",
        output:
            npy=f"{SWEEP_JOB}/embed/embed_{{chunk}}.npy",
            ids=f"{SWEEP_JOB}/embed/embed_{{chunk}}.ids.parquet",
            stats=f"{SWEEP_JOB}/embed/embed_{{chunk}}.stats.json",
        log:
            f"{SWEEP_LOG}/embed_{{chunk}}.log",
        benchmark:
            f"{SWEEP_BENCH}/embed_{{chunk}}.tsv"
        params:
            **gpu_job_params(),
            embedding=stage_params("embedding"),
            compile_cache=untracked(stage_value("embedding", "compile_cache")),
            resume_root=untracked(sweep_resume_root),

    use rule merge as sweep_merge with:
        input:
            npy=per_chunk(f"{SWEEP_JOB}/embed/embed_{{chunk}}.npy", RETRIEVAL),
            ids=per_chunk(f"{SWEEP_JOB}/embed/embed_{{chunk}}.ids.parquet", RETRIEVAL),
            stats=per_chunk(f"{SWEEP_JOB}/embed/embed_{{chunk}}.stats.json", RETRIEVAL),
            benchmarks=per_chunk(f"{SWEEP_BENCH}/embed_{{chunk}}.tsv", RETRIEVAL),
        output:
            npy=f"{SWEEP_JOB}/embeddings.npy",
            ids=f"{SWEEP_JOB}/ids.parquet",
            jobs=f"{SWEEP_JOB}/embed/jobs.json",
        log:
            f"{SWEEP_LOG}/merge.log",
        benchmark:
            f"{SWEEP_BENCH}/merge.tsv"

    use rule verify as sweep_verify with:
        input:
            npy=f"{SWEEP_JOB}/embeddings.npy",
            ids=f"{SWEEP_JOB}/ids.parquet",
            manifest=f"results/{RETRIEVAL}/chunks/manifest.json",
        output:
            f"{SWEEP_JOB}/verification.json",
        log:
            f"{SWEEP_LOG}/verify.log",
        params:
            model=stage_value("embedding", "model"),
            norm_tolerance=config["verify"]["norm_tolerance"],
            failed_json=f"{SWEEP_LOG}/verify.failed.json",

    use rule embed_queries as sweep_embed_queries with:
        input:
            f"results/{RETRIEVAL}/retrieval/queries.jsonl",
        output:
            npy=f"{SWEEP_JOB}/queries.npy",
            ids=f"{SWEEP_JOB}/queries.ids.parquet",
            stats=f"{SWEEP_JOB}/queries.stats.json",
        log:
            f"{SWEEP_LOG}/embed_queries.log",
        benchmark:
            f"{SWEEP_BENCH}/embed_queries.tsv"
        params:
            **gpu_job_params(),
            embedding=sweep_query_embedding,
            compile_cache=untracked(stage_value("embedding", "compile_cache")),
            resume_root=untracked(sweep_resume_root),

    use rule retrieval_evaluate as sweep_retrieval_evaluate with:
        input:
            docs=f"{SWEEP_JOB}/embeddings.npy",
            doc_ids=f"{SWEEP_JOB}/ids.parquet",
            verification=f"{SWEEP_JOB}/verification.json",
            queries=f"{SWEEP_JOB}/queries.npy",
            query_ids=f"{SWEEP_JOB}/queries.ids.parquet",
            qrels=f"results/{RETRIEVAL}/retrieval/qrels.json",
        output:
            metrics=f"{SWEEP_JOB}/metrics.json",
            per_query=f"{SWEEP_JOB}/per_query.parquet",
            run=f"{SWEEP_JOB}/run.parquet",
            figure=f"{SWEEP_JOB}/per_query_ndcg.png",
        log:
            f"{SWEEP_LOG}/retrieval_evaluate.log",
        benchmark:
            f"{SWEEP_BENCH}/retrieval_evaluate.tsv"
        params:
            **gpu_job_params(),
            top_k=stage_value("retrieval", "top_k"),
            block_size=stage_value("retrieval", "block_size"),
            backend=stage_value("retrieval", "backend"),
            drop_identical_ids=stage_value("retrieval", "drop_identical_ids"),


if sweeps_of_stage("summarise"):

    use rule summarise as sweep_summarise with:
        input:
            f"results/{DATASET}/chunks/chunk_{{chunk}}.jsonl",
        output:
            summaries=f"{SWEEP_JOB}/summarise/summaries_{{chunk}}.jsonl",
            stats=f"{SWEEP_JOB}/summarise/summaries_{{chunk}}.stats.json",
        log:
            f"{SWEEP_LOG}/summarise_{{chunk}}.log",
        benchmark:
            f"{SWEEP_BENCH}/summarise_{{chunk}}.tsv"
        params:
            **gpu_job_params(),
            summarise=summarise_params,
            resume_root=untracked(sweep_resume_root),

    use rule merge_summaries as sweep_merge_summaries with:
        input:
            summaries=per_chunk(
                f"{SWEEP_JOB}/summarise/summaries_{{chunk}}.jsonl", DATASET
            ),
            stats=per_chunk(
                f"{SWEEP_JOB}/summarise/summaries_{{chunk}}.stats.json", DATASET
            ),
            benchmarks=per_chunk(f"{SWEEP_BENCH}/summarise_{{chunk}}.tsv", DATASET),
            manifest=f"results/{DATASET}/chunks/manifest.json",
        output:
            summaries=f"{SWEEP_JOB}/summaries.jsonl",
            jobs=f"{SWEEP_JOB}/summarise/jobs.json",
        log:
            f"{SWEEP_LOG}/merge_summaries.log",
        benchmark:
            f"{SWEEP_BENCH}/merge_summaries.tsv"

    use rule evaluate_summaries as sweep_evaluate_summaries with:
        input:
            summaries=f"{SWEEP_JOB}/summaries.jsonl",
            sources=split_inputs(DATASETS[DATASET]),
        output:
            metrics=f"{SWEEP_JOB}/metrics.json",
            per_document=f"{SWEEP_JOB}/per_document.parquet",
            figure=f"{SWEEP_JOB}/rouge.png",
        log:
            f"{SWEEP_LOG}/evaluate_summaries.log",
        benchmark:
            f"{SWEEP_BENCH}/evaluate_summaries.tsv"


if sweeps_of_stage("train"):

    use rule train as sweep_train with:
        input:
            shards=f"results/{DATASET}/shards/metadata.json",
            tokenizer=f"results/{DATASET}/tokenizer/{TOKENIZER_META}",
        output:
            best=f"{SWEEP_JOB}/train/best.safetensors",
            last=f"{SWEEP_JOB}/train/last.safetensors",
            config=f"{SWEEP_JOB}/train/config.json",
            losses=f"{SWEEP_JOB}/train/losses.parquet",
            metrics=f"{SWEEP_JOB}/train/metrics.json",
            plot=f"{SWEEP_JOB}/train/loss.png",
            sample=f"{SWEEP_JOB}/train/sample.txt",
            hf=directory(f"{SWEEP_JOB}/train/hf"),
        log:
            f"{SWEEP_LOG}/train.log",
        benchmark:
            f"{SWEEP_BENCH}/train.tsv"
        threads: job_threads("train", jobs=sweep_jobs_at_once)
        params:
            **gpu_job_params(as_json=True),
            train=train_params,
            compile_cache=untracked(stage_value("train", "compile_cache")),
            sample_tokens=stage_value("train", "sample_tokens"),
            out=f"{SWEEP_JOB}/train",
            resume=untracked(sweep_train_resume),
            tokenizer=f"results/{DATASET}/tokenizer",


for spec in SWEEPS.values():

    rule:
        name:
            sweep_rule_name(spec.name)
        input:
            unpack(sweep_inputs(spec.name)),
        output:
            **sweep_outputs(spec.name),
        log:
            f"logs/sweeps/{spec.folder}/collect.log",
        conda:
            "../envs/report.yaml"
        params:
            spec=spec,
            jobs=sweep_job_shapes(spec.name),
        script:
            "../scripts/collect_sweep.py"
