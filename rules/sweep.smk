"""sweeps: every point x seed of each configured sweep runs as ordinary jobs of its stage.

Needs: the stage's shared inputs (the retrieval corpus chunks and queries; the main
data set's chunks for summarisation and embed sweeps, and for embed sweeps the main
run's embeddings, which each job's vectors are compared with; its token shards for
training). Writes, per
job, results/sweeps/<sweep>/<point>/seed=<n>/ (the stage's outputs, its metrics
JSON), and per sweep results/sweeps/<sweep>/: spec.json (sweep_spec: what decides the
tables), runs and summary tables (Parquet, CSV), table.md and table.tex, best.json,
points.json, cost.json and plots/ (collect_sweep_<name>; an embed job's metrics hold
its GPU-hours, which the collection prices at report.gpu_hour_price and names in
report.currency, so a changed price or currency reruns only the collection).
Retrieval jobs read corpus and query embeddings named by their settings, not by the
point (shardflow/sweep/shared.py): one set per distinct settings under
results/sweeps/_embeddings/<data set>/, or the main run's own where the settings are
the main run's. Each stage's job outputs sit
under stage_sweep_job(<stage>): its {sweep} matches that stage's sweeps only, as every
stage's jobs write a metrics.json.

A job's parameters come from the stage's getters (stage_params, rule_resources),
which overlay the job's point and seed when its wildcards name a sweep: a job reruns
when its own values change, never for a key it does not depend on, and a new grid
value or seed adds only its jobs and the collection (shardflow/sweep/__init__.py).
"""

from shardflow.sweep.shared import KEY_REGEX as SETTINGS_KEY_REGEX

SWEEP_JOB = "results/sweeps/{sweep}/{point}/seed={seed}"
SWEEP_LOG = "logs/sweeps/{sweep}/{point}/seed={seed}"
SWEEP_BENCH = "benchmarks/sweeps/{sweep}/{point}/seed={seed}"


wildcard_constraints:
    sweep=SWEEP_FOLDERS,
    point=POINT_ID_REGEX,
    seed=SEED_REGEX,
    settings=SETTINGS_KEY_REGEX,


if sweeps_of_stage("retrieval"):
    RETRIEVAL_JOB = stage_sweep_job("retrieval")
    # Embeddings are named by their settings (shardflow.sweep.shared): one set per
    # distinct embedding section, data set and device, shared by every job that reads
    # it; a job whose settings are the main run's reads results/<dataset>/ instead.
    CORPUS = shared_embeddings("results", "corpus", "{settings}")
    QUERIES = shared_embeddings("results", "queries", "{settings}")

    use rule embed as sweep_embed with:
        input:
            f"results/{RETRIEVAL}/chunks/chunk_{{chunk}}.jsonl",
        output:
            npy=chunk_vectors(f"{CORPUS}/embed/embed_{{chunk}}.npy"),
            ids=f"{CORPUS}/embed/embed_{{chunk}}.ids.parquet",
            stats=f"{CORPUS}/embed/embed_{{chunk}}.stats.json",
        log:
            shared_embeddings("logs", "corpus", "{settings}/embed_{chunk}.log"),
        benchmark:
            shared_embeddings("benchmarks", "corpus", "{settings}/embed_{chunk}.tsv")
        params:
            **gpu_job_params(),
            embedding=shared_embedding_value("corpus", "params"),
            compile_cache=untracked(shared_embedding_value("corpus", "compile_cache")),
            resume_root=untracked(shared_resume_root("corpus")),

    use rule merge as sweep_merge with:
        input:
            npy=per_chunk(f"{CORPUS}/embed/embed_{{chunk}}.npy", RETRIEVAL),
            ids=per_chunk(f"{CORPUS}/embed/embed_{{chunk}}.ids.parquet", RETRIEVAL),
            stats=per_chunk(f"{CORPUS}/embed/embed_{{chunk}}.stats.json", RETRIEVAL),
            benchmarks=per_chunk(
                shared_embeddings(
                    "benchmarks", "corpus", "{settings}/embed_{chunk}.tsv"
                ),
                RETRIEVAL,
            ),
        output:
            npy=f"{CORPUS}/embeddings.npy",
            ids=f"{CORPUS}/ids.parquet",
            jobs=f"{CORPUS}/embed/jobs.json",
        log:
            shared_embeddings("logs", "corpus", "{settings}/merge.log"),
        benchmark:
            shared_embeddings("benchmarks", "corpus", "{settings}/merge.tsv")

    use rule verify as sweep_verify with:
        input:
            npy=f"{CORPUS}/embeddings.npy",
            ids=f"{CORPUS}/ids.parquet",
            manifest=f"results/{RETRIEVAL}/chunks/manifest.json",
        output:
            f"{CORPUS}/verification.json",
        log:
            shared_embeddings("logs", "corpus", "{settings}/verify.log"),
        params:
            model=shared_embedding_value("corpus", "model"),
            norm_tolerance=config["verify"]["norm_tolerance"],
            failed_json=shared_embeddings(
                "logs", "corpus", "{settings}/verify.failed.json"
            ),
            embed_log=untracked(chunk_logs("sweep_embed")),

    use rule embed_queries as sweep_embed_queries with:
        input:
            f"results/{RETRIEVAL}/retrieval/queries.jsonl",
        output:
            npy=f"{QUERIES}/queries.npy",
            ids=f"{QUERIES}/queries.ids.parquet",
            stats=f"{QUERIES}/queries.stats.json",
        log:
            shared_embeddings("logs", "queries", "{settings}/embed_queries.log"),
        benchmark:
            shared_embeddings("benchmarks", "queries", "{settings}/embed_queries.tsv")
        params:
            **gpu_job_params(),
            embedding=shared_embedding_value("queries", "params"),
            compile_cache=untracked(shared_embedding_value("queries", "compile_cache")),
            resume_root=untracked(shared_resume_root("queries")),

    use rule retrieval_evaluate as sweep_retrieval_evaluate with:
        input:
            unpack(sweep_retrieval_inputs),
        output:
            metrics=f"{RETRIEVAL_JOB}/metrics.json",
            per_query=f"{RETRIEVAL_JOB}/per_query.parquet",
            run=f"{RETRIEVAL_JOB}/run.parquet",
            figure=f"{RETRIEVAL_JOB}/per_query_ndcg.png",
            stats=f"{RETRIEVAL_JOB}/evaluate.stats.json",
        log:
            f"{SWEEP_LOG}/retrieval_evaluate.log",
        benchmark:
            f"{SWEEP_BENCH}/retrieval_evaluate.tsv"
        params:
            **gpu_job_params(),
            **retrieval_scoring(),
            top_k=stage_value("retrieval", "top_k"),
            block_size=stage_value("retrieval", "block_size"),
            backend=stage_value("retrieval", "backend"),
            drop_identical_ids=stage_value("retrieval", "drop_identical_ids"),
            model=stage_value("embedding", "model"),


