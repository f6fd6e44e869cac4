"""training: a GPT trained on the data set's text (shardflow.train), as task `training`.

    split -> train_tokenizer -> tokenize_<i> ... -> gather_shards -> train

Needs: results/<dataset>/chunks/chunk_<i>.jsonl; with `shards.split: position`, the
data set's one text file instead, read directly (nanoGPT's character split: the
chunks' records drop newlines, so the exact text exists only in the file).
Writes:
- results/<dataset>/tokenizer/: the vocabulary file and shardflow_tokenizer.json,
  built from every chunk (char, bpe) or copied (a path, default);
- results/<dataset>/tokenize/chunk_<i>.bin, .bin.docs.jsonl, .stats.json: one job
  per chunk (none for a position split);
- results/<dataset>/shards/ (a directory output: how many shards depends on the
  data): metadata.json, train_*.bin, val_*.bin and the tokenizer files; and
  tokenize/jobs.json, the tokenize jobs' stats and benchmarks in one table;
- results/<dataset>/train/: best and last weights, config.json, losses.parquet,
  metrics.json, loss.png and sample.txt (both in the report), hf/ (GPT-2 folder).
train is a shell rule, `python -m shardflow.train.launch`: train.gpus processes under
torchrun on one node, or one process (on the CPU when the job got gpu=0). It writes a
checkpoint every train.checkpoint_interval steps to the undeclared <resume root>/train/,
so the retry of a killed job continues from the last one; an input or config error is
recorded beside it (train.failure.json), and the retry stops at once (the attempt comes
in the untracked gpu_jobs JSON: shardflow.core.failures); an attempt out of GPU memory
is recorded there too, and the next one trains with a smaller micro-batch, the same
global batch (shardflow.train.trainer; the command and params stay as they were).
Every file a job reads is a declared input and every file it writes a declared output
(or resume state): with S3 as the default storage (eks profile) a job gets nothing else.
A pretrained tokenizer given by path is read by path, like a model (on EKS: from the
image or a volume); locally and on SLURM its files are train_tokenizer's declared inputs
(tokenizer_inputs), so one edited in place reruns the copy and the jobs after it.
"""


include: "train_common.smk"


rule train_tokenizer:
    input:
        tokenizer_inputs,
    output:
        **tokenizer_files("{dataset}"),
    log:
        "logs/train_tokenizer/{dataset}.log",
    benchmark:
        "benchmarks/train_tokenizer/{dataset}.tsv"
    conda:
        "../envs/train.yaml"
    params:
        tokenizer=train_tokenizer_params,
        dtype=config["shards"]["dtype"],
    script:
        "../scripts/train_tokenizer.py"


rule tokenize:
    input:
        unpack(tokenize_inputs),
    output:
        tokens="results/{dataset}/tokenize/chunk_{chunk}.bin",
        docs="results/{dataset}/tokenize/chunk_{chunk}.bin.docs.jsonl",
        stats="results/{dataset}/tokenize/chunk_{chunk}.stats.json",
    log:
        "logs/tokenize/{dataset}/chunk_{chunk}.log",
    benchmark:
        "benchmarks/tokenize/{dataset}/chunk_{chunk}.tsv"
    conda:
        "../envs/train.yaml"
    params:
        tokenize=shards_params("val_fraction", "split_salt", "dedup", "dtype"),
    script:
        "../scripts/tokenize_chunk.py"


rule gather_shards:
    input:
        unpack(gather_inputs),
    output:
        shards=directory("results/{dataset}/shards"),
        jobs="results/{dataset}/tokenize/jobs.json",
    log:
        "logs/gather_shards/{dataset}.log",
    benchmark:
        "benchmarks/gather_shards/{dataset}.tsv"
    conda:
        "../envs/train.yaml"
    params:
        shards=gather_params,
    script:
        "../scripts/gather_shards.py"


rule train:
    input:
        unpack(train_inputs),
    output:
        best="results/{dataset}/train/best.safetensors",
        last="results/{dataset}/train/last.safetensors",
        config="results/{dataset}/train/config.json",
        losses="results/{dataset}/train/losses.parquet",
        metrics="results/{dataset}/train/metrics.json",
        plot=report(
            "results/{dataset}/train/loss.png",
            caption="captions/training_loss.rst",
            category="Training",
            subcategory="{dataset}",
        ),
        sample=report(
            "results/{dataset}/train/sample.txt",
            caption="captions/training_sample.rst",
            category="Training",
            subcategory="{dataset}",
        ),
        hf=directory("results/{dataset}/train/hf"),
    log:
        "logs/train/{dataset}.log",
    benchmark:
        "benchmarks/train/{dataset}.tsv"
    retries: rule_resources("train", None)["retries"]
    conda:
        "../envs/train.yaml"
    threads: job_threads("train", jobs=one_job, processes=train_processes)
    resources:
        **train_resources(),
    params:
        **gpu_job_params(as_json=True),
        train=train_params,
        compile_cache=untracked(stage_value("train", "compile_cache")),
        checkpoint_interval=untracked(stage_value("train", "checkpoint_interval")),
        sample_tokens=config["train"]["sample_tokens"],
        out=output_folder,
        resume=untracked(train_resume),
        tokenizer=tokenizer_folder,
    shell:
        "python -m shardflow.train.launch --gpus {resources.gpu} --gpu-jobs {params.gpu_jobs:q}"
        " --threads {threads} --job 'train {params.out}'"
        " -- --data {input.shards} --out {params.out} --resume-dir {params.resume}"
        " --tokenizer {params.tokenizer} --params {params.train:q}"
        " --compile-cache {params.compile_cache:q}"
        " --checkpoint-interval {params.checkpoint_interval}"
        " --sample-tokens {params.sample_tokens} > {log} 2>&1"
