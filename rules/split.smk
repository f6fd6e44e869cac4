"""split: the corpus into exactly N_CHUNKS chunk files, streaming.

Needs: the corpus files (input.path, or the demo corpus). Writes:
results/<dataset>/chunks/chunk_<i>.jsonl, manifest.json (per chunk: items,
bytes, sha256, estimated time) and rejects.jsonl (bad records, when skipped).
"""


rule split:
    input:
        corpus_files(),
    output:
        chunks=expand("results/{{dataset}}/chunks/chunk_{chunk}.jsonl", chunk=CHUNKS),
        manifest="results/{dataset}/chunks/manifest.json",
        rejects="results/{dataset}/chunks/rejects.jsonl",
    log:
        "logs/split/{dataset}.log",
    benchmark:
        "benchmarks/split/{dataset}.tsv"
    conda:
        "../envs/core.yaml"
    params:
        n_chunks=N_CHUNKS,
        by=config["chunking"]["by"],
        rate_items_per_s=config["chunking"]["rate_items_per_s"],
        reader=plan.reader_options(config).__dict__,
    script:
        "../scripts/split.py"
