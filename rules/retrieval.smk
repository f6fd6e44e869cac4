"""Retrieval evaluation (only when retrieval.path is set).

Needs: a BEIR folder (or MS MARCO TSVs), local or in S3 (`retrieval.path: s3://...`).
Converts it, one job per kind of file, so that an edit reruns only what reads it:
retrieval_prepare (the corpus),
retrieval_queries (the judged queries), retrieval_qrels. Runs its corpus through the
same split -> embed_<i> -> merge -> verify pipeline as data set <retrieval.name>
(split_<name> comes from rules/split.smk), embeds the queries with the query prompt,
searches exactly and scores like MTEB. Writes results/<name>/retrieval/metrics.json
(ndcg_at_10, recall_at_10, recall_at_100, mrr_at_10, map_at_10), per-query
scores, the top-k run, a report figure and evaluate.stats.json (what the search ran
with, `made_with`: its device and GPU, for provenance).
"""

if RETRIEVAL is not None:
    # local files, or s3:// objects fetched through Snakemake storage
    RETRIEVAL_CORPUS_FILE, RETRIEVAL_QUERIES_FILE, RETRIEVAL_QRELS_FILE = (
        stored(f) for f in RETRIEVAL_SPEC.source_files()
    )

    rule retrieval_prepare:
        input:
            corpus=RETRIEVAL_CORPUS_FILE,
        output:
            corpus=plan.retrieval_corpus(RETRIEVAL),
        log:
            f"logs/retrieval_prepare/{RETRIEVAL}.log",
        conda:
            "../envs/core.yaml"
        params:
            format=config["retrieval"]["format"],
        script:
            "../scripts/retrieval_prepare.py"

    # Only judged queries are embedded, so the queries depend on the qrels through the
    # set of judged ids alone: `judged` records it (read at parse time), and ancient()
    # keeps the qrels file's time from rerunning this job and embed_queries when a
    # judgement is added or regraded (retrieval_qrels and retrieval_evaluate rerun).
    rule retrieval_queries:
        input:
            queries=RETRIEVAL_QUERIES_FILE,
            qrels=ancient(RETRIEVAL_QRELS_FILE),
        output:
            queries=f"results/{RETRIEVAL}/retrieval/queries.jsonl",
        log:
            f"logs/retrieval_queries/{RETRIEVAL}.log",
        conda:
            "../envs/core.yaml"
        params:
            format=config["retrieval"]["format"],
            judged=RETRIEVAL_SPEC.judged_queries(),
        script:
            "../scripts/retrieval_queries.py"

    rule retrieval_qrels:
        input:
            qrels=RETRIEVAL_QRELS_FILE,
        output:
            qrels=f"results/{RETRIEVAL}/retrieval/qrels.json",
        log:
            f"logs/retrieval_qrels/{RETRIEVAL}.log",
        conda:
            "../envs/core.yaml"
        script:
            "../scripts/retrieval_qrels.py"

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
            **embed_disk("queries"),
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
            stats=f"results/{RETRIEVAL}/retrieval/evaluate.stats.json",
        log:
            f"logs/retrieval_evaluate/{RETRIEVAL}.log",
        benchmark:
            f"benchmarks/retrieval_evaluate/{RETRIEVAL}.tsv"
        retries: rule_resources("retrieval_evaluate", None)["retries"]
        conda:
            "../envs/embed.yaml"
        threads: job_threads("retrieval_evaluate")
        resources:
            **job_resources("retrieval_evaluate"),
        params:
            **gpu_job_params(),
            **retrieval_scoring(),
            top_k=config["retrieval"]["top_k"],
            block_size=config["retrieval"]["block_size"],
            backend=config["retrieval"]["backend"],
            drop_identical_ids=config["retrieval"]["drop_identical_ids"],
            model=config["embedding"]["model"],
        script:
            "../scripts/retrieval_evaluate.py"
