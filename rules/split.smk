"""split_<dataset>: a corpus into exactly N chunk files, streaming.

One definition serves every data set of the run (shardflow.workflow.plan.datasets:
the main corpus, a retrieval corpus, the inputs of later stages). A job's outputs
must be fixed per rule, and each data set has its own chunk count, so the rule is
instantiated once per data set, named split_<dataset>.

Needs: the data set's files (input.path, the demo corpus, or a file an earlier
rule wrote; s3:// objects are fetched through Snakemake storage). Writes:
results/<dataset>/chunks/chunk_<i>.jsonl, manifest.json (per chunk: items,
bytes, sha256, estimated time; sha256 of every source) and rejects.jsonl (bad
records, when skipped).
"""

for ds in DATASETS.values():

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
        params:
            n_chunks=ds.n_chunks,
            by=ds.by,
            rate_items_per_s=ds.rate_items_per_s,
            reader=ds.reader,
        script:
            "../scripts/split.py"
