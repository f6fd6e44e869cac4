"""split_<dataset>: a corpus into exactly N chunk files, streaming.

One definition serves every data set of the run (shardflow.workflow.plan.datasets:
the main corpus and, with retrieval.path set, the retrieval corpus). A job's outputs
must be fixed per rule, and each data set has its own chunk count, so the rule is
instantiated once per data set, named split_<dataset>.

Needs: the data set's files (input.path, the demo corpus, or a file an earlier
rule wrote; s3:// objects are fetched through Snakemake storage). Writes:
results/<dataset>/chunks/chunk_<i>.jsonl, manifest.json (per chunk: items,
bytes, sha256, estimated time; sha256 of every source) and rejects.jsonl (bad
records, when skipped).

chunking.by: source (shardflow.corpus.by_source): one split_source job per source
instead, job i writing chunk_<i>.jsonl from source i alone, with its part manifest,
rejects and record keys under chunks/sources/; split_<dataset> then collects them (ids
unique and groups whole across sources) into manifest.json and rejects.jsonl. A source
added to the corpus adds a chunk: the finished ones, and the jobs that read them, stay.
"""

for ds in DATASETS.values():
    if ds.by == "source":
        continue  # below

    rule:
        name:
            f"split_{ds.name}"
        input:
            split_inputs(ds),
        output:
            chunks=chunk_list(ds.name, "results/{dataset}/chunks/chunk_{chunk}.jsonl"),
            manifest=f"results/{ds.name}/chunks/manifest.json",
            rejects=f"results/{ds.name}/chunks/rejects.jsonl",
        log:
            f"logs/split/{ds.name}.log",
        benchmark:
            f"benchmarks/split/{ds.name}.tsv"
        # Not tried again: what stops a split is nearly always its input (a bad record,
        # a missing file), which a retry reads again, after another wait in a cluster's
        # queue, to fail the same way; the profiles' `retries` would resubmit it twice.
        retries: 0
        conda:
            "../envs/core.yaml"
        resources:
            **split_disk(ds),
        params:
            n_chunks=ds.n_chunks,
            by=ds.by,
            rate_items_per_s=ds.rate_items_per_s,
            reader=ds.reader,
        script:
            "../scripts/split.py"


for ds in BY_SOURCE.values():

    rule:
        name:
            f"split_{ds.name}"
        input:
            parts=chunk_list(ds.name, f"{SOURCE_PARTS}.json"),
            rejects=chunk_list(ds.name, f"{SOURCE_PARTS}.rejects.jsonl"),
            record_keys=chunk_list(ds.name, f"{SOURCE_PARTS}.keys.parquet"),
        output:
            manifest=f"results/{ds.name}/chunks/manifest.json",
            rejects=f"results/{ds.name}/chunks/rejects.jsonl",
        log:
            f"logs/split/{ds.name}.log",
        benchmark:
            f"benchmarks/split/{ds.name}.tsv"
        # The check across sources runs before chunk jobs that are ready too (the chunk
        # jobs do not wait for it, which would rerun every one of them after it failed).
        priority: 1
        retries: 0
        conda:
            "../envs/core.yaml"
        params:
            rate_items_per_s=ds.rate_items_per_s,
            reader=ds.reader,
        script:
            "../scripts/collect_sources.py"


if BY_SOURCE:

    rule split_source:
        input:
            source_input,
        output:
            chunk="results/{dataset}/chunks/chunk_{chunk}.jsonl",
            part=f"{SOURCE_PARTS}.json",
            rejects=f"{SOURCE_PARTS}.rejects.jsonl",
            record_keys=f"{SOURCE_PARTS}.keys.parquet",
        log:
            "logs/split/{dataset}/chunk_{chunk}.log",
        benchmark:
            "benchmarks/split/{dataset}/chunk_{chunk}.tsv"
        wildcard_constraints:
            dataset="|".join(re.escape(name) for name in BY_SOURCE),
        priority: 1  # the sources first, as the collector
        retries: 0  # as split_<dataset>: its input would fail the same way
        conda:
            "../envs/core.yaml"
        resources:
            **split_disk(),
        params:
            rate_items_per_s=lambda wildcards: DATASETS[
                wildcards.dataset
            ].rate_items_per_s,
            reader=lambda wildcards: DATASETS[wildcards.dataset].reader,
        script:
            "../scripts/split_source.py"
