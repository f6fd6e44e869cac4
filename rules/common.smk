"""Validation and parse-time helpers shared by every stage.

Needs: the config. Provides: DATASET, N_CHUNKS, CHUNKS and the input functions
the rules use. Logic lives in shardflow.plan (unit-tested).
"""

from shardflow import plan
from shardflow.configuration import load_schema, validate_config

validate_config(
    config, load_schema(workflow.source_path("../config/config.schema.yaml"))
)

DATASET = config["dataset"]
N_CHUNKS = plan.plan_n_chunks(config)
CHUNKS = list(range(N_CHUNKS))


wildcard_constraints:
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    chunk=r"\d+",


def corpus_files():
    return plan.corpus_inputs(config)


def chunk_files(wildcards):
    return expand(
        "results/{dataset}/chunks/chunk_{chunk}.jsonl",
        dataset=wildcards.dataset,
        chunk=CHUNKS,
    )


def chunk_embeddings(wildcards):
    return expand(
        "results/{dataset}/embed/embed_{chunk}.npy",
        dataset=wildcards.dataset,
        chunk=CHUNKS,
    )


def chunk_ids(wildcards):
    return expand(
        "results/{dataset}/embed/embed_{chunk}.ids.parquet",
        dataset=wildcards.dataset,
        chunk=CHUNKS,
    )


def chunk_stats(wildcards):
    return expand(
        "results/{dataset}/embed/embed_{chunk}.stats.json",
        dataset=wildcards.dataset,
        chunk=CHUNKS,
    )


def chunk_benchmarks(wildcards):
    return expand(
        "benchmarks/embed/{dataset}/chunk_{chunk}.tsv",
        dataset=wildcards.dataset,
        chunk=CHUNKS,
    )


def embed_mem_mb(wildcards, attempt):
    emb = config["embedding"]
    return emb["mem_mb"] + (attempt - 1) * emb["mem_mb_per_attempt"]


def final_targets():
    return [
        f"results/{DATASET}/verification.json",
        f"results/{DATASET}/report/summary.json",
    ]
