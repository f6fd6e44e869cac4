"""Summarisation (tasks: [summarisation]): summarise_<i> per chunk -> merge_summaries
-> summarise_report, and evaluate_summaries when the input has references.

Needs: results/<dataset>/chunks/chunk_<i>.jsonl (the shared split). Writes
results/<dataset>/summarise/summaries_<i>.jsonl (id, summary, input_tokens,
output_tokens, truncated) and .stats.json per chunk; results/<dataset>/summaries.jsonl
(corpus order, ids unique, count checked against the split) with the job table
summarise/jobs.json; figures and summary.json under summarise/report/; with
`summarise.reference_field`, ROUGE in summarise/metrics.json and per-document scores
in summarise/per_document.parquet. Method `stored` scores summaries already in the
input instead (score_stored_summaries; no chunk jobs).
A killed summarise job resumes from its last finished part (gpu_jobs.resume_dir).
"""

SUMMARISE = config["summarise"]
for ds in DATASETS.values():
    if "summarisation" in ds.tasks:
        plan.summarise_model(config, ds.sources)
# lead needs no GPU; stored runs no summarise job at all. A lead job asks for what a
# CPU rule asks for (rules/common.smk, job_resources; a GPU that a profile's
# set-resources would get it is named at parse time there).
SUMMARISE_USES_GPU = SUMMARISE["method"] in ("extractive", "abstractive")


rule summarise:
    input:
        "results/{dataset}/chunks/chunk_{chunk}.jsonl",
    output:
        summaries="results/{dataset}/summarise/summaries_{chunk}.jsonl",
        stats="results/{dataset}/summarise/summaries_{chunk}.stats.json",
    log:
        "logs/summarise/{dataset}/chunk_{chunk}.log",
    benchmark:
        "benchmarks/summarise/{dataset}/chunk_{chunk}.tsv"
    retries: rule_resources("summarise", None)["retries"]
    conda:
        "../envs/embed.yaml"
    threads: job_threads("summarise", SUMMARISE_USES_GPU)
    resources:
        **job_resources("summarise", SUMMARISE_USES_GPU),
    params:
        **gpu_job_params(device_decides=SUMMARISE_USES_GPU),
        summarise=summarise_params,
        resume_root=untracked(job_resume_root),
    script:
        "../scripts/summarise.py"


rule merge_summaries:
    input:
        summaries=per_chunk("results/{dataset}/summarise/summaries_{chunk}.jsonl"),
        stats=per_chunk("results/{dataset}/summarise/summaries_{chunk}.stats.json"),
        benchmarks=per_chunk("benchmarks/summarise/{dataset}/chunk_{chunk}.tsv"),
        manifest="results/{dataset}/chunks/manifest.json",
    output:
        summaries="results/{dataset}/summaries.jsonl",
        jobs="results/{dataset}/summarise/jobs.json",
    log:
        "logs/merge_summaries/{dataset}.log",
    benchmark:
        "benchmarks/merge_summaries/{dataset}.tsv"
    conda:
        "../envs/core.yaml"
    script:
        "../scripts/merge_summaries.py"


rule summarise_report:
    input:
        jobs="results/{dataset}/summarise/jobs.json",
        manifest="results/{dataset}/chunks/manifest.json",
        summaries="results/{dataset}/summaries.jsonl",
    output:
        throughput=report(
            "results/{dataset}/summarise/report/throughput.png",
            caption="captions/summarise_throughput.rst",
            category="Summarisation",
            subcategory="{dataset}",
        ),
        timeline=report(
            "results/{dataset}/summarise/report/timeline.png",
            caption="captions/summarise_timeline.rst",
            category="Summarisation",
            subcategory="{dataset}",
        ),
        lengths=report(
            "results/{dataset}/summarise/report/lengths.png",
            caption="captions/summarise_lengths.rst",
            category="Summarisation",
            subcategory="{dataset}",
        ),
        summary=report(
            "results/{dataset}/summarise/report/summary.json",
            caption="captions/summarise_summary.rst",
            category="Summarisation",
            subcategory="{dataset}",
        ),
    log:
        "logs/summarise_report/{dataset}.log",
    conda:
        "../envs/report.yaml"
    params:
        gpu_hour_price=config["report"]["gpu_hour_price"],
        currency=config["report"]["currency"],
        # The GPUs each summarise job held, which its stats do not record: GPU-hours count them.
        gpus=plan.job_gpus(config, "summarise"),
    script:
        "../scripts/summarise_report.py"


if SUMMARISE["method"] == "stored":

    rule score_stored_summaries:
        input:
            sources=split_inputs(DATASETS[DATASET]),
        output:
            metrics=report(
                "results/{dataset}/summarise/metrics.json",
                caption="captions/summarise_metrics.rst",
                category="Summarisation",
                subcategory="{dataset}",
            ),
            per_document="results/{dataset}/summarise/per_document.parquet",
            figure=report(
                "results/{dataset}/summarise/rouge.png",
                caption="captions/summarise_rouge.rst",
                category="Summarisation",
                subcategory="{dataset}",
            ),
        log:
            "logs/score_stored_summaries/{dataset}.log",
        benchmark:
            "benchmarks/score_stored_summaries/{dataset}.tsv"
        conda:
            "../envs/report.yaml"
        params:
            score=summary_score_params(),
            stored_field=SUMMARISE["stored_field"],
        script:
            "../scripts/score_stored_summaries.py"

else:

    rule evaluate_summaries:
        input:
            summaries="results/{dataset}/summaries.jsonl",
            sources=split_inputs(DATASETS[DATASET]),
            # A reference is read from the line the split kept, never from one it rejected.
            split_rejects="results/{dataset}/chunks/rejects.jsonl",
        output:
            metrics=report(
                "results/{dataset}/summarise/metrics.json",
                caption="captions/summarise_metrics.rst",
                category="Summarisation",
                subcategory="{dataset}",
            ),
            per_document="results/{dataset}/summarise/per_document.parquet",
            figure=report(
                "results/{dataset}/summarise/rouge.png",
                caption="captions/summarise_rouge.rst",
                category="Summarisation",
                subcategory="{dataset}",
            ),
        log:
            "logs/evaluate_summaries/{dataset}.log",
        benchmark:
            "benchmarks/evaluate_summaries/{dataset}.tsv"
        conda:
            "../envs/report.yaml"
        params:
            score=summary_score_params(),
            method=SUMMARISE["method"],
        script:
            "../scripts/evaluate_summaries.py"
