"""The training task end to end on a tiny corpus: split -> train_tokenizer -> tokenize_<i>
-> gather_shards -> train -> landing, one shared run; a real SIGKILL of the train job
under Snakemake, whose retry continues from its checkpoint to the same losses, bit for
bit (CPU, fp32); dry runs; bad input as one clear line in the rule log."""

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from shardflow.corpus.demo import DemoParams, build_demo_corpus
from tests.helpers import (
    REPO,
    SNAKEMAKE,
    assert_no_secrets,
    assert_status_reads_the_planned_files,
    job_counts,
    offline_env,
    sha256,
    snakemake,
    write_config,
)
from tests.support.faults import kill_job_when

pytestmark = pytest.mark.workflow

DS = "tr"
# Small enough for seconds on 2 cores, long enough (180 steps after the first
# checkpoint at step 20) that a kill lands mid-run.
TRAIN = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8, max_iters=200, eval_interval=50,
             eval_windows=16, checkpoint_interval=20, warmup_iters=10, sample_tokens=40)
TARGETS = (f"results/{DS}/train/metrics.json", f"results/{DS}/provenance.json", "results/report.rst")


def _config(path, corpus, resources=None, **train):
    return write_config(path, dataset=DS, tasks=["training"], n_chunks=3, input={"path": str(corpus)},
                        shards={"tokens_per_shard": 10000}, train={**TRAIN, **train}, **({"resources": resources} if resources else {}))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("train-corpus") / "corpus.jsonl"
    build_demo_corpus(str(path), DemoParams(max_docs=60, min_words=20))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, corpus):
    """The uninterrupted run everything is checked against. It is started as a user
    starts `.venv/bin/snakemake` without activating the venv, with another `python`
    first on PATH, one that fails: the train rule's shell command must still run the
    workflow's own interpreter."""
    work = tmp_path_factory.mktemp("train-run")
    cfg = _config(work / "c.yaml", corpus)
    other = work / "other-python"
    other.mkdir()
    (other / "python").write_text("#!/bin/sh\necho 'not the workflow python' >&2\nexit 97\n")
    (other / "python").chmod(0o755)
    env = offline_env()
    path = [p for p in env["PATH"].split(os.pathsep) if Path(p).resolve() != Path(SNAKEMAKE).parent.resolve()]
    env["PATH"] = os.pathsep.join([str(other), *path])
    snakemake(work, *TARGETS, "--cores", "2", "--configfile", str(cfg), env=env)
    return work, cfg


def test_shards_tokenizer_and_job_table(run):
    work, _ = run
    meta = json.loads((work / f"results/{DS}/shards/metadata.json").read_text())
    assert meta["tokenizer"]["kind"] == "char" and meta["dtype"] == "uint16"
    assert meta["split"]["method"] == "hash" and meta["totals"]["documents"] == 60
    assert meta["totals"]["val"]["tokens"] > 0 and len(meta["sources"]) == 3
    for shard in meta["shards"]:
        assert (work / f"results/{DS}/shards" / shard["file"]).stat().st_size == 1024 + 2 * shard["tokens"]
        assert shard["tokens"] <= 10000
    assert (work / f"results/{DS}/shards/char_tokenizer.json").exists()  # beside the shards
    jobs = json.loads((work / f"results/{DS}/tokenize/jobs.json").read_text())["jobs"]
    assert [j["stats"]["documents"] for j in jobs] == [20, 20, 20] and all("s" in j["benchmark"] for j in jobs)


def test_train_outputs_landing_and_hf_folder(run):
    work, _ = run
    out = work / f"results/{DS}/train"
    m = json.loads((out / "metrics.json").read_text())
    assert m["steps"] == 200 and m["resumed_from_step"] == 0 and m["device"] == "cpu"
    assert m["best_val_loss"] < 4.0 and m["tokens_per_second"] > 0
    losses = pd.read_parquet(out / "losses.parquet")
    assert len(losses) == 200 and losses["val_loss"].notna().sum() == 4
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG" and len((out / "sample.txt").read_text()) > 0
    prov = json.loads((work / f"results/{DS}/provenance.json").read_text())
    assert prov["model"] is None and prov["models"] == {}  # it trains its own: the weights are outputs
    assert prov["outputs"][f"results/{DS}/train/best.safetensors"] == sha256(out / "best.safetensors")
    hf = json.loads((out / "hf/config.json").read_text())  # loading it is hf_export's unit test
    assert hf["n_layer"] == 2 and hf["n_embd"] == 32 and (out / "hf/model.safetensors").exists()
    tok = json.loads((out / "hf/tokenizer_config.json").read_text())  # the shards' tokenizer beside it
    assert tok["eos_token"] == "<|endoftext|>" and (out / "hf/tokenizer.json").exists()
    landing = (work / "results/report.rst").read_text()
    assert "Training: tr" in landing and "best val loss" in landing and "3 tokenize jobs" in landing
    assert f"{m['best_val_loss']:.4f}" in landing
    assert not (work / f"results/{DS}/.resume/train").exists()  # removed once the outputs are written


