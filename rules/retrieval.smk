"""Retrieval evaluation (only when retrieval.path is set).

Needs: a BEIR folder (or MS MARCO TSVs). Converts it (retrieval_prepare), runs
its corpus through the same split -> embed_<i> -> merge -> verify pipeline as
data set <retrieval.name> (split_<name> comes from rules/split.smk), embeds the queries with the query prompt, searches
exactly and scores like MTEB. Writes results/<name>/retrieval/metrics.json
(ndcg_at_10, recall_at_10, recall_at_100, mrr_at_10, map_at_10), per-query
scores, the top-k run and a report figure.
"""

if RETRIEVAL is not None:
    RETRIEVAL_SPEC = RetrievalSpec.from_config(config)

    rule retrieval_prepare:
        input:
            RETRIEVAL_SPEC.source_files(),
        output:
            corpus=plan.retrieval_corpus(RETRIEVAL),
            queries=f"results/{RETRIEVAL}/retrieval/queries.jsonl",
            qrels=f"results/{RETRIEVAL}/retrieval/qrels.json",
        log:
            f"logs/retrieval_prepare/{RETRIEVAL}.log",
        conda:
            "../envs/core.yaml"
        params:
            spec=RETRIEVAL_SPEC.__dict__,
        script:
            "../scripts/retrieval_prepare.py"

    use rule embed as embed_queries with:
        input:
            f"results/{RETRIEVAL}/retrieval/queries.jsonl",
        output:
            npy=f"results/{RETRIEVAL}/retrieval/queries.npy",
            ids=f"results/{RETRIEVAL}/retrieval/queries.ids.parquet",
            stats=f"results/{RETRIEVAL}/retrieval/queries.stats.json",
        log:
            f"logs/embed_queries/{RETRIEVAL}.log",
        benchmark:
            f"benchmarks/embed_queries/{RETRIEVAL}.tsv"
        retries: rule_resources("embed_queries", None)["retries"]
        threads: job_threads("embed_queries")
        resources:
            **job_resources("embed_queries"),
        params:
            **gpu_job_params(),
            embedding=stage_params(
                "embedding",
                prompt=config["retrieval"]["query_prompt"],
                prompt_name=config["retrieval"]["query_prompt_name"],
            ),
            compile_cache=untracked(stage_value("embedding", "compile_cache")),
            resume_root=untracked(resume_root(RETRIEVAL)),

    rule retrieval_evaluate:
        input:
            docs=f"results/{RETRIEVAL}/embeddings.npy",
            doc_ids=f"results/{RETRIEVAL}/ids.parquet",
            verification=f"results/{RETRIEVAL}/verification.json",
            queries=f"results/{RETRIEVAL}/retrieval/queries.npy",
            query_ids=f"results/{RETRIEVAL}/retrieval/queries.ids.parquet",
            qrels=f"results/{RETRIEVAL}/retrieval/qrels.json",
        output:
            metrics=report(
                f"results/{RETRIEVAL}/retrieval/metrics.json",
                caption="captions/retrieval_metrics.rst",
                category="Retrieval",
            ),
            per_query=f"results/{RETRIEVAL}/retrieval/per_query.parquet",
            run=f"results/{RETRIEVAL}/retrieval/run.parquet",
            figure=report(
                f"results/{RETRIEVAL}/retrieval/per_query_ndcg.png",
                caption="captions/retrieval_per_query.rst",
                category="Retrieval",
            ),
        log:
            f"logs/retrieval_evaluate/{RETRIEVAL}.log",
        benchmark:
            f"benchmarks/retrieval_evaluate/{RETRIEVAL}.tsv"
        conda:
            "../envs/embed.yaml"
        threads: job_threads("retrieval_evaluate")
        resources:
            **job_resources("retrieval_evaluate"),
        params:
            **gpu_job_params(),
            top_k=config["retrieval"]["top_k"],
            block_size=config["retrieval"]["block_size"],
            backend=config["retrieval"]["backend"],
            drop_identical_ids=config["retrieval"]["drop_identical_ids"],
        script:
            "../scripts/retrieval_evaluate.py"
