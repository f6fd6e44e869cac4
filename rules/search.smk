"""search_queries -> embed_search_queries -> search: a file of queries searched against
the main data set's corpus (task `search`; only when search.queries is set).

Needs: the queries file (search.queries, local or in S3) and the data set's merged,
verified embeddings and ids (merge, verify). Writes under results/<dataset>/search/: the
queries as read (queries.jsonl), their embeddings, ids and embed record (the embed rule's
script, with the query prompt), and the hits (hits.parquet: query_id, rank, id, score,
row), a summary, the search's record (search.stats.json: its device, seconds) and a
figure for the report (shardflow.retrieval.batch).
"""

if config["search"]["queries"] is not None:

    rule search_queries:
        input:
            queries=stored(config["search"]["queries"]),
        output:
            queries="results/{dataset}/search/queries.jsonl",
        log:
            "logs/search_queries/{dataset}.log",
        conda:
            "../envs/core.yaml"
        params:
            format=config["search"]["format"],
            id_field=config["search"]["id_field"],
            text_field=config["search"]["text_field"],
        script:
            "../scripts/search_queries.py"

    use rule embed as embed_search_queries with:
        input:
            "results/{dataset}/search/queries.jsonl",
        output:
            npy="results/{dataset}/search/queries.npy",
            ids="results/{dataset}/search/queries.ids.parquet",
            stats="results/{dataset}/search/queries.stats.json",
        log:
            "logs/embed_search_queries/{dataset}.log",
        benchmark:
            "benchmarks/embed_search_queries/{dataset}.tsv"
        retries: rule_resources("embed_search_queries", None)["retries"]
        threads: job_threads("embed_search_queries")
        resources:
            **job_resources("embed_search_queries"),
            **embed_disk("queries"),
        params:
            **gpu_job_params(),
            embedding=stage_params(
                "embedding",
                prompt=config["search"]["query_prompt"],
                prompt_name=config["search"]["query_prompt_name"],
            ),
            compile_cache=untracked(stage_value("embedding", "compile_cache")),
            resume_root=untracked(job_resume_root),

    rule search:
        input:
            docs="results/{dataset}/embeddings.npy",
            doc_ids="results/{dataset}/ids.parquet",
            verification="results/{dataset}/verification.json",
            queries="results/{dataset}/search/queries.npy",
            query_ids="results/{dataset}/search/queries.ids.parquet",
        output:
            hits="results/{dataset}/search/hits.parquet",
            summary="results/{dataset}/search/summary.json",
            stats="results/{dataset}/search/search.stats.json",
            figure=report(
                "results/{dataset}/search/best_scores.png",
                caption="captions/search.rst",
                category="Search",
            ),
        log:
            "logs/search/{dataset}.log",
        benchmark:
            "benchmarks/search/{dataset}.tsv"
        retries: rule_resources("search", None)["retries"]
        conda:
            "../envs/embed.yaml"
        threads: job_threads("search")
        resources:
            **job_resources("search"),
        params:
            **gpu_job_params(),
            k=config["search"]["k"],
            block_size=config["search"]["block_size"],
            backend=config["search"]["backend"],
            model=config["embedding"]["model"],
        script:
            "../scripts/search.py"
