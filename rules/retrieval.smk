"""Retrieval evaluation (only when retrieval.path is set).

Needs: a BEIR folder (or MS MARCO TSVs). Converts it (retrieval_prepare), runs
its corpus through the same split -> embed_<i> -> merge -> verify pipeline as
data set <retrieval.name>, embeds the queries with the query prompt, searches
exactly and scores like MTEB. Writes results/<name>/retrieval/metrics.json
(ndcg_at_10, recall_at_10, recall_at_100, mrr_at_10, map_at_10), per-query
scores, the top-k run and a report figure.
"""

if RETRIEVAL is not None:

    rule retrieval_prepare:
        input:
            retrieval.RetrievalSpec.from_config(config).source_files(),
        output:
            corpus=f"results/{RETRIEVAL}/retrieval/corpus.jsonl",
            queries=f"results/{RETRIEVAL}/retrieval/queries.jsonl",
            qrels=f"results/{RETRIEVAL}/retrieval/qrels.json",
        log:
            f"logs/retrieval_prepare/{RETRIEVAL}.log",
        conda:
            "../envs/core.yaml"
        params:
            spec=retrieval.RetrievalSpec.from_config(config).__dict__,
        script:
            "../scripts/retrieval_prepare.py"

    use rule split as split_retrieval_corpus with:
        input:
            f"results/{RETRIEVAL}/retrieval/corpus.jsonl",
        output:
            chunks=chunk_list(RETRIEVAL, "results/{dataset}/chunks/chunk_{chunk}.jsonl"),
            manifest=f"results/{RETRIEVAL}/chunks/manifest.json",
            rejects=f"results/{RETRIEVAL}/chunks/rejects.jsonl",
        log:
            f"logs/split/{RETRIEVAL}.log",
        benchmark:
            f"benchmarks/split/{RETRIEVAL}.tsv"
        params:
            n_chunks=N_CHUNKS[RETRIEVAL],
            by="records",
            rate_items_per_s=config["chunking"]["rate_items_per_s"],
            reader={**plan.reader_options(config).__dict__, **plan.CHUNK_READER},

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
        params:
            embedding=embedding_params(
                prompt=config["retrieval"]["query_prompt"],
                prompt_name=config["retrieval"]["query_prompt_name"],
            ),
            resume_root=resume_root(RETRIEVAL),

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
        threads: gpu_job_threads
        resources:
            gpu=gpu_request,
            mem_mb=embed_mem_mb,
        params:
            top_k=config["retrieval"]["top_k"],
            block_size=config["retrieval"]["block_size"],
            backend=config["retrieval"]["backend"],
            drop_identical_ids=config["retrieval"]["drop_identical_ids"],
        script:
            "../scripts/retrieval_evaluate.py"
