"""split: the corpus into exactly N chunk files, streaming.

Needs: the corpus files (input.path, or the demo corpus; s3:// objects are
fetched through Snakemake storage). Writes:
results/<dataset>/chunks/chunk_<i>.jsonl, manifest.json (per chunk: items,
bytes, sha256, estimated time) and rejects.jsonl (bad records, when skipped).
The retrieval corpus reuses this rule (rules/retrieval.smk).
"""


rule split:
    input:
        corpus_files(),
    output:
        chunks=chunk_list(DATASET, "results/{dataset}/chunks/chunk_{chunk}.jsonl"),
        manifest=f"results/{DATASET}/chunks/manifest.json",
        rejects=f"results/{DATASET}/chunks/rejects.jsonl",
    log:
        f"logs/split/{DATASET}.log",
    benchmark:
        f"benchmarks/split/{DATASET}.tsv"
    conda:
        "../envs/core.yaml"
    params:
        n_chunks=N_CHUNKS[DATASET],
        by=config["chunking"]["by"],
        rate_items_per_s=config["chunking"]["rate_items_per_s"],
        reader=plan.reader_options(config).__dict__,
    script:
        "../scripts/split.py"