if sweeps_of_stage("summarise"):
    SUMMARISE_JOB = stage_sweep_job("summarise")

    use rule summarise as sweep_summarise with:
        input:
            f"results/{DATASET}/chunks/chunk_{{chunk}}.jsonl",
        output:
            summaries=f"{SUMMARISE_JOB}/summarise/summaries_{{chunk}}.jsonl",
            stats=f"{SUMMARISE_JOB}/summarise/summaries_{{chunk}}.stats.json",
        log:
            f"{SWEEP_LOG}/summarise_{{chunk}}.log",
        benchmark:
            f"{SWEEP_BENCH}/summarise_{{chunk}}.tsv"
        params:
            **gpu_job_params(device_decides=SUMMARISE_USES_GPU),
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
            summaries=f"{SUMMARISE_JOB}/summaries.jsonl",
            jobs=f"{SUMMARISE_JOB}/summarise/jobs.json",
        log:
            f"{SWEEP_LOG}/merge_summaries.log",
        benchmark:
            f"{SWEEP_BENCH}/merge_summaries.tsv"

    use rule evaluate_summaries as sweep_evaluate_summaries with:
        input:
            summaries=f"{SWEEP_JOB}/summaries.jsonl",
            sources=split_inputs(DATASETS[DATASET]),
            split_rejects=f"results/{DATASET}/chunks/rejects.jsonl",
        output:
            metrics=f"{SUMMARISE_JOB}/metrics.json",
            per_document=f"{SUMMARISE_JOB}/per_document.parquet",
            figure=f"{SUMMARISE_JOB}/rouge.png",
        log:
            f"{SWEEP_LOG}/evaluate_summaries.log",
        benchmark:
            f"{SWEEP_BENCH}/evaluate_summaries.tsv"