def test_sigkilled_train_job_resumes_to_the_same_losses_bitwise(run, corpus, tmp_path):
    ref, cfg = run
    work = tmp_path / "killed"
    work.mkdir()
    ckpt = work / f"results/{DS}/.resume/train/checkpoint.pt"
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(work), TARGETS[0], "--cores", "2",
           "--configfile", str(cfg)]
    out, returncode = kill_job_when(cmd, work, offline_env(), "train", ckpt.exists, what="checkpoint", timeout_s=120)
    assert returncode == 0, out[-4000:]
    assert "Error in rule train" in out  # the first attempt died ...
    log = (work / f"logs/train/{DS}.log").read_text()  # ... and the retry continued:
    assert "resumed from" in log, log[-3000:]
    m = json.loads((work / f"results/{DS}/train/metrics.json").read_text())
    assert 0 < m["resumed_from_step"] < 200 and m["steps"] == 200
    got = pd.read_parquet(work / f"results/{DS}/train/losses.parquet")
    want = pd.read_parquet(ref / f"results/{DS}/train/losses.parquet")
    cols = ["step", "train_loss", "val_loss", "lr", "tokens_seen"]  # not `seconds`
    pd.testing.assert_frame_equal(got[cols], want[cols], check_exact=True)
    for name in ("last.safetensors", "best.safetensors"):
        assert sha256(work / f"results/{DS}/train/{name}") == sha256(ref / f"results/{DS}/train/{name}"), name


def test_another_gpu_count_reruns_train_and_the_default_count_is_not_recorded(run):
    """train.gpus decides the global batch: another count reruns the train job. At its
    default 1 it is left out of the recorded params, as before it was recorded: the
    finished run stays finished (no rerun on upgrade)."""
    work, cfg = run
    assert "Nothing to be done" in snakemake(work, *TARGETS, "-n", "--configfile", str(cfg)).stdout
    out = snakemake(work, *TARGETS, "-n", "--configfile", str(cfg), "--config", "train={gpus: 2}").stdout
    assert job_counts(out).get("train") == 1 and "Params have changed" in out, out


def test_keys_that_change_no_output_rerun_no_finished_job(run):
    """How often the run checkpoints changes none of its outputs (a resumed run continues
    to the same losses): not recorded, so changing it reruns no training. The job still
    gets it (config.json records what the trainer was given). Nor do the keys only bpe
    reads rerun a char tokenizer, and the shards and training after it."""
    work, cfg = run
    config = json.loads((work / f"results/{DS}/train/config.json").read_text())
    assert config["train"]["checkpoint_interval"] == TRAIN["checkpoint_interval"]
    changes = ("train={checkpoint_interval: 7}", "shards={tokens_per_shard: 10000, vocab_size: 300, min_frequency: 5}")
    out = snakemake(work, *TARGETS, "-n", "--configfile", str(cfg), "--config", *changes).stdout
    assert set(job_counts(out)) <= {"provenance", "landing", "all", "total"}, out


def test_checkpoint_of_another_configuration_is_one_clear_error(run, corpus, tmp_path):
    """A checkpoint left by a killed run, then the model changed: refused, naming the key."""
    from shardflow.train.trainer import TrainParams, train

    ref, _ = run
    work = tmp_path / "w"
    shutil.copytree(ref, work, symlinks=True)
    resume = work / f"results/{DS}/.resume/train"
    train(work / f"results/{DS}/shards", tmp_path / "scratch",
          TrainParams(**{k: v for k, v in TRAIN.items() if k != "sample_tokens"} | {"max_iters": 1, "lr_decay_iters": 200}, device="cpu"),
          resume_dir=resume, keep_resume=True, sample_tokens=1)
    # No retries: the refusal is the same every attempt (3 by default, each importing torch).
    wider = _config(tmp_path / "wider.yaml", corpus, resources={"train": {"retries": 0}}, n_embd=64)
    proc = snakemake(work, TARGETS[0], "--cores", "2", "--configfile", str(wider), check=False)
    assert proc.returncode != 0
    log = (work / f"logs/train/{DS}.log").read_text()
    line = next(x for x in log.splitlines() if "CRITICAL" in x)
    assert "failed: CheckpointError: checkpoint" in line and "parameters (n_embd): n_embd: checkpoint 32 != now 64" in line, line


