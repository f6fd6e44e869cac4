"""provenance and verify_reproduction.

provenance: per data set, results/<dataset>/provenance.json — git commit and
dirty flag, config hash, package versions, Python, CUDA and GPU model, the hash of
each model the data set's jobs ran (shardflow.workflow.tasks.models), what the GPU
jobs ran with (the `made_with` of the job tables, of single jobs' stats and of the
train job's metrics), input and output checksums, job timings. Flagged for the report.
verify_reproduction (when the config has a `reproduce:` section, i.e. an
experiment file from config/reproduce/): compares the run with the pinned
expectations and fails with a table of expected vs got.
"""


rule provenance:
    input:
        unpack(provenance_inputs),
    output:
        report(
            "results/{dataset}/provenance.json",
            caption="captions/provenance.rst",
            category="Provenance",
        ),
    log:
        "logs/provenance/{dataset}.log",
    conda:
        "../envs/embed.yaml"
    params:
        # Snakemake records the config's hash: any change rewrites this record, and the
        # rerun reason names two hashes instead of printing the whole config twice.
        config_sha256=config_sha256(config),
        config=untracked(config),
        models=provenance_models,
        # The checkout, where provenance reads the git commit and dirty flag (which the
        # record keeps); untracked: the path itself decides nothing, and moving the
        # checkout to another folder would rerun every provenance job.
        repo=untracked(workflow.basedir),
    script:
        "../scripts/provenance.py"


if config["reproduce"]["name"]:

    rule verify_reproduction:
        input:
            provenance=f"results/{REPRO_DATASET}/provenance.json",
            metrics=reproduction_metrics(),
        output:
            report(
                f"results/{REPRO_DATASET}/reproduction.json",
                caption="captions/reproduction.rst",
                category="Provenance",
            ),
        log:
            f"logs/verify_reproduction/{REPRO_DATASET}.log",
        conda:
            "../envs/core.yaml"
        params:
            expect=config["reproduce"]["expect"],
            strict_packages=config["reproduce"]["strict_packages"],
            name=config["reproduce"]["name"],
        script:
            "../scripts/verify_reproduction.py"