if sweeps_of_stage("embed"):
    # Every point and seed embeds the main data set's chunks itself (a seed is a
    # repeat of the measurement); its vectors are compared with the main run's.
    EMBED_JOB = stage_sweep_job("embed")

    use rule embed as sweep_embed_chunk with:
        input:
            f"results/{DATASET}/chunks/chunk_{{chunk}}.jsonl",
        output:
            npy=chunk_vectors(f"{EMBED_JOB}/embed/embed_{{chunk}}.npy"),
            ids=f"{EMBED_JOB}/embed/embed_{{chunk}}.ids.parquet",
            stats=f"{EMBED_JOB}/embed/embed_{{chunk}}.stats.json",
        log:
            f"{SWEEP_LOG}/embed_{{chunk}}.log",
        benchmark:
            f"{SWEEP_BENCH}/embed_{{chunk}}.tsv"
        threads: job_threads("embed", jobs=one_job_at_a_time)
        params:
            **gpu_job_params(),
            embedding=stage_params("embedding"),
            compile_cache=untracked(stage_value("embedding", "compile_cache")),
            resume_root=untracked(sweep_resume_root),

    use rule merge as sweep_embed_merge with:
        input:
            npy=per_chunk(f"{SWEEP_JOB}/embed/embed_{{chunk}}.npy", DATASET),
            ids=per_chunk(f"{SWEEP_JOB}/embed/embed_{{chunk}}.ids.parquet", DATASET),
            stats=per_chunk(f"{SWEEP_JOB}/embed/embed_{{chunk}}.stats.json", DATASET),
            benchmarks=per_chunk(f"{SWEEP_BENCH}/embed_{{chunk}}.tsv", DATASET),
        output:
            npy=f"{EMBED_JOB}/embeddings.npy",
            ids=f"{EMBED_JOB}/ids.parquet",
            jobs=f"{EMBED_JOB}/embed/jobs.json",
        log:
            f"{SWEEP_LOG}/merge.log",
        benchmark:
            f"{SWEEP_BENCH}/merge.tsv"

    use rule verify as sweep_embed_verify with:
        input:
            npy=f"{SWEEP_JOB}/embeddings.npy",
            ids=f"{SWEEP_JOB}/ids.parquet",
            manifest=f"results/{DATASET}/chunks/manifest.json",
        output:
            f"{EMBED_JOB}/verification.json",
        log:
            f"{SWEEP_LOG}/verify.log",
        params:
            model=stage_value("embedding", "model"),
            norm_tolerance=config["verify"]["norm_tolerance"],
            failed_json=f"{SWEEP_LOG}/verify.failed.json",
            embed_log=untracked(chunk_logs("sweep_embed_chunk")),

    rule sweep_embed_metrics:
        input:
            unpack(sweep_embed_metrics_inputs),
        output:
            f"{EMBED_JOB}/metrics.json",
        log:
            f"{SWEEP_LOG}/embed_metrics.log",
        benchmark:
            f"{SWEEP_BENCH}/embed_metrics.tsv"
        conda:
            "../envs/core.yaml"
        script:
            "../scripts/embed_metrics.py"


if sweeps_of_stage("train"):
    TRAIN_JOB = stage_sweep_job("train")

    use rule train as sweep_train with:
        input:
            **tokenizer_files(DATASET),
            shards=f"results/{DATASET}/shards",
        output:
            best=f"{TRAIN_JOB}/train/best.safetensors",
            last=f"{TRAIN_JOB}/train/last.safetensors",
            config=f"{TRAIN_JOB}/train/config.json",
            losses=f"{TRAIN_JOB}/train/losses.parquet",
            metrics=f"{TRAIN_JOB}/train/metrics.json",
            plot=f"{TRAIN_JOB}/train/loss.png",
            sample=f"{TRAIN_JOB}/train/sample.txt",
            hf=directory(f"{TRAIN_JOB}/train/hf"),
        log:
            f"{SWEEP_LOG}/train.log",
        benchmark:
            f"{SWEEP_BENCH}/train.tsv"
        threads: job_threads("train", jobs=sweep_jobs_at_once, processes=train_processes)
        params:
            **gpu_job_params(as_json=True),
            train=train_params,
            compile_cache=untracked(stage_value("train", "compile_cache")),
            checkpoint_interval=untracked(stage_value("train", "checkpoint_interval")),
            sample_tokens=stage_value("train", "sample_tokens"),
            out=output_folder,
            resume=untracked(sweep_train_resume),
            tokenizer=tokenizer_folder,


if SWEEPS:

    # What decides a sweep's tables (metrics, goals, best, points, seeds), recorded as
    # this job's params and written to spec.json, the collection's input: a change
    # rewrites it, and the newer file reruns the collection, and only it. (A recorded
    # param of the collection alone would not do: a new metric adds plot outputs, and
    # Snakemake compares params only where every output has its record.) A script, not
    # a `run:` block: Snakemake runs a local `run:` job in a Snakemake process of its own,
    # which parses the whole workflow again (1.5 s of CPU a sweep, against 0.4 s).
    rule sweep_spec:
        output:
            "results/sweeps/{sweep}/spec.json",
        log:
            "logs/sweeps/{sweep}/spec.log",
        localrule: True
        params:
            spec=sweep_spec_record,
        script:
            "../scripts/sweep_spec.py"


for spec in SWEEPS.values():

    rule:
        name:
            collection_rule(spec.name)
        input:
            unpack(sweep_inputs(spec.name)),
        output:
            **sweep_outputs(spec.name),
        log:
            f"logs/sweeps/{spec.folder}/collect.log",
        conda:
            "../envs/report.yaml"
        params:
            # An embed sweep's report.gpu_hour_price and currency: its jobs record
            # GPU-hours, priced here, so a changed price or currency reruns this
            # collection and not the jobs.
            **sweep_price(spec.name),
            # The spec object reaches the script unrecorded (Snakemake records builtins
            # only); spec.json, an input, stands for it in the rerun triggers.
            spec=untracked(spec),
            jobs=sweep_job_shapes(spec.name),
        script:
            "../scripts/collect_sweep.py"