def test_bad_input_is_one_clear_line_in_the_rule_log(tmp_path):
    # An empty corpus: the split already refuses it (prepare refuses one too, for its own callers).
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cfg = write_config(tmp_path / "e.yaml", dataset=DS, tasks=["training"], n_chunks=1, input={"path": str(empty)})
    proc = snakemake(tmp_path, f"results/{DS}/shards", "--cores", "2", "--configfile", str(cfg),
                     check=False)
    assert proc.returncode != 0
    log = (tmp_path / f"logs/split/{DS}.log").read_text()
    assert "failed: ValueError: no usable record in" in log, log[-2000:]

    # A tokenizer whose vocabulary does not fit the chosen token dtype.
    from tokenizers import Tokenizer, models

    vocab = {f"w{i}": i for i in range(70_000)} | {"[UNK]": 70_000, "[SEP]": 70_001}
    Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")).save(str(tmp_path / "big.json"))
    cfg = write_config(tmp_path / "d.yaml", dataset=DS, tasks=["training"], n_chunks=1, input={"path": str(empty)},
                       shards={"tokenizer": str(tmp_path / "big.json"), "dtype": "uint16"})
    proc = snakemake(tmp_path, f"results/{DS}/tokenizer/shardflow_tokenizer.json", "--cores", "1",
                     "--configfile", str(cfg), check=False)
    assert proc.returncode != 0
    log = (tmp_path / f"logs/train_tokenizer/{DS}.log").read_text()
    assert ("failed: ValueError: token dtype uint16 holds ids below 65536, but the tokenizer's vocab_size "
            "is 70002") in log, log[-2000:]


@pytest.mark.dryrun
def test_dry_run_lists_every_tokenize_job_and_train_before_any_data(tmp_path):
    out = snakemake(tmp_path, "-n", "-p", "--config", "tasks=[training]", "n_chunks=5", "gpu_jobs={device: cpu}",
                    "train={compile: true}").stdout
    counts = job_counts(out)
    assert counts["tokenize"] == 5
    assert counts["train_tokenizer"] == counts["gather_shards"] == counts["train"] == 1
    assert "embed" not in counts
    assert '"compile": false' in out  # the CPU job records (and gets) compile as it runs: off
    # The launcher learns the attempt from the untracked gpu_jobs JSON (its guard against
    # repeating an input error: shardflow.core.failures), the command's text unchanged.
    assert """--gpu-jobs '{"attempt": 1, "device": "cpu",""" in out
    assert assert_status_reads_the_planned_files(out, "train") == 1  # make status's view of the job
    assert not (tmp_path / "results").exists()

    # A position split reads the one text file itself: no tokenize jobs.
    text = tmp_path / "input.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    cfg = write_config(tmp_path / "p.yaml", tasks=["training"], n_chunks=1,
                       input={"path": str(text), "text_mode": "files"}, shards={"split": "position"},
                       train={"gpus": 2})
    out = snakemake(tmp_path, "-n", "-p", "--configfile", str(cfg)).stdout
    counts = job_counts(out)
    assert "tokenize" not in counts and counts["gather_shards"] == counts["train"] == 1
    assert "gpu=2" in out and "--gpus 2" in out  # the job requests train.gpus GPUs (a dry run plans GPUs)
    # A run offering fewer (Snakemake would scale the request down silently) stops first:
    # here on a host with GPUs (SHARDFLOW_GPUS names them) ...
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), "--resources", "gpu=1", check=False,
                     env=offline_env(SHARDFLOW_GPUS="0"))
    assert proc.returncode != 0 and "train.gpus is 2 but this run offers gpu=1" in proc.stdout + proc.stderr
    # ... while a dry run on a host without GPUs only warns: the local run it previews trains on the CPU.
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), "--resources", "gpu=1", env=offline_env(SHARDFLOW_GPUS=""))
    assert "train.gpus is 2 but this run offers gpu=1" in proc.stdout + proc.stderr
    assert "Dry run on a host without GPUs: a local run trains on the CPU" in proc.stdout + proc.stderr

    # Settings the trainer would refuse stop the parse too, with the sweeps' points.
    proc = snakemake(tmp_path, "-n", "--config", "tasks=[training]", "train={n_embd: 30, n_head: 4}", check=False)
    assert proc.returncode != 0 and "train: n_embd (30) must be a multiple of n_head (4)" in proc.stdout + proc.stderr

    # ... which needs one plain-text file: the demo corpus (JSON lines) is refused at parse time.
    proc = snakemake(tmp_path, "-n", "--config", "tasks=[training]", "shards={split: position}", check=False)
    assert proc.returncode != 0
    assert "shards.split: position reads one local, uncompressed plain-text file" in proc.stdout + proc.stderr


def test_no_fake_credential_in_any_file_of_the_run(run):
    """The run saw fake credentials (offline_env): no file it wrote holds one (checkpoints,
    shards, the Hugging Face export and the sample included)."""
    work, _ = run
    files = assert_no_secrets(work)
    names = {f.relative_to(work).as_posix() for f in files}
    assert {f"results/{DS}/provenance.json", f"results/{DS}/train/sample.txt", f"logs/train/{DS}.log"} <= names
