"""estimate: what a run will cost before it runs (python -m shardflow.cli estimate).

Each test works in its own folder: a tiny corpus, the results an earlier run would
have left, and a config overlay merged over config/config.yaml as the CLI merges it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from shardflow.cli import main
from shardflow.core.models import resolve_model
from shardflow.sweep.shared import plan as shared_plan
from shardflow.workflow import estimate as est
from tests.helpers import REPO, job_counts, snakemake

MODEL = resolve_model("default")


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # results/, the corpus and the parse cache are the run's folder's


def corpus(n: int = 100, name: str = "corpus.jsonl") -> str:
    with open(name, "w") as fh:
        fh.writelines(json.dumps({"id": i, "text": f"document number {i}"}) + "\n" for i in range(n))
    return name


def config(tmp_path, **overlay) -> dict:
    base = {"dataset": "ds", "n_chunks": 2, "input": {"path": "corpus.jsonl"}}
    for key, value in overlay.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(base))
    return est.load_config([str(path)])


def embed_stats(
    folder: str,
    device: str,
    items: int = 1000,
    seconds: float = 10.0,
    model: str = MODEL,
    chunks: int = 2,
    dtype: str | None = None,
) -> None:
    """Chunk jobs' stats as the engine writes them; `dtype`: the compute precision
    (None: embedding.dtype auto's on `device`)."""
    os.makedirs(folder, exist_ok=True)
    for i in range(chunks):
        stats = {
            "chunk": i,
            "items": items // chunks,
            "seconds": seconds / chunks,
            "device": device,
            "dtype": dtype or ("float32" if device == "cpu" else "bfloat16"),
            "dim": 384,
            "made_with": {"model": {"path": model, "sha256": "x"}, "device": device, "gpu": None},
        }
        with open(f"{folder}/embed_{i}.stats.json", "w") as fh:
            json.dump(stats, fh)


def row(result: est.Estimate, stage: str, dataset: str = "ds") -> est.Row:
    return next(r for r in result.rows if r.stage == stage and r.dataset == dataset)


def run(cfg: dict, gpus: int = 1, records=None) -> est.Estimate:
    return est.estimate(cfg, gpus, "--gpus", records)


# ---------------------------------------------------------------------- rates


def test_a_measured_gpu_rate_is_preferred_to_the_assumed_one(tmp_path):
    corpus()
    cfg = config(tmp_path)
    assumed = row(run(cfg), "embed")
    assert not assumed.rate.measured and assumed.rate.per_s == 40 and est.ASSUMED in assumed.rate.source
    embed_stats("results/ds/embed", "cuda:0")
    measured = row(run(cfg), "embed")
    assert measured.rate.measured and measured.rate.per_s == pytest.approx(100.0)
    assert "results/ds/embed" in measured.rate.source and measured.rate.device == "cuda:0"
    assert measured.seconds == pytest.approx([0.5, 0.5])  # 50 records a chunk at 100/s
    assert measured.gpu_hours == pytest.approx(1 / 3600)


def test_a_measured_rate_adds_the_jobs_model_loading_from_their_benchmarks(tmp_path):
    corpus()
    cfg = config(tmp_path)
    embed_stats("results/ds/embed", "cuda")
    os.makedirs("benchmarks/embed/ds")
    for i in range(2):
        with open(f"benchmarks/embed/ds/chunk_{i}.tsv", "w") as fh:
            fh.write("s\th:m:s\tmax_rss\n9.0\t0:00:09\t100\n")  # 5 s encoding + 4 s loading
    embed = row(run(cfg), "embed")
    assert embed.rate.overhead_s == pytest.approx(4.0) and embed.seconds == pytest.approx([4.5, 4.5])


def test_a_cpu_measured_rate_is_no_estimate_for_a_gpu_run(tmp_path):
    corpus()
    cfg = config(tmp_path)
    embed_stats("results/ds/embed", "cpu")
    embed = row(run(cfg), "embed")
    assert not embed.rate.measured and embed.rate.per_s == 40
    assert any(
        "a CPU rate is no estimate for a GPU run" in n and "results/ds/embed 100 records/s on cpu" in n
        for n in embed.notes
    )
    on_cpu = row(run(config(tmp_path, gpu_jobs={"device": "cpu"})), "embed")
    assert on_cpu.rate.measured and on_cpu.gpus == 0 and on_cpu.gpu_hours == 0 and on_cpu.wall_s is None


def test_a_run_of_another_model_is_passed_over_and_another_data_sets_used(tmp_path):
    corpus()
    cfg = config(tmp_path)
    embed_stats("results/ds/embed", "cuda", model="/models/other")
    embed_stats("results/zz/embed", "cuda", items=3000)
    embed = row(run(cfg), "embed")
    assert embed.rate.measured and embed.rate.per_s == pytest.approx(300.0) and "results/zz/embed" in embed.rate.source
    os.rename("results/zz", "results/zz_gone")
    embed_stats("results/zz_gone/embed", "cuda", model="/models/other")
    embed = row(run(cfg), "embed")
    assert not embed.rate.measured
    assert any("results/ds/embed ran model /models/other, not embedding.model default" in n for n in embed.notes)


def test_a_run_in_another_compute_precision_is_passed_over(tmp_path):
    """float32 on a GPU is several times slower than auto's half precision: a run of one
    is no rate for the other (auto: bfloat16 or float16 on CUDA, float32 on the CPU)."""
    corpus()
    embed_stats("results/ds/embed", "cuda:0", dtype="float32")
    embed = row(run(config(tmp_path)), "embed")
    assert not embed.rate.measured
    assert any(
        "results/ds/embed ran dtype float32, not embedding.dtype auto (bfloat16 or float16 on cuda)" in n
        for n in embed.notes
    )
    assert row(run(config(tmp_path, embedding={"dtype": "float32"})), "embed").rate.measured
    embed_stats("results/ds/embed", "cuda:0", dtype="float16")  # a GPU without bf16: auto's too
    assert row(run(config(tmp_path)), "embed").rate.measured
    assert not row(run(config(tmp_path, embedding={"dtype": "bfloat16"})), "embed").rate.measured


def test_an_embed_sweep_job_with_this_configs_values_measures_the_rate(tmp_path):
    corpus()
    cfg = config(tmp_path, embedding={"token_budget": 2048})
    spec = {
        "name": "tb",
        "stage": "embed",
        "points": [
            ["token_budget=512", {"embedding.token_budget": 512}],
            ["token_budget=2048", {"embedding.token_budget": 2048}],
        ],
    }
    os.makedirs("results/sweeps/tb")
    with open("results/sweeps/tb/spec.json", "w") as fh:
        json.dump(spec, fh)
    embed_stats("results/sweeps/tb/token_budget=512/seed=0/embed", "cuda", items=9000)
    embed_stats("results/sweeps/tb/token_budget=2048/seed=0/embed", "cuda", items=2000)
    embed = row(run(cfg), "embed")
    assert embed.rate.per_s == pytest.approx(200.0)
    assert "results/sweeps/tb/token_budget=2048/seed=0/embed" in embed.rate.source


def test_an_embed_sweeps_points_that_have_not_run_say_their_rate_is_the_main_runs_settings(tmp_path):
    """A chunk job's stats record its model and dtype, not its batch or length settings:
    a point of a token_budget sweep takes the main run's rate, measured at the main
    config's budget, and the row says so; a point that ran has its own rate."""
    corpus()
    sweep = {"stage": "embed", "seeds": [0], "metrics": {"items_per_s": "max"},
             "grid": {"embedding.token_budget": [512, 2048, 8192]}}
    cfg = config(tmp_path, embedding={"token_budget": 2048}, sweeps={"tb": sweep})
    embed_stats("results/ds/embed", "cuda")
    got = row(run(cfg), "embed", "sweep tb")
    note = ("2 of 3 points at a rate measured by results/ds/embed, with the main config's embedding.token_budget, "
            "not the point's: a swept key that changes the speed does not show in them until the point has run")
    assert any(n.startswith(note) for n in got.notes), got.notes
    embed_stats("results/sweeps/tb/token_budget=512/seed=0/embed", "cuda", items=9000)
    got = row(run(cfg), "embed", "sweep tb")
    assert any(n.startswith("1 of 3 points at a rate measured by results/ds/embed") for n in got.notes), got.notes
    embed_stats("results/sweeps/tb/token_budget=8192/seed=0/embed", "cuda", items=9000)
    assert not any("with the main config's" in n for n in row(run(cfg), "embed", "sweep tb").notes)
    # A point's other seed takes the rate its first seed measured, at the point's value,
    # not the main run's (which it took, said to be the main config's).
    two_seeds = {**sweep, "seeds": [0, 1], "grid": {"embedding.token_budget": [512, 8192]}}
    got = row(run(config(tmp_path, embedding={"token_budget": 2048}, sweeps={"tb": two_seeds})), "embed", "sweep tb")
    assert not any("with the main config's" in n for n in got.notes), got.notes
    assert got.seconds == pytest.approx([0.5 / 9, 0.5 / 9] * 4)  # 50 records a chunk at each point's 900/s
    # Another sweep's job matched that sweep's key (max_length), this one's at the main
    # config's value: borrowed too.
    shutil.rmtree("results")
    os.makedirs("results/sweeps/ml")
    with open("results/sweeps/ml/spec.json", "w") as fh:
        json.dump({"stage": "embed", "name": "ml", "points": [["max_length=64", {"embedding.max_length": 64}]]}, fh)
    embed_stats("results/sweeps/ml/max_length=64/seed=0/embed", "cuda", items=9000)
    cfg = config(tmp_path, embedding={"token_budget": 2048, "max_length": 64}, sweeps={"tb": sweep})
    got = row(run(cfg), "embed", "sweep tb")
    assert any(n.startswith("2 of 3 points at a rate measured by results/sweeps/ml/max_length=64/seed=0/embed")
               for n in got.notes), got.notes


def test_summarise_rates_are_only_those_of_the_same_method(tmp_path):
    corpus()
    cfg = config(tmp_path, tasks=["summarisation"], summarise={"method": "abstractive", "model": "/models/bart"})
    os.makedirs("results/ds/summarise")
    with open("results/ds/summarise/summaries_0.stats.json", "w") as fh:
        json.dump({"chunk": 0, "items": 100, "seconds": 1.0, "device": "cpu", "method": "lead"}, fh)
    summarise = row(run(cfg), "summarise")
    assert not summarise.rate.measured and "generating summaries is usually far slower" in summarise.rate.source
    assert any("ran summarise.method lead, not abstractive" in n for n in summarise.notes)
    lead = row(run(config(tmp_path, tasks=["summarisation"])), "summarise")
    assert lead.rate.measured and lead.gpus == 0 and lead.gpu_hours == 0  # lead runs on the CPU


def test_a_summarise_run_in_another_precision_is_passed_over(tmp_path):
    """Generation in float32 runs several times slower than in bf16: a GPU run's rate in
    one is no estimate for the other (auto: bf16, float32 on a GPU without native bf16)."""
    corpus()
    os.makedirs("results/ds/summarise")
    made = {"model": {"path": "/models/bart", "sha256": "x"}, "device": "cuda:0", "gpu": "NVIDIA A100"}
    with open("results/ds/summarise/summaries_0.stats.json", "w") as fh:
        json.dump({"chunk": 0, "items": 100, "seconds": 10.0, "device": "cuda:0", "method": "abstractive",
                   "dtype": "float32", "made_with": made}, fh)
    settings = {"method": "abstractive", "model": "/models/bart"}
    assert row(run(config(tmp_path, tasks=["summarisation"], summarise=settings)), "summarise").rate.measured
    half = row(run(config(tmp_path, tasks=["summarisation"], summarise={**settings, "dtype": "bfloat16"})),
               "summarise")
    assert not half.rate.measured
    assert any("results/ds/summarise ran dtype float32, not summarise.dtype bfloat16" in n for n in half.notes)


def train_run(folder: str, device: str, n_layer: int = 4, **metrics) -> None:
    """A finished training run's config.json and metrics.json (`metrics`: keys over them)."""
    os.makedirs(folder)
    model = {"n_layer": n_layer, "n_head": 4, "n_embd": 128, "block_size": 64, "bias": True}
    train = {"batch_size": 12, "grad_accum": 1, "dtype": "auto", "compile": False}
    with open(f"{folder}/config.json", "w") as fh:
        json.dump({"model": model, "train": train}, fh)
    with open(f"{folder}/metrics.json", "w") as fh:  # 100 steps of 768 tokens in 10 s: 7680 tokens/s
        json.dump(
            {
                "steps": 100,
                "resumed_from_step": 0,
                "tokens_per_step": 768,
                "wall_seconds": 10.0,
                "world_size": 1,
                "device": device,
                **metrics,
            },
            fh,
        )


def test_training_is_measured_by_a_run_of_its_shape_only(tmp_path):
    corpus()
    cfg = config(tmp_path, tasks=["training"], train={"max_iters": 1000, "gpus": 2})
    train_run("results/ds/train", "cuda", n_layer=6)
    train = row(run(cfg, gpus=2), "train")
    assert not train.rate.measured and est.ASSUMED_TRAIN in train.rate.source  # from FLOPs, below
    assert any("results/ds/train trained another shape (n_layer 6)" in n for n in train.notes)
    train_run("results/other/train", "cuda")
    train = row(run(cfg, gpus=2), "train")
    assert train.work == 1000 * 12 * 64 * 2 and train.gpus == 2
    assert train.rate.measured and "scaled linearly from 1 to 2 GPUs" in train.rate.source
    assert train.seconds == pytest.approx([1000 * 768 * 2 / (7680 * 2)])
    assert train.gpu_hours == pytest.approx(2 * 100 / 3600)
    assert row(run(cfg, gpus=1), "train").wall_s is None  # two GPUs a job, one given

    # On the CPU one process trains both processes' micro-batches: the same tokens, one rate.
    train_run("results/cpu/train", "cpu")
    on_cpu = row(run(config(tmp_path, tasks=["training"], train={"max_iters": 1000, "gpus": 2},
                            gpu_jobs={"device": "cpu"})), "train")
    assert on_cpu.work == 1000 * 12 * 64 * 2 and on_cpu.gpus == 0
    assert on_cpu.rate.measured and on_cpu.seconds == pytest.approx([1000 * 768 * 2 / 7680])


def test_a_short_measuring_run_counts_its_warm_up_and_evaluations_once_not_per_token(tmp_path):
    """A run of a few steps (what the output asks for: a small train.max_iters) spends most
    of its wall time on the first step's warm-up (torch.compile) and the final evaluation:
    its steps' own rate (metrics' tokens_per_second) sets the time per token, and the rest
    of its wall time counts once a job, not spread over every token of a longer run."""
    corpus()
    cfg = config(tmp_path, tasks=["training"], train={"max_iters": 20000})
    # 200 steps of 768 tokens at 3840 tokens/s are 40 s; its 100 s wall time holds 60 s more.
    train_run("results/ds/train", "cuda", steps=200, wall_seconds=100.0, tokens_per_second=3840.0)
    train = row(run(cfg), "train")
    assert train.work == 20000 * 768 and train.rate.measured
    assert train.rate.per_s == pytest.approx(3840.0) and train.rate.overhead_s == pytest.approx(60.0)
    assert train.seconds == pytest.approx([20000 * 768 / 3840 + 60])
    assert "60 s" in train.rate.source
    # A record without the steps' rate (older metrics): the whole job's, as before.
    train_run("results/old/train", "cuda", steps=200, wall_seconds=100.0)
    os.rename("results/ds/train", "results/gone")
    assert row(run(cfg), "train").seconds == pytest.approx([20000 * 768 / (200 * 768 / 100.0)])


def test_a_gpu_peak_or_mfu_given_is_said_unused_where_a_measured_run_sets_the_rate(tmp_path):
    """--gpu-peak-tflops and --mfu (GPU_PEAK_TFLOPS=, MFU=) size training without a measured
    run; where one sets the rate, on whatever GPU it had, the figures given go unused: said
    so on the row, not dropped in silence (make estimate GPU_PEAK_TFLOPS=312 read as A100s)."""
    corpus()
    cfg = config(tmp_path, tasks=["training"], train={"max_iters": 1000})
    train_run("results/ds/train", "cuda")
    given = est.estimate(cfg, 1, "--gpus", gpu=est.GpuAssumption(312.0, 0.5))
    train = row(given, "train")
    assert train.rate.measured and train.seconds == pytest.approx(row(run(cfg), "train").seconds)
    (note,) = [n for n in train.notes if "not used" in n]
    assert note.startswith("--gpu-peak-tflops 312 and --mfu 0.5 not used: the rate is measured by results/ds/train")
    assert note in est.table(given).split("train ds: ", 1)[1]  # among the notes the table shows
    assert not any("not used" in n for n in row(run(cfg), "train").notes)


def test_a_measured_training_rate_names_the_gpu_it_ran_on_or_says_it_is_unknown(tmp_path):
    """metrics.json's device is `cuda` whatever the GPU: its made_with names the model, and
    the rate is said to be that GPU's, as an embed rate is, so an A100 run's rate does not
    time an H100 run unsaid; an older run's metrics (no made_with) name no GPU: said so."""
    corpus()
    cfg = config(tmp_path, tasks=["training"], train={"max_iters": 1000})
    a100 = {"device": "cuda", "gpu": "NVIDIA A100-SXM4-80GB", "cuda": "12.4"}
    train_run("results/ds/train", "cuda", made_with=a100)
    result = est.estimate(cfg, 1, "--gpus", gpu=est.GpuAssumption(989.0))
    train = row(result, "train")
    assert train.rate.measured and train.rate.device == "cuda (NVIDIA A100-SXM4-80GB)"
    assert "), on cuda (NVIDIA A100-SXM4-80GB)" in est.table(result)
    assert not any("no GPU model" in n for n in train.notes)
    (unused,) = [n for n in train.notes if "not used" in n]
    assert "measured by results/ds/train on cuda (NVIDIA A100-SXM4-80GB);" in unused

    os.rename("results/ds/train", "results/a100")
    train_run("results/ds/train", "cuda")  # from before made_with
    old = row(est.estimate(cfg, 1, "--gpus", gpu=est.GpuAssumption(989.0)), "train")
    assert old.rate.device == "cuda"
    (note,) = [n for n in old.notes if "no GPU model" in n]
    assert note.startswith("results/ds/train's metrics.json names no GPU model (written before made_with")
    assert any("on a GPU its metrics do not name" in n for n in old.notes if "not used" in n)


def flops_per_token(vocab: int, n_layer: int = 4, n_head: int = 4, n_embd: int = 128, block_size: int = 64) -> int:
    """The trainer's own count (shardflow.train.model.GPT.flops_per_token), of a real model."""
    from shardflow.train.model import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=vocab, block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd))
    return model.flops_per_token(block_size)


def test_training_without_a_run_of_its_shape_is_assumed_from_the_trainers_flops(tmp_path, capsys):
    """tokens x FLOPs per token / (GPUs x peak x MFU), the periodic evaluations at a third of
    the FLOPs on top; listed among the assumed rates; --gpu-peak-tflops and --mfu change it."""
    from shardflow.train.trainer import PEAK_BF16_TFLOPS

    corpus()
    train = {"max_iters": 1000, "gpus": 2, "eval_interval": 300, "eval_windows": 50}
    cfg = config(tmp_path, tasks=["training"], train=train)
    result = run(cfg, gpus=2)
    got = row(result, "train")
    tokens, flops = 1000 * 12 * 64 * 2, flops_per_token(vocab=256)  # char: the vocabulary taken as 256
    speed = 2 * PEAK_BF16_TFLOPS["H100 SXM"] * 1e12 * 0.3
    evals = 4 * 50 * 64 * flops / 3  # at steps 300, 600, 900 and 1000
    assert got.work == tokens and got.seconds == pytest.approx([(tokens * flops + evals) / speed])
    assert got.gpu_hours == pytest.approx(2 * got.seconds[0] / 3600) and got.wall_s == pytest.approx(got.seconds[0])
    assert not got.rate.measured and got.rate.source.startswith(est.ASSUMED_TRAIN)
    assert any("the time is a lower bound" in n for n in got.notes)  # 0.8 M parameters
    assert result.assumed() == ["train ds"] and result.missing() == []
    assert "(assumed rates: train ds)" in est.total_line(result)

    slower = row(est.estimate(cfg, 2, "--gpus", gpu=est.GpuAssumption(312.0, 0.5)), "train")
    assert slower.seconds == pytest.approx([(tokens * flops + evals) / (2 * 312e12 * 0.5)])
    overlay = str(tmp_path / "overlay.yaml")  # the config's, as the CLI reads it
    assert main(f"estimate --configfile {overlay} --gpus 2 --gpu-peak-tflops 312 --mfu 0.5 --json".split()) == 0
    data = json.loads(capsys.readouterr().out)
    assert next(r for r in data["rows"] if r["stage"] == "train")["job_seconds"] == pytest.approx(slower.seconds[0])
    assert data["assumed"] == ["train ds"] and "--gpu-peak-tflops" in json.dumps(data["rows"])
    with pytest.raises(SystemExit):
        main(["estimate", "--configfile", overlay, "--mfu", "1.5"])
    assert "expected a fraction of the peak" in capsys.readouterr().err


def test_training_on_the_cpu_or_with_an_unknown_vocabulary_is_not_assumed(tmp_path):
    corpus()
    on_cpu = row(run(config(tmp_path, tasks=["training"], gpu_jobs={"device": "cpu"})), "train")
    assert on_cpu.rate is None and on_cpu.gpus == 0 and any(n.startswith("not estimated") for n in on_cpu.notes)
    cfg = config(tmp_path, tasks=["training"], shards={"tokenizer": "models/gone/tokenizer.json"})
    gone = run(cfg)
    assert row(gone, "train").rate is None and gone.missing() == ["train ds"]
    assert any("no FLOPs: shards.tokenizer models/gone/tokenizer.json" in n for n in row(gone, "train").notes)


def test_a_bpe_vocabulary_is_shards_vocab_size_and_a_char_one_the_tokenizers_once_built(tmp_path):
    corpus()
    bpe = row(run(config(tmp_path, tasks=["training"], shards={"tokenizer": "bpe", "vocab_size": 1000})), "train")
    assert bpe.seconds[0] > row(run(config(tmp_path, tasks=["training"])), "train").seconds[0]
    os.makedirs("results/ds/tokenizer")
    with open("results/ds/tokenizer/shardflow_tokenizer.json", "w") as fh:
        json.dump({"kind": "char", "identity": {"kind": "char", "vocab_size": 1000}}, fh)
    char = row(run(config(tmp_path, tasks=["training"])), "train")
    assert char.seconds == pytest.approx(bpe.seconds)
    assert any("vocabulary 1,000 (as results/ds/tokenizer/shardflow_tokenizer.json)" in n for n in char.notes)


def test_a_training_sweep_is_assumed_per_job_and_listed_as_assumed(tmp_path):
    corpus()
    sweep = {"stage": "train", "seeds": [0], "metrics": {"best_val_loss": "min"}, "grid": {"train.n_layer": [2, 4]}}
    result = run(config(tmp_path, tasks=["training"], sweeps={"depth": sweep}))
    got = row(result, "train", "sweep depth")
    assert got.assumed_jobs == 2 and got.rate is None and len(got.seconds) == 2
    assert got.seconds[0] < got.seconds[1]  # two layers train faster than four
    assert "train sweep depth" in result.assumed() and result.missing() == []


def test_a_training_sweep_over_train_gpus_counts_each_jobs_own_gpus(tmp_path):
    """A point's job holds its own train.gpus (rules/train_common.smk train_resources): its
    GPU-hours are its seconds x those GPUs, and a job of 4 GPUs on 4 leaves none to another."""
    corpus()
    sweep = {"stage": "train", "seeds": [0], "metrics": {"best_val_loss": "min"}, "grid": {"train.gpus": [1, 4]}}
    got = row(run(config(tmp_path, tasks=["training"], sweeps={"g": sweep}), gpus=4), "train", "sweep g")
    one, four = got.seconds
    assert got.work == 2000 * 12 * 64 * (1 + 4)  # train.max_iters of each point's global batch
    assert got.gpu_hours == pytest.approx((one * 1 + four * 4) / 3600)
    assert got.wall_s == pytest.approx(one + four)  # one after the other: together they need 5 GPUs
    assert any("GPUs per job from 1 to 4" in n for n in got.notes)


def test_a_job_given_more_gpus_counts_every_gpu_it_holds(tmp_path):
    """resources.<rule>.gpu 2 on embed, summarise, embed_queries and retrieval_evaluate:
    each job runs on one GPU (the parse warns the other idles) but holds and pays for
    both, as train's jobs hold train.gpus. Its GPU-hours are its seconds x 2 and the wall
    time packs jobs of 2 onto the GPUs given (a job of 2 waits for 2 free, as the local
    profile's gpu resource makes it); on 1 GPU none can run. An embed sweep's chunk jobs
    (sweep_embed_chunk: resources.embed) hold as many. The estimate counted one GPU a job."""
    corpus()
    beir()
    sweep = {"stage": "embed", "grid": {"embedding.token_budget": [512, 1024]}, "seeds": [0],
             "metrics": {"items_per_s": "max"}}
    overlay = dict(n_chunks=4, tasks=["embedding", "summarisation"], summarise={"method": "extractive"},
                   retrieval={"path": "beir", "n_chunks": 1}, sweeps={"tb": sweep})
    one = run(config(tmp_path, **overlay), gpus=4)
    rules = ("embed", "summarise", "embed_queries", "retrieval_evaluate")
    two = run(config(tmp_path, **overlay, resources={r: {"gpu": 2} for r in rules}), gpus=4)
    stages = [(stage, "ds") for stage in ("embed", "summarise")]
    stages += [(stage, "beir") for stage in ("embed", "embed_queries", "retrieval_evaluate")]
    for stage, dataset in [*stages, ("embed", "sweep tb")]:
        single, double = row(one, stage, dataset), row(two, stage, dataset)
        assert (single.gpus, double.gpus) == (1, 2)
        assert double.seconds == pytest.approx(single.seconds)  # one GPU at work: the same speed
        assert double.gpu_hours == pytest.approx(2 * sum(double.seconds) / 3600)
        assert double.gpu_hours == pytest.approx(2 * single.gpu_hours) and double.cost == pytest.approx(2 * single.cost)
        if dataset != "beir":  # 4 or 8 jobs of 2 on 4 GPUs: two at a time, not four
            assert double.wall_s == pytest.approx(2 * single.wall_s)
        else:  # one job
            assert double.wall_s == pytest.approx(single.wall_s)
    assert any("holds resources.embed.gpu 2 GPUs and runs on one" in n for n in row(two, "embed").notes)
    assert two.gpu_hours == pytest.approx(2 * one.gpu_hours)
    cramped = run(config(tmp_path, **overlay, resources={"embed": {"gpu": 2}}), gpus=1)
    assert row(cramped, "embed").wall_s is None and "embed ds" in cramped.no_wall()


def test_a_rule_given_no_gpu_runs_on_the_cpu_and_counts_no_gpu_hours(tmp_path):
    """resources.<rule>.gpu 0: the job is scheduled without a GPU and runs on the CPU
    (core.gpujob), so its stage has no GPU-hours or cost, and its rate is a CPU run's, as
    under gpu_jobs.device cpu; an embed sweep's chunk jobs (resources.embed) too. The
    estimate counted one GPU a job (plan.job_gpus counts a 0 as one)."""
    corpus()
    beir()
    embed_stats("results/ds/embed", "cpu")
    sweep = {"stage": "embed", "grid": {"embedding.token_budget": [512, 1024]}, "seeds": [0],
             "metrics": {"items_per_s": "max"}}
    overlay = dict(n_chunks=4, tasks=["embedding", "summarisation"], summarise={"method": "extractive"},
                   retrieval={"path": "beir", "n_chunks": 1}, sweeps={"tb": sweep})
    rules = ("embed", "summarise", "embed_queries", "retrieval_evaluate")
    got = run(config(tmp_path, **overlay, resources={r: {"gpu": 0} for r in rules}), gpus=4)
    stages = [(stage, "ds") for stage in ("embed", "summarise")]
    stages += [(stage, "beir") for stage in ("embed", "embed_queries", "retrieval_evaluate")]
    for stage, dataset in [*stages, ("embed", "sweep tb")]:
        on_cpu = row(got, stage, dataset)
        # (the search on the CPU has no assumed rate: not estimated, None)
        assert on_cpu.gpus == 0 and not on_cpu.gpu_hours and not on_cpu.cost, (stage, dataset)
    assert row(got, "embed").rate.device == "cpu"  # the CPU run's rate, not the assumed GPU one
    assert got.gpu_hours == 0.0
    assert any("embed (resources.embed.gpu 0)" in n and "sweep_embed_chunk (resources.embed.gpu 0)" in n
               for n in got.notes)
    # Another rule keeps its GPU: only the rules given none run on the CPU.
    mixed = run(config(tmp_path, **overlay, resources={"summarise": {"gpu": 0}}), gpus=4)
    assert row(mixed, "summarise").gpus == 0 and row(mixed, "embed").gpus == 1


def beir(queries: int = 3, documents: int = 45) -> None:
    os.makedirs("beir/qrels")
    with open("beir/corpus.jsonl", "w") as fh:
        fh.writelines(json.dumps({"_id": f"d{i}", "text": f"doc {i}"}) + "\n" for i in range(documents))
    with open("beir/queries.jsonl", "w") as fh:
        fh.writelines(json.dumps({"_id": f"q{i}", "text": f"q {i}"}) + "\n" for i in range(queries))
    with open("beir/qrels/test.tsv", "w") as fh:
        fh.write("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(queries)))


def search_run(device: str, seconds: float, dataset: str = "beir", search: float | None = None) -> None:
    """A finished retrieval_evaluate: `seconds` the whole job's (its benchmark), `search`
    its search and scoring's (evaluate.stats.json; none in a record from before it)."""
    os.makedirs(f"results/{dataset}/retrieval")
    if search is not None:
        with open(f"results/{dataset}/retrieval/evaluate.stats.json", "w") as fh:
            json.dump({"made_with": {"device": device}, "seconds": search}, fh)
    metrics = {"n_queries": 10, "n_documents": 1000, "device": device, "top_k": 1000}
    with open(f"results/{dataset}/retrieval/metrics.json", "w") as fh:
        json.dump(metrics, fh)
    with open(f"results/{dataset}/retrieval/queries.stats.json", "w") as fh:
        json.dump({"dim": 384}, fh)
    os.makedirs("benchmarks/retrieval_evaluate", exist_ok=True)
    with open(f"benchmarks/retrieval_evaluate/{dataset}.tsv", "w") as fh:
        fh.write(f"s\th:m:s\n{seconds}\t0:00:0{seconds:.0f}\n")


def test_the_retrieval_search_is_queries_x_documents_x_dim_at_an_assumed_or_measured_rate(tmp_path):
    corpus()
    beir()
    cfg = config(tmp_path, retrieval={"path": "beir", "n_chunks": 1})
    result = run(cfg)
    search = row(result, "retrieval_evaluate", "beir")
    assert search.work == 3 * 45 * 384 and search.unit == "multiply-adds"  # the model's width
    reading = 45 * 384 * 4 / est.SEARCH_READ_BYTES_PER_S  # float32 embeddings.npy
    assert search.seconds == pytest.approx([3 * 45 * 384 / est.SEARCH_MACS_PER_S + reading])
    assert not search.rate.measured and search.rate.source.startswith(est.ASSUMED_SEARCH)
    assert "retrieval_evaluate beir" in result.assumed() and "retrieval_evaluate beir" not in result.missing()
    # One job on 8 GPUs: no advice to cut more chunks, which only the chunk stages have.
    wide = run(cfg, gpus=8)
    assert not any("some GPUs idle" in n for n in row(wide, "retrieval_evaluate", "beir").notes)
    assert any("some GPUs idle" in n for n in row(wide, "embed", "beir").notes)
    faiss_cfg = config(tmp_path, retrieval={"path": "beir", "n_chunks": 1, "backend": "faiss"})
    unmeasured = run(faiss_cfg)  # faiss scores on the CPU: the GPU's assumed rate is not its
    assert row(unmeasured, "retrieval_evaluate", "beir").rate is None
    # ... and its job holds no GPU (plan.gpu_rules_on_cpu): no GPU-hours to miss.
    assert row(unmeasured, "retrieval_evaluate", "beir").gpus == 0
    assert "retrieval_evaluate beir" not in unmeasured.missing()
    search_run("cpu", 4.0)  # this data set's, measured on the CPU: no rate for a GPU job
    search_run("cuda", 2.0, "old")
    search = row(run(cfg), "retrieval_evaluate", "beir")
    assert search.rate.measured and search.rate.per_s == pytest.approx(10 * 1000 * 384 / 2.0)
    assert search.seconds == pytest.approx([3 * 45 * 384 / search.rate.per_s])
    assert "results/old/retrieval" in search.rate.source
    assert any("passed over, measured on another kind of device: results/beir/retrieval" in n for n in search.notes)
    faiss = row(run(faiss_cfg), "retrieval_evaluate", "beir")
    assert faiss.rate.measured and faiss.rate.per_s == pytest.approx(10 * 1000 * 384 / 4.0)  # the CPU-scored run


def test_a_retrieval_rate_is_its_searchs_where_the_record_has_it_and_start_up_is_counted_once(tmp_path):
    """The whole job's benchmark divided the work: a small run (ArguAna) spends most of
    its time starting up, so a large corpus was projected many times too slow. The
    search's own seconds (evaluate.stats.json) give the rate, the rest of the job is
    counted once."""
    corpus()
    beir()
    cfg = config(tmp_path, retrieval={"path": "beir", "n_chunks": 1})
    search_run("cuda", 10.0, search=0.5)
    search = row(run(cfg), "retrieval_evaluate", "beir")
    assert search.rate.measured and search.rate.per_s == pytest.approx(10 * 1000 * 384 / 0.5)
    assert search.rate.overhead_s == pytest.approx(9.5) and "its search and scoring" in search.rate.source
    assert search.seconds == pytest.approx([3 * 45 * 384 / search.rate.per_s + 9.5])


def neighbours_run(dataset: str, device: str, seconds: float, chunk: int = 0, items: int = 10,
                   search: float | None = None, dim: int | None = None) -> None:
    """A finished neighbours job of `dataset`: its stats (`items` records against 1,000
    documents, as chunk_neighbours records them, the search's `search` seconds: half the
    job's unless given; `dim`: the vectors' width, which records from before it lack)
    and its benchmark (`seconds`, the whole job's)."""
    os.makedirs(f"results/{dataset}/neighbours", exist_ok=True)
    stats = {"items": items, "documents": 1000, "k": 10, "similarity": "cosine", "backend": "torch",
             "device": device, "seconds": seconds / 2 if search is None else search, "chunk": chunk,
             "made_with": {"device": device}, **({"dim": dim} if dim else {})}
    with open(f"results/{dataset}/neighbours/neighbours_{chunk}.stats.json", "w") as fh:
        json.dump(stats, fh)
    os.makedirs(f"benchmarks/neighbours/{dataset}", exist_ok=True)
    with open(f"benchmarks/neighbours/{dataset}/chunk_{chunk}.tsv", "w") as fh:
        fh.write(f"s\th:m:s\n{seconds}\t0:00:0{seconds:.0f}\n")


NEIGHBOURS = {"tasks": ["embedding", "neighbours"]}


def test_the_neighbours_search_is_each_chunks_records_x_documents_x_dim_at_an_assumed_or_measured_rate(tmp_path):
    """A neighbours job searches its chunk's records against the whole corpus: records x
    documents x dim multiply-adds, at the rate a finished neighbours job here measured on
    the kind of device the job will use (its search's seconds, the rest of its benchmark
    once a job), else on a GPU at SEARCH_MACS_PER_S plus each job's read of the matrix; on
    the CPU, not estimated. Its jobs are a chunk's each: more chunks use idle GPUs."""
    corpus()
    cfg = config(tmp_path, **NEIGHBOURS)
    result = run(cfg)
    search = row(result, "neighbours")
    assert (search.jobs, search.gpus, search.unit) == (2, 1, "multiply-adds")
    assert search.work == 100 * 100 * 384  # two chunks of 50 records, the model's width
    reading = 100 * 384 * 4 / est.SEARCH_READ_BYTES_PER_S  # float32 embeddings.npy, read by each job
    assert search.seconds == pytest.approx([50 * 100 * 384 / est.SEARCH_MACS_PER_S + reading] * 2)
    assert not search.rate.measured and search.rate.source.startswith(est.ASSUMED_NEIGHBOURS)
    assert search.done == [False, False] and "neighbours ds" in result.assumed()
    assert any("2 jobs for 8 GPUs: some GPUs idle (more chunks: n_chunks" in n
               for n in row(run(cfg, gpus=8), "neighbours").notes)
    outputs_of("neighbours", dataset="ds", chunk=1)
    assert row(run(cfg), "neighbours").done == [False, True]  # as make status counts a job done
    neighbours_run("ds", "cpu", 4.0)  # this data set's, measured on the CPU: no rate for a GPU job
    neighbours_run("old", "cuda:1", 2.0)  # a 1 s search in a 2 s job
    search = row(run(cfg), "neighbours")
    assert search.rate.measured and search.rate.per_s == pytest.approx(10 * 1000 * 384 / 1.0)
    assert search.rate.device == "cuda:1" and "results/old/neighbours/neighbours_0.stats.json" in search.rate.source
    assert search.rate.overhead_s == pytest.approx(1.0)
    assert search.seconds == pytest.approx([50 * 100 * 384 / search.rate.per_s + 1.0] * 2)
    assert any(n.startswith("passed over, measured on another kind of device: results/ds/neighbours/neighbours_0")
               and n.endswith("on cpu") for n in search.notes)
    # faiss searches on the CPU: its jobs hold no GPU, and the CPU-measured run is their rate.
    faiss = row(run(config(tmp_path, **NEIGHBOURS, neighbours={"backend": "faiss"})), "neighbours")
    assert faiss.gpus == 0 and faiss.gpu_hours == 0
    assert faiss.rate.measured and faiss.rate.per_s == pytest.approx(10 * 1000 * 384 / 2.0)
    assert not any("passed over" in n for n in faiss.notes)  # this data set's run came first
    # On the CPU with no CPU run measured: no assumed rate (a CPU's varies too much).
    shutil.rmtree("results/ds/neighbours")
    on_cpu = run(config(tmp_path, **NEIGHBOURS, gpu_jobs={"device": "cpu"}))
    search = row(on_cpu, "neighbours")
    assert search.gpus == 0 and search.rate is None and search.seconds is None
    assert any(n.startswith("not estimated: the search runs on the CPU") for n in search.notes)
    assert search.work == 100 * 100 * 384 and "neighbours ds" not in on_cpu.missing()  # no GPU-hours to miss


def test_a_neighbours_rate_is_its_searchs_and_the_jobs_start_up_is_counted_once_a_job(tmp_path):
    """A small run's job is mostly start-up (imports, CUDA, reading the matrix): the
    demo's searched for 0.18 s of a 1.7 s job. Its whole benchmark over the work made a
    rate nine times too low, which a large corpus's jobs multiplied; the search's own
    seconds make the rate, and the rest of the job is counted once a job. A job's
    benchmark shorter than its search (other clocks) counts no start-up."""
    corpus()
    cfg = config(tmp_path, **NEIGHBOURS)
    neighbours_run("ds", "cuda", 1.7, search=0.18)
    search = row(run(cfg), "neighbours")
    assert search.rate.per_s == pytest.approx(10 * 1000 * 384 / 0.18)
    assert search.rate.overhead_s == pytest.approx(1.52)
    assert search.seconds == pytest.approx([50 * 100 * 384 / search.rate.per_s + 1.52] * 2)
    assert "the search's 0.18 s" in search.rate.source and "2 s of start-up and reading once a job" in search.rate.source
    neighbours_run("ds", "cuda", 1.0, search=1.5)
    search = row(run(cfg), "neighbours")
    assert search.rate.per_s == pytest.approx(10 * 1000 * 384 / 1.5) and search.rate.overhead_s == 0.0


def test_a_neighbours_job_without_a_benchmark_measures_the_rate_by_its_record_alone(tmp_path):
    """A finished job's benchmark may be gone (another working directory's results copied
    in, benchmarks/ cleaned): its record's search seconds still give the rate, the job's
    read of the matrix assumed as its start-up, and the rate's source says so. A record
    with a benchmark goes first: a rate with no start-up underestimated every job."""
    corpus()
    neighbours_run("ds", "cuda", 2.0, search=0.5)
    os.remove("benchmarks/neighbours/ds/chunk_0.tsv")
    search = row(run(config(tmp_path, **NEIGHBOURS)), "neighbours")
    assert search.rate.measured and search.rate.per_s == pytest.approx(10 * 1000 * 384 / 0.5)
    reading = 100 * 384 * 4 / est.SEARCH_READ_BYTES_PER_S  # the corpus's float32 matrix, once a job
    assert search.rate.overhead_s == pytest.approx(reading) and "no benchmark" in search.rate.source
    assert "start-up not known" in search.rate.source
    neighbours_run("ds", "cuda", 3.0, chunk=1, search=0.5)  # sorts after chunk 0, which has no benchmark
    search = row(run(config(tmp_path, **NEIGHBOURS)), "neighbours")
    assert search.rate.overhead_s == pytest.approx(2.5) and "neighbours_1.stats.json" in search.rate.source


def test_a_neighbours_rate_counts_the_width_its_job_recorded(tmp_path):
    """A job's record says its vectors' width (dim): another model's 768-wide vectors did
    twice the multiply-adds a row of the config's 384. A record from before dim was
    recorded is taken at the config's width, and the rate's source says so."""
    corpus()
    cfg = config(tmp_path, **NEIGHBOURS)
    neighbours_run("ds", "cuda", 2.0, dim=768)
    wide = row(run(cfg), "neighbours")
    assert wide.rate.per_s == pytest.approx(10 * 1000 * 768 / 1.0) and "x dim 768 (recorded)" in wide.rate.source
    assert wide.work == 100 * 100 * 384  # this run's work is at the config's width
    neighbours_run("ds", "cuda", 2.0)
    old = row(run(cfg), "neighbours")
    assert old.rate.per_s == pytest.approx(10 * 1000 * 384 / 1.0)
    assert "x dim 384 (not recorded: the config's width)" in old.rate.source


def test_a_neighbours_job_longer_than_its_runtime_says_more_chunks_make_shorter_jobs(tmp_path):
    """resources.neighbours.runtime is a job's wall-time limit (minutes): a job estimated
    past it is killed there, so the row says so, naming the key, and that more chunks
    (n_chunks) make shorter jobs; within it, nothing is said."""
    corpus()
    neighbours_run("ds", "cuda", 1000.0, search=1000.0)  # 3,840 multiply-adds/s: 500 s a chunk of 50
    slow = row(run(config(tmp_path, **NEIGHBOURS, resources={"neighbours": {"runtime": 5}})), "neighbours")
    assert slow.seconds == pytest.approx([500.0] * 2)
    assert any("resources.neighbours.runtime 5 min" in n and "more chunks (n_chunks) make shorter jobs" in n
               for n in slow.notes)
    roomy = row(run(config(tmp_path, **NEIGHBOURS, resources={"neighbours": {"runtime": 10}})), "neighbours")
    assert not any("resources.neighbours.runtime" in n for n in roomy.notes)


def test_an_embed_or_training_job_longer_than_its_runtime_says_so_and_what_shortens_it(tmp_path):
    """Every GPU rule's resources.<rule>.runtime is its jobs' wall-time limit, not
    neighbours' alone: an embed chunk past it says more chunks make shorter jobs, a
    training job past it names train.max_iters and train.gpus; within it, nothing."""
    corpus()
    embed = row(run(config(tmp_path, resources={"embed": {"runtime": 1}}), records=10_000), "embed")
    assert embed.seconds == pytest.approx([125.0] * 2)  # 5,000 records a chunk at the assumed 40/s
    assert any("the longest job, 2.1 min, runs past resources.embed.runtime 1 min" in n
               and "more chunks (n_chunks) make shorter jobs" in n
               and "a retry goes on from its saved parts: its 3 attempts (resources.embed.retries 2) may finish it"
               in n for n in embed.notes), embed.notes
    # Attempts of a minute each cannot finish 2.1 min without retries: it fails (it said "may end")
    alone = row(run(config(tmp_path, resources={"embed": {"runtime": 1, "retries": 0}}), records=10_000), "embed")
    assert any("its 1 attempt (resources.embed.retries 0) is not enough: it fails" in n for n in alone.notes), \
        alone.notes
    roomy = row(run(config(tmp_path, resources={"embed": {"runtime": 3}}), records=10_000), "embed")
    assert not any("resources.embed.runtime" in n for n in roomy.notes)
    train_run("results/ds/train", "cuda")  # 7,680 tokens/s: 1,000 steps of 768 tokens in 100 s
    train = {"max_iters": 1000}
    slow = row(run(config(tmp_path, tasks=["training"], train=train, resources={"train": {"runtime": 1}})), "train")
    assert slow.seconds == pytest.approx([100.0])
    assert any("resources.train.runtime 1 min" in n and "train.max_iters" in n and "train.gpus" in n
               and "from its last checkpoint" in n for n in slow.notes), slow.notes
    fits = row(run(config(tmp_path, tasks=["training"], train=train, resources={"train": {"runtime": 2}})), "train")
    assert not any("resources.train.runtime" in n for n in fits.notes)


def test_a_sweeps_jobs_longer_than_their_rules_runtime_say_so_on_the_sweeps_row(tmp_path):
    """An embed sweep's chunk jobs (sweep_embed_chunk) run under resources.embed, as
    plan.resources_key names it: its row says when its longest job runs past the runtime."""
    corpus()
    sweep = {"stage": "embed", "grid": {"embedding.token_budget": [512, 1024]}, "seeds": [0],
             "metrics": {"items_per_s": "max"}}
    got = row(run(config(tmp_path, sweeps={"tb": sweep}, resources={"embed": {"runtime": 1}}), records=10_000),
              "embed", "sweep tb")
    assert max(got.seconds) == pytest.approx(125.0)
    assert any("runs past resources.embed.runtime 1 min" in n and "more chunks (n_chunks)" in n
               for n in got.notes), got.notes


def test_the_retrieval_search_longer_than_its_runtime_says_to_raise_it(tmp_path):
    """retrieval_evaluate is one job over all the queries: no knob makes it shorter, so the
    note says to raise its runtime, and names no chunks."""
    corpus()
    beir()
    search_run("cuda", 10.0, search=1e6)  # 3.84 multiply-adds/s: 3 x 45 x 384 take 13,500 s
    search = row(run(config(tmp_path, retrieval={"path": "beir", "n_chunks": 1})), "retrieval_evaluate", "beir")
    assert search.seconds == pytest.approx([13_500.0])
    (note,) = [n for n in search.notes if "resources.retrieval_evaluate.runtime 120 min" in n]
    assert "raise" in note and "chunks" not in note and "a retry starts it again" in note
    assert "each of its 3 attempts (resources.retrieval_evaluate.retries 2) is killed, and it fails" in note


def neighbours_table(rows: int) -> None:
    """A finished merge_neighbours' table of `rows` rows, as chunk_neighbours writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardflow.retrieval.neighbours import TABLE_SCHEMA

    columns = [[f"doc-{r}" for r in range(rows)], [1] * rows, ["doc-0"] * rows, [0.5] * rows, list(range(rows)),
               [0] * rows]
    pq.write_table(pa.Table.from_arrays([pa.array(c) for c in columns], schema=TABLE_SCHEMA),
                   "results/ds/neighbours.parquet")


def test_the_neighbours_disk_is_a_finished_tables_bytes_a_row(tmp_path):
    """Documents x neighbours.k rows (k at most the other documents), at the bytes a row
    of a finished neighbours.parquet, twice (the chunks' tables and the merged copy); not
    estimated before one exists."""
    corpus()
    assert row(run(config(tmp_path, **NEIGHBOURS)), "neighbours").disk is None
    os.makedirs("results/ds")
    neighbours_table(40)
    per_row = os.path.getsize("results/ds/neighbours.parquet") / 40
    search = row(run(config(tmp_path, **NEIGHBOURS, neighbours={"k": 3})), "neighbours")
    assert search.disk == round(2 * 100 * 3 * per_row)
    assert "documents x neighbours.k rows at the bytes a row of results/ds/neighbours.parquet" in search.disk_source
    # A document lists at most the corpus less itself (chunk_neighbours): a k past it
    # writes no more rows.
    wide = row(run(config(tmp_path, **NEIGHBOURS, neighbours={"k": 500})), "neighbours")
    assert wide.disk == round(2 * 100 * 99 * per_row)


def search_config(tmp_path, search: dict | None = None, **overlay) -> dict:
    """A config of tasks embedding and search, its queries questions.jsonl unless `search` says."""
    return config(tmp_path, tasks=["embedding", "search"], search={"queries": "questions.jsonl", **(search or {})},
                  **overlay)


def questions(n: int = 7, name: str = "questions.jsonl") -> str:
    with open(name, "w") as fh:
        fh.writelines(json.dumps({"id": f"q{i}", "text": f"question {i}"}) + "\n" for i in range(n))
    return name


def batch_search_run(dataset: str, device: str, seconds: float, search: float, queries: int = 10,
                     documents: int = 1000, dim: int = 384) -> None:
    """A finished search job of `dataset`: its record (search.stats.json: the search's
    `search` seconds, its queries, documents and width) and its benchmark (`seconds`, the
    whole job's)."""
    os.makedirs(f"results/{dataset}/search", exist_ok=True)
    stats = {"queries": queries, "documents": documents, "dim": dim, "k": 10, "device": device, "seconds": search,
             "made_with": {"device": device}}
    with open(f"results/{dataset}/search/search.stats.json", "w") as fh:
        json.dump(stats, fh)
    os.makedirs("benchmarks/search", exist_ok=True)
    with open(f"benchmarks/search/{dataset}.tsv", "w") as fh:
        fh.write(f"s\th:m:s\n{seconds}\t0:00:0{seconds:.0f}\n")


def test_the_search_task_embeds_its_queries_and_searches_them_queries_x_documents_x_dim(tmp_path):
    """Task search: embed_search_queries (one GPU job) embeds search.queries' records at the
    corpus's embed rate; search (one GPU job) is queries x documents x dim multiply-adds,
    at the assumed GPU search rate where no search job here measured it, said so. The
    queries are counted in the file, or in the prepared queries.jsonl once it exists; an
    s3:// file is not counted here, and neither row is estimated then; a missing local
    file is an error naming the key."""
    corpus()
    questions(7)
    cfg = search_config(tmp_path)
    result = run(cfg)
    embed, queries, search = row(result, "embed"), row(result, "embed_search_queries"), row(result, "search")
    assert (queries.jobs, queries.work, queries.unit, queries.gpus) == (1, 7, "queries", 1)
    assert queries.rate == embed.rate and queries.seconds == pytest.approx([7 / 40])  # the assumed 40 records/s
    assert any("counted in questions.jsonl (search.queries)" in n for n in queries.notes), queries.notes
    assert (search.jobs, search.unit, search.gpus) == (1, "multiply-adds", 1)
    assert search.work == 7 * 100 * 384  # the model's width
    reading = 100 * 384 * 4 / est.SEARCH_READ_BYTES_PER_S  # float32 embeddings.npy, once
    assert search.seconds == pytest.approx([7 * 100 * 384 / est.SEARCH_MACS_PER_S + reading])
    assert not search.rate.measured and search.rate.source.startswith(est.ASSUMED_BATCH_SEARCH)
    assert {"embed_search_queries ds", "search ds"} <= set(result.assumed())
    assert queries.done == [False] and search.done == [False]
    assert search.disk == 7 * 10 * est.HIT_BYTES  # search.k 10 hits a query
    outputs_of("embed_search_queries", dataset="ds")
    assert row(run(cfg), "embed_search_queries").done == [True]  # as make status counts it
    os.makedirs("results/ds/search", exist_ok=True)
    questions(3, "results/ds/search/queries.jsonl")  # search_queries has run: its file, as read
    queries = row(run(cfg), "embed_search_queries")
    assert queries.work == 3 and any("counted in results/ds/search/queries.jsonl" in n for n in queries.notes)
    assert row(run(cfg), "search").work == 3 * 100 * 384
    shutil.rmtree("results/ds/search")
    remote = run(search_config(tmp_path, {"queries": "s3://bucket/questions.jsonl"}))
    for stage in ("embed_search_queries", "search"):
        got = row(remote, stage)
        assert got.work is None and got.seconds is None and f"{stage} ds" in remote.missing()
        assert any("not counted: search.queries s3://bucket/questions.jsonl is in S3" in n for n in got.notes), \
            got.notes
    with pytest.raises(est.EstimateError, match="search.queries 'nope.jsonl' does not exist"):
        run(search_config(tmp_path, {"queries": "nope.jsonl"}))


def test_a_search_of_more_queries_than_a_slice_reads_the_corpus_once_a_slice(tmp_path, monkeypatch):
    """A search job reads the corpus's matrix once a slice of queries (search.slice_rows, a
    large GPU's budget): 7 queries in slices of 3 are 3 passes, 2 reads more than one
    slice's, said so; the neighbours jobs likewise by their chunks' records."""
    import shardflow.retrieval.search as search_module

    corpus()
    questions(7)
    cfg = search_config(tmp_path)
    one = row(run(cfg), "search")
    assert not any("passes over the corpus" in n for n in one.notes), one.notes
    monkeypatch.setattr(search_module, "QUERY_BLOCK", 3)
    monkeypatch.setattr(search_module, "SLICE_BYTES", {"cuda": 1, "cpu": 1})
    three = row(run(cfg), "search")
    reading = 100 * 384 * 4 / est.SEARCH_READ_BYTES_PER_S
    assert three.seconds == pytest.approx([one.seconds[0] + 2 * reading])
    assert any(n.startswith("3 passes over the corpus (slices of 3 queries on a GPU with 8 GiB free or more): ")
               for n in three.notes), three.notes
    extra, said = est.corpus_passes(cfg, "cuda", 10, 100, 384, 5)  # k + 1 of neighbours' 4
    assert extra == pytest.approx(3 * reading) and said.startswith("4 passes over the corpus (slices of 3 queries")


def test_a_search_rate_is_a_finished_search_jobs_record_on_the_same_kind_of_device(tmp_path):
    """A finished search job's record (search.stats.json: the search's seconds, queries,
    documents, dim) gives the rate, the rest of its benchmark (start-up) counted once; this
    data set's first, a record of the CPU no rate for a GPU job. faiss searches on the
    CPU: the job holds no GPU, and only a CPU-measured record times it."""
    corpus()
    questions(7)
    cfg = search_config(tmp_path)
    batch_search_run("ds", "cpu", 4.0, search=2.0)
    batch_search_run("old", "cuda:0", 3.0, search=0.5)
    search = row(run(cfg), "search")
    assert search.rate.measured and search.rate.per_s == pytest.approx(10 * 1000 * 384 / 0.5)
    assert search.rate.overhead_s == pytest.approx(2.5) and search.rate.device == "cuda:0"
    assert "results/old/search/search.stats.json" in search.rate.source
    assert search.seconds == pytest.approx([7 * 100 * 384 / search.rate.per_s + 2.5])
    assert any(n.startswith("passed over, measured on another kind of device: results/ds/search/search.stats.json")
               for n in search.notes), search.notes
    faiss = run(search_config(tmp_path, {"backend": "faiss"}))
    got = row(faiss, "search")
    assert got.gpus == 0 and got.rate.measured and got.rate.per_s == pytest.approx(10 * 1000 * 384 / 2.0)
    os.remove("results/ds/search/search.stats.json")
    got = row(run(search_config(tmp_path, {"backend": "faiss"})), "search")
    assert got.rate is None and got.seconds is None
    assert any(n.startswith("not estimated: search.backend faiss searches on the CPU") for n in got.notes), got.notes


def test_the_search_tasks_jobs_longer_than_their_runtime_say_so(tmp_path):
    """Both of task search's GPU rules have a resources.<rule>.runtime: a job estimated past
    it says so. Each is one job over all the queries (a longer runtime); the query
    embedding goes on from its saved parts on a retry, the search starts again."""
    corpus()
    questions(7)
    embed_stats("results/ds/embed", "cuda", items=10, seconds=1000.0)  # 0.01 records/s: 700 s for 7 queries
    batch_search_run("ds", "cuda", 1e6, search=1e6)  # 3.84 multiply-adds/s: 7 x 100 x 384 take 70,000 s
    runtime = {"embed_search_queries": {"runtime": 5}, "search": {"runtime": 5}}
    result = run(search_config(tmp_path, resources=runtime))
    queries, search = row(result, "embed_search_queries"), row(result, "search")
    assert queries.seconds == pytest.approx([700.0]) and search.seconds == pytest.approx([70_000.0])
    (note,) = [n for n in queries.notes if "resources.embed_search_queries.runtime 5 min" in n]
    assert "raise" in note and "a retry goes on from its saved parts" in note
    (note,) = [n for n in search.notes if "resources.search.runtime 5 min" in n]
    assert "raise" in note and "chunks" not in note and "a retry starts it again" in note
    roomy = {"embed_search_queries": {"runtime": 20}, "search": {"runtime": 2000}}
    result = run(search_config(tmp_path, resources=roomy))
    assert not any("runtime" in n for stage in ("embed_search_queries", "search") for n in row(result, stage).notes)


def test_the_search_disk_is_a_finished_hits_tables_bytes_a_row(tmp_path):
    """hits.parquet holds queries x search.k rows (k at most the corpus): at the bytes a
    row of a finished hits.parquet here, else at HIT_BYTES, said so."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardflow.retrieval.batch import HITS_SCHEMA

    corpus()
    questions(7)
    wide = row(run(search_config(tmp_path, {"k": 500})), "search")
    assert wide.disk == 7 * 100 * est.HIT_BYTES and "search.k" in wide.disk_source
    os.makedirs("results/ds/search")
    columns = [[f"q{r // 4}" for r in range(40)], [r % 4 + 1 for r in range(40)], [f"doc-{r}" for r in range(40)],
               [0.5] * 40, list(range(40))]
    pq.write_table(pa.Table.from_arrays([pa.array(c) for c in columns], schema=HITS_SCHEMA),
                   "results/ds/search/hits.parquet")
    per_row = os.path.getsize("results/ds/search/hits.parquet") / 40
    search = row(run(search_config(tmp_path, {"k": 3})), "search")
    assert search.disk == round(7 * 3 * per_row)
    assert "the bytes a row of results/ds/search/hits.parquet" in search.disk_source


@pytest.mark.dryrun
def test_a_retrieval_sweep_counts_each_embedding_set_once_as_the_dry_run_lists_its_jobs(tmp_path):
    """A retrieval sweep embeds once per distinct embedding settings (shardflow.sweep.shared):
    'ml' computes max_length 64's set and reads the main run's (128) for the rest; 'more'
    computes 32's and shares 64's with 'ml'. The estimate's jobs are the dry run's."""
    corpus()
    beir()
    grid = {"embedding.max_length": [64, 128], "retrieval.top_k": [100, 200]}
    each = {"stage": "retrieval", "seeds": [0], "metrics": {"ndcg_at_10": "max"}}
    sweeps = {"ml": {**each, "grid": grid}, "more": {**each, "grid": {"embedding.max_length": [32, 64]}}}
    cfg = config(tmp_path, embedding={"max_length": 128}, retrieval={"path": "beir", "n_chunks": 2}, sweeps=sweeps)
    dry = job_counts(snakemake(tmp_path, "-n", "--configfile", str(tmp_path / "overlay.yaml")).stdout)
    specs = est.sweeps(cfg)
    sets = shared_plan(specs.values(), cfg, dataset="beir", n_chunks=2, device=cfg["gpu_jobs"]["device"])
    short = next(p for p in specs["ml"].ids if specs["ml"].point(p)["embedding.max_length"] == 64)
    key = sets.of_job("ml", short, 0)[0].key
    embed_stats(f"results/sweeps/_embeddings/beir/corpus/{key}/embed", "cuda", items=1000)  # 64's set, measured
    os.makedirs(f"results/sweeps/ml/{short}/seed=0")
    with open(f"results/sweeps/ml/{short}/seed=0/metrics.json", "w") as fh:  # a job that read 64's set ended
        fh.write("{}")
    result = run(cfg)
    swept = [r for r in result.rows if r.dataset.startswith("sweep ")]
    rules = {
        "sweep_embed": "embed",
        "sweep_embed_queries": "embed_queries",
        "sweep_retrieval_evaluate": "retrieval_evaluate",
    }
    assert {rule: sum(r.jobs for r in swept if r.stage == stage) for rule, stage in rules.items()} == {
        rule: dry[rule] for rule in rules
    }
    assert dry["sweep_embed"] == 4 and dry["sweep_retrieval_evaluate"] == 6  # 2 sets x 2 chunks; 4 + 2 points
    ml, more = row(result, "embed", "sweep ml"), row(result, "embed", "sweep more")
    assert ml.jobs == 2 and ml.work == 45 and ml.rate.measured and ml.rate.per_s == pytest.approx(100.0)
    assert key in ml.rate.source and ml.done == [True, True]
    assert more.jobs == 2 and not more.rate.measured and more.done == [False, False]
    assert ml.disk == more.disk == 2 * 45 * 384 * 4  # chunk files and merged copy, as the embed row's
    assert any("shared with sweep ml" in n for n in row(result, "retrieval_evaluate", "sweep more").notes)
    assert any("the main run's" in n for n in row(result, "retrieval_evaluate", "sweep ml").notes)
    queries = row(result, "embed_queries", "sweep ml")
    assert queries.jobs == 1 and queries.work == 3 and queries.rate == ml.rate and queries.disk == 3 * 384 * 4
    search = row(result, "retrieval_evaluate", "sweep ml")
    assert search.jobs == 4 and search.work == 4 * 3 * 45 * 384
    assert search.done == [job == (short, 0) for job in specs["ml"].jobs()]  # its metrics JSON exists
    assert "embed sweep more" in result.assumed() and result.missing() == []
    # Status's changed-model check lists these jobs' stats files as the workflow does
    # (the shared sets' own patterns): none recorded a model here, so nothing to say.
    from shardflow.workflow import plan, status

    assert status.changed_models(cfg, list(plan.datasets(cfg).values()), specs) == []


def dataset_manifest(dataset: str, items: int, bytes_each: int) -> None:
    """Another data set's split manifest: two chunks of `items` records, `bytes_each` a record."""
    os.makedirs(f"results/{dataset}/chunks", exist_ok=True)
    chunks = [{"chunk": i, "items": items // 2, "bytes": bytes_each * (items // 2)} for i in range(2)]
    with open(f"results/{dataset}/chunks/manifest.json", "w") as fh:
        json.dump({"n_chunks": 2, "chunks": chunks, "total_records": items}, fh)


def test_a_rate_measured_on_another_data_sets_records_of_another_length_is_passed_over(tmp_path):
    """Embedding and summarising take time per token, not per record: the demo's short
    lines at 100 records/s say nothing of a corpus of articles a hundred times longer, where
    the estimate priced them at the demo's rate as measured. A run of another data set whose
    records average more than LENGTH_FACTOR times as long or as short (its split's manifest;
    this data set's manifest or input) is passed over, said why; one of like length is
    used, and the row names whose records measured it."""
    with open("corpus.jsonl", "w") as fh:  # about 2,000 bytes a record
        fh.writelines(json.dumps({"id": i, "text": "x" * 2000}) + "\n" for i in range(100))
    cfg = config(tmp_path)
    embed_stats("results/demo/embed", "cuda")
    dataset_manifest("demo", 1000, 20)
    embed = row(run(cfg), "embed")
    assert not embed.rate.measured and embed.rate.per_s == 40
    assert any(
        "results/demo/embed ran on data set demo's records, 20 bytes each on average (its split's manifest), "
        "this data set's 2,023 (about the input's text)" in n
        for n in embed.notes
    )
    dataset_manifest("demo", 1000, 1500)  # like length: its rate holds
    embed = row(run(cfg), "embed")
    assert embed.rate.measured and embed.rate.per_s == pytest.approx(100.0)
    assert any(n.startswith("measured on data set demo's records, 1,500 bytes each") for n in embed.notes)
    os.makedirs("results/demo/summarise")
    with open("results/demo/summarise/summaries_0.stats.json", "w") as fh:
        json.dump({"chunk": 0, "items": 100, "seconds": 1.0, "device": "cpu", "method": "lead"}, fh)
    dataset_manifest("demo", 1000, 20)
    summarise = row(run(config(tmp_path, tasks=["summarisation"])), "summarise")  # lead, on the CPU
    assert not summarise.rate.measured
    assert any("results/demo/summarise ran on data set demo's records, 20 bytes" in n for n in summarise.notes)


def test_a_parquet_inputs_record_length_is_not_read_from_its_compressed_size(tmp_path):
    """A Parquet file's size is of compressed columns: 100 records of 2,000 bytes of text
    took a few KB, read as records about as short as the demo's, whose rate was then used
    as measured. Its length is not known here: the rate is used, and the note says its
    length was not compared."""
    import pandas as pd

    pd.DataFrame({"id": [str(i) for i in range(100)], "text": ["x" * 2000] * 100}).to_parquet("corpus.parquet")
    cfg = config(tmp_path, input={"path": "corpus.parquet"})
    embed_stats("results/demo/embed", "cuda")
    dataset_manifest("demo", 1000, 20)
    embed = row(run(cfg), "embed")
    assert any("their length not compared with this data set's (this data set's not known here)" in n
               for n in embed.notes), embed.notes


# -------------------------------------------------------------------- records


def write_manifest(items: list[int], sources: list[str], n_chunks: int | None = None) -> None:
    os.makedirs("results/ds/chunks", exist_ok=True)
    chunks = [{"chunk": i, "items": n, "bytes": 10 * n} for i, n in enumerate(items)]
    with open("results/ds/chunks/manifest.json", "w") as fh:
        json.dump(
            {"n_chunks": n_chunks or len(items), "chunks": chunks, "total_records": sum(items), "sources": sources}, fh
        )


def test_records_come_from_the_splits_manifest_else_are_counted(tmp_path):
    corpus(100)
    cfg = config(tmp_path)
    counted = run(cfg).records["ds"]
    assert counted.records == 100 and counted.source.startswith("counted") and not counted.per_chunk
    write_manifest([70, 20], ["corpus.jsonl"])  # after the corpus: the split ran on it
    split = run(cfg).records["ds"]
    assert (split.records, split.per_chunk, split.chunk_bytes) == (90, (70, 20), 900)
    assert "results/ds/chunks/manifest.json" in split.source
    os.utime("corpus.jsonl", (1e10, 1e10))  # the corpus changed since
    stale = run(cfg).records["ds"]
    assert stale.records == 100 and "corpus.jsonl changed after results/ds/chunks/manifest.json" in stale.source
    write_manifest([50, 50, 0], ["corpus.jsonl"])
    assert "has 3 chunks, this config makes 2: not used" in run(cfg).records["ds"].source
    assert run(cfg, records=5000).records["ds"].records == 5000


def test_by_source_counts_a_split_job_per_source_and_the_collector(tmp_path):
    corpus(30, "part-1.jsonl")
    corpus(10, "part-2.jsonl")
    cfg = config(tmp_path, n_chunks="auto", input={"path": "part-*.jsonl"}, chunking={"by": "source"})
    result = run(cfg)
    split = row(result, "split")
    assert (split.jobs, split.work) == (3, 40)
    assert "records per chunk in proportion to each source's file size (chunking.by source)" in split.notes
    assert row(result, "embed").jobs == 2
    assert est.chunks_by_size(40, ("part-1.jsonl", "part-2.jsonl")) == (30, 10)  # the files' sizes, 3:1 here
    assert sum(est.chunks_by_size(7, ("part-1.jsonl", "part-2.jsonl", "part-1.jsonl"))) == 7
    assert est.chunks_by_size(40, ("part-1.jsonl", "s3://b/x.jsonl")) is None


def test_a_large_input_is_sampled_and_says_so(tmp_path, monkeypatch):
    corpus(2000)
    monkeypatch.setattr(est, "SAMPLE_ABOVE", 1000)
    monkeypatch.setattr(est, "SAMPLE_BYTES", 4000)
    count = run(config(tmp_path)).records["ds"]
    assert count.source.startswith("sampled: the first") and "--records N" in count.source
    assert count.records == pytest.approx(2000, rel=0.15)


@pytest.mark.parametrize("path", ["missing.jsonl", "bad.jsonl.gz"])
def test_a_bad_corpus_path_is_an_error_naming_the_file(tmp_path, capsys, path):
    with open("bad.jsonl.gz", "wb") as fh:
        fh.write(b"\x1f\x8b not gzip at all")
    (tmp_path / "o.yaml").write_text(yaml.safe_dump({"input": {"path": path}}))
    assert main(["estimate", "--configfile", str(tmp_path / "o.yaml"), "--gpus", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("estimate: ") and path in err


@pytest.mark.parametrize("command", ["estimate", "status"])
def test_a_configfile_that_is_not_yaml_is_an_error_naming_it(tmp_path, capsys, command):
    (tmp_path / "o.yaml").write_text("dataset: [demo\n")
    assert main([command, "--configfile", str(tmp_path / "o.yaml"), "--gpus", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{command}: --configfile {tmp_path / 'o.yaml'}: not YAML: ") and "line 2" in err


# ----------------------------------------------------------------------- cost


def test_the_cost_is_priced_by_core_jobs_priced(tmp_path, monkeypatch):
    corpus()
    cfg = config(tmp_path, report={"gpu_hour_price": 3.0, "currency": "EUR"})
    embed_stats("results/ds/embed", "cuda")
    calls = []

    def spy(gpu_hours, price, records=None):
        calls.append((gpu_hours, price))
        return {"estimated_cost": 42.0, "estimated_cost_per_million_records": None}

    monkeypatch.setattr(est, "priced", spy)
    result = run(cfg)
    assert row(result, "embed").cost == 42.0 and (pytest.approx(1 / 3600), 3.0) in calls
    assert est.total_line(result).startswith("0.000278 GPU-h, 42.00 EUR, about 1 s on 1 GPU")  # two 0.5 s jobs


def test_wall_time_puts_the_longest_jobs_first_on_the_free_gpus():
    assert est.makespan([3, 2, 4, 3], 1, 2) == 6  # 4 then 2 on one GPU, 3 and 3 on the other
    assert est.makespan([10], 2, 4) == 10
    assert est.makespan([10], 2, 1) is None
    # Jobs holding different numbers of GPUs: each waits for as many as it holds.
    assert est.makespan([10, 5], [4, 1], 4) == 15
    assert est.makespan([10, 5, 5], [2, 1, 1], 4) == 10
    assert est.makespan([10, 5], [1, 8], 4) is None


def test_a_cost_under_half_a_cent_is_shown_not_rounded_to_0(tmp_path):
    """A GPU stage's cost is never printed as 0.00, the figure of a run whose every job
    is on the CPU: one under half a cent keeps two significant digits, beside its GPU-h."""
    corpus()
    cfg = config(tmp_path)  # report.gpu_hour_price 2.5: 2.5 s of one GPU (100 records at 40/s) is 0.0017
    result = run(cfg)
    assert result.cost == pytest.approx(2.5 / 3600 * 2.5)
    assert est.total_line(result).startswith("0.000694 GPU-h, 0.0017 USD, about 2 s on 1 GPU")
    embed = next(line for line in est.table(result).splitlines() if line.startswith("ds ") and " embed " in line)
    assert embed.split()[7:9] == ["0.000694", "0.0017"]  # after "40 (assumed)"
    on_cpu = run(config(tmp_path, gpu_jobs={"device": "cpu"}))
    assert est.total_line(on_cpu).startswith("0 GPU-h, 0.00 USD, every job runs on the CPU")
    assert [est.money(x) for x in (0.0, 0.0049, 0.005, 0.01, 1234.5)] == ["0.00", "0.0049", "0.01", "0.01", "1234.50"]


def test_a_total_without_an_estimate_says_so_rather_than_zero(tmp_path):
    """A GPU stage that cannot be estimated (training with a tokenizer it cannot read) is
    not a zero: where no GPU stage has an estimate, the total line says so in place of
    "0 GPU-h, 0.00 USD, about 0 s"; where some have, its figures are a lower bound."""
    corpus()
    unreadable = {"tokenizer": "missing/tokenizer.json"}
    nothing = run(config(tmp_path, tasks=["training"], shards=unreadable), gpus=2)
    assert nothing.missing() == ["train ds"]
    assert est.total_line(nothing) == "GPU-hours, cost and wall time not estimated: train ds (the notes above say why)"
    some = run(config(tmp_path, tasks=["embedding", "training"], shards=unreadable), gpus=2)
    total = est.total_line(some)
    assert total.startswith("at least 0.000694 GPU-h, 0.0017 USD, about 1 s on 2 GPUs (assumed rates: embed ds)")
    assert total.endswith("; not estimated: train ds")
    outputs_of("embed", dataset="ds", chunk=0)  # what is left leaves training out too
    assert est.total_line(run(config(tmp_path, tasks=["embedding", "training"], shards=unreadable), gpus=2)).endswith(
        "; not estimated: train ds; left (1 of 3 GPU jobs done): at least 0.000347 GPU-h, 0.00087 USD, about 1 s"
    )


def test_json_figures_not_estimated_are_null_and_a_partial_total_says_at_least(tmp_path):
    """--json says what the total line says: where no GPU stage has an estimate, its
    GPU-hours, cost and wall time are null, not 0 (a dashboard would take 0 for free);
    where some have, the figures are a lower bound, `at_least` true (and left's too)."""
    corpus()
    unreadable = {"tokenizer": "missing/tokenizer.json"}
    nothing = est.as_json(run(config(tmp_path, tasks=["training"], shards=unreadable), gpus=2))
    assert (nothing["gpu_hours"], nothing["cost"], nothing["wall_s"]) == (None, None, None)
    assert nothing["not_estimated"] == ["train ds"] and nothing["at_least"] is False
    assert (nothing["left"]["gpu_hours"], nothing["left"]["cost"], nothing["left"]["wall_s"]) == (None, None, None)
    some = est.as_json(run(config(tmp_path, tasks=["embedding", "training"], shards=unreadable), gpus=2))
    assert some["at_least"] is True and some["gpu_hours"] == pytest.approx(2.5 / 3600)
    assert some["left"]["at_least"] is True and some["left"]["gpu_hours"] == pytest.approx(2.5 / 3600)
    embedded = est.as_json(run(config(tmp_path, tasks=["embedding"]), gpus=2))
    assert embedded["at_least"] is False and embedded["left"]["at_least"] is False and embedded["cost"] > 0
    on_cpu = est.as_json(run(config(tmp_path, gpu_jobs={"device": "cpu"})))
    assert on_cpu["gpu_hours"] == 0 and on_cpu["cost"] == 0 and on_cpu["wall_s"] is None  # CPU: free, time unknown


def test_large_figures_are_printed_in_fixed_point_not_scientific_notation(tmp_path):
    """A run of 300 M records is about 2,083 GPU-h: "2083", not the "2.08e+03" of :.3g, in
    the table and on the total line a user acts on."""
    corpus()
    result = run(config(tmp_path, n_chunks=64), gpus=8, records=300_000_000)
    assert est.total_line(result).startswith("2083 GPU-h, 5208.33 USD, about 10.9 days on 8 GPUs")
    embed = next(line for line in est.table(result).splitlines() if line.startswith("ds ") and " embed " in line)
    assert embed.split()[5:9] == ["40", "(assumed)", "2083", "5208.33"]
    assert est.total_line(run(config(tmp_path), records=1)).startswith("0.00000694 GPU-h, ")  # one record at 40/s


def test_rates_print_in_fixed_point_with_thousands_grouped(tmp_path):
    """17,906 records/s printed "1.79e+04" (:.3g) in the table's rate column and in the
    notes: in fixed point, grouped as the first page groups its counts (estimate.readable)."""
    corpus()
    embed_stats("results/ds/embed", "cuda:0", items=179_060)  # 17,906 records/s
    result = run(config(tmp_path))
    embed = next(line for line in est.table(result).splitlines() if line.startswith("ds ") and " embed " in line)
    assert embed.split()[5] == "17,906"
    embed_stats("results/ds/embed", "cpu", items=179_060)
    assert any("results/ds/embed 17,906 records/s on cpu" in n for n in row(run(config(tmp_path)), "embed").notes)
    assert [est.readable(x) for x in (0.04123, 3.271, 412.3, 1_234_567.8)] == ["0.0412", "3.27", "412", "1,234,568"]


# ------------------------------------------------------------------------ CLI


def test_the_cli_prints_a_table_and_a_one_line_total_or_json(tmp_path, capsys, monkeypatch):
    corpus()
    (tmp_path / "o.yaml").write_text(yaml.safe_dump({"dataset": "ds", "input": {"path": "corpus.jsonl"}}))
    monkeypatch.setenv("SHARDFLOW_GPUS", "0,1,2")
    assert main(["estimate", "--configfile", str(tmp_path / "o.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("GPUs: 3 (as the local profile runs them at once: concurrent_gpu_jobs()")
    assert out[-1].startswith("0.000694 GPU-h, 0.0017 USD, about 1 s on 3 GPUs (assumed rates: embed ds)")
    assert any(line.split()[:3] == ["ds", "embed", "4"] for line in out)
    proc = subprocess.run(
        [sys.executable, "-m", "shardflow.cli", "estimate", "--configfile", "o.yaml", "--gpus", "2", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["gpus"] == 2 and data["records"]["ds"]["records"] == 100 and data["assumed"] == ["embed ds"]
    assert [r["stage"] for r in data["rows"]] == ["split", "embed"]
    assert data["total"].endswith("(assumed rates: embed ds)")


def test_fewer_jobs_than_gpus_says_the_gpus_idle(tmp_path):
    corpus()
    embed = row(run(config(tmp_path), gpus=8, records=10**8), "embed")
    assert embed.wall_s == pytest.approx(10**8 / 2 / 40)  # two chunks: two GPUs at work
    assert any("2 jobs for 8 GPUs: some GPUs idle" in n for n in embed.notes)


def test_a_stage_whose_job_needs_more_gpus_than_given_is_named_on_the_total_line(tmp_path, capsys):
    """train.gpus 8 on 4 GPUs cannot run: the total's wall time leaves training out and says
    so, rather than reading as the whole run's."""
    corpus()
    overlay = {"dataset": "ds", "input": {"path": "corpus.jsonl"}, "tasks": ["embedding", "training"]}
    (tmp_path / "o.yaml").write_text(yaml.safe_dump({**overlay, "train": {"gpus": 8}}))
    result = run(est.load_config([str(tmp_path / "o.yaml")]), gpus=4)
    assert row(result, "train").wall_s is None and result.no_wall() == ["train ds"]
    assert " on 4 GPUs, train ds not counted (a job holds more GPUs than the 4 given)" in est.total_line(result)
    assert main(["estimate", "--configfile", str(tmp_path / "o.yaml"), "--gpus", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["wall_not_counted"] == ["train ds"]
    fits = run(est.load_config([str(tmp_path / "o.yaml")]), gpus=8)
    assert fits.no_wall() == [] and "not counted" not in est.total_line(fits)
    outputs_of("embed", dataset="ds", chunk=0)  # what is left leaves training out too
    assert est.total_line(run(est.load_config([str(tmp_path / "o.yaml")]), gpus=4)).endswith(", train ds not counted")


def test_on_a_host_without_gpus_the_local_run_is_estimated_on_the_cpu(tmp_path, capsys, monkeypatch):
    """Under `gpu_jobs.device: auto` the local executor runs the GPU rules on the CPU of a
    host without GPUs (rules/common.smk runs_on_cpu): without --gpus the estimate is that
    run's, at the CPU's measured rate and no GPU-hours; --gpus N estimates a GPU run."""
    corpus()
    (tmp_path / "o.yaml").write_text(yaml.safe_dump({"dataset": "ds", "input": {"path": "corpus.jsonl"}}))
    embed_stats("results/ds/embed", "cpu")
    monkeypatch.delenv("SHARDFLOW_GPUS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU for the jobs
    assert main(["estimate", "--configfile", str(tmp_path / "o.yaml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    embed = next(r for r in data["rows"] if r["stage"] == "embed")
    assert embed["gpus"] == 0 and embed["gpu_hours"] == 0 and data["assumed"] == []
    assert any(est.LOCAL_CPU in note for note in data["notes"])
    assert main(["estimate", "--configfile", str(tmp_path / "o.yaml"), "--gpus", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    embed = next(r for r in data["rows"] if r["stage"] == "embed")
    assert embed["gpus"] == 1 and embed["gpu_hours"] > 0 and data["assumed"] == ["embed ds"]


def test_an_s3_glob_input_needs_no_listing_with_a_count_given_or_a_split(tmp_path, monkeypatch):
    """The estimate lists no bucket: --records, chunking.expected_records or the split's
    manifest (its recorded objects matched by the glob) give the count."""
    from shardflow.core import s3

    monkeypatch.setattr(s3, "expand", lambda *a: pytest.fail("the estimate listed the bucket"))
    glob = "s3://corpora/news/*.jsonl"
    cfg = config(tmp_path, input={"path": glob})
    with pytest.raises(est.EstimateError, match="pass --records N or set chunking.expected_records"):
        run(cfg)
    assert run(cfg, records=5000).records["ds"].records == 5000
    assert run(config(tmp_path, input={"path": glob}, chunking={"expected_records": 700})).records["ds"].records == 700
    write_manifest([70, 20], ["s3://corpora/news/a.jsonl", "s3://corpora/news/b.jsonl"])
    split = run(cfg).records["ds"]
    assert (split.records, split.per_chunk) == (90, (70, 20))
    write_manifest([70, 20], ["s3://corpora/news/a.jsonl", "s3://corpora/other/b.jsonl"])
    with pytest.raises(est.EstimateError, match="pass --records N"):
        run(cfg)


def test_split_sources_match_an_unlisted_glob_by_its_objects():
    from shardflow.workflow import plan

    a, b = "s3://c/news/a.jsonl", "s3://c/news/b.jsonl"
    assert plan.matches_sources([a, b], ["s3://c/news/*.jsonl"])
    assert plan.matches_sources(["x.jsonl", a], ["x.jsonl", "s3://c/news/*.jsonl"])
    assert not plan.matches_sources([a, "s3://c/old/b.jsonl"], ["s3://c/news/*.jsonl"])
    assert not plan.matches_sources([a, "s3://d/news/b.jsonl"], ["s3://c/news/*.jsonl"])
    assert not plan.matches_sources([a], ["s3://c/news/*.jsonl", "y.jsonl"])
    assert not plan.matches_sources(["y.jsonl"], ["x.jsonl"])


# ----------------------------------------------------------------------- left


def outputs_of(rule: str, **wildcards) -> None:
    """A finished job's outputs, at the paths its rule names (the paths status reads)."""
    from shardflow.workflow.status import rule_files

    for path in rule_files(rule).of(wildcards)[0].values():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("x")


def test_a_run_part_done_is_estimated_whole_and_what_is_left(tmp_path, capsys):
    """Estimate re-run after some jobs finished: the whole run's figures stay as they were,
    and what is left (the jobs whose outputs do not all exist) is given beside them."""
    corpus()
    (tmp_path / "o.yaml").write_text(
        yaml.safe_dump({"dataset": "ds", "n_chunks": 2, "input": {"path": "corpus.jsonl"}})
    )
    cfg = est.load_config([str(tmp_path / "o.yaml")])
    fresh = run(cfg)
    assert row(fresh, "embed").done == [False, False] and "left" not in est.total_line(fresh)
    assert "done" not in est.table(fresh).split("\n\n")[1]  # no column of what is left before any job is done
    outputs_of("embed", dataset="ds", chunk=0)
    result = run(cfg)
    embed = row(result, "embed")
    assert embed.done == [True, False] and embed.seconds == pytest.approx([1.25, 1.25])  # 50 records at 40/s
    assert embed.gpu_hours == pytest.approx(2.5 / 3600) and embed.left_gpu_hours == pytest.approx(1.25 / 3600)
    assert (embed.wall_s, embed.left_wall_s) == (pytest.approx(2.5), pytest.approx(1.25))
    total = est.total_line(result)
    assert total.startswith("0.000694 GPU-h, 0.0017 USD, about 2 s on 1 GPU (assumed rates: embed ds)")
    assert total.endswith("; left (1 of 2 GPU jobs done): 0.000347 GPU-h, 0.00087 USD, about 1 s")
    assert main(["estimate", "--configfile", str(tmp_path / "o.yaml"), "--gpus", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(line for line in out if line.startswith("data set"))
    assert head.split()[-5:] == ["wall", "disk", "done", "left", "GPU-h"]
    assert next(line for line in out if line.startswith("ds ") and " embed " in line).split()[-2:] == [
        "1/2",
        "0.000347",
    ]
    assert any(line.startswith("  left: a job whose outputs all exist is done") for line in out) and out[-1] == total
    assert main(["estimate", "--configfile", str(tmp_path / "o.yaml"), "--gpus", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_hours"] == pytest.approx(2.5 / 3600)  # the whole run, as before
    assert {k: data["left"][k] for k in ("jobs_done", "jobs", "not_checked")} == {
        "jobs_done": 1,
        "jobs": 2,
        "not_checked": [],
    }
    assert data["left"]["gpu_hours"] == pytest.approx(1.25 / 3600)
    embed_json = next(r for r in data["rows"] if r["stage"] == "embed")
    assert embed_json["jobs_done"] == 1 and embed_json["left_wall_s"] == pytest.approx(1.25)


def test_what_is_left_counts_merged_temp_vectors_and_finished_sweep_jobs_as_done(tmp_path):
    """A chunk whose .npy Snakemake deleted as temp() once merge ran is done, as status
    counts it; a sweep job is done per chunk job (its rule's own outputs), or whole once
    its metrics JSON exists."""
    corpus()
    grid = {"embedding.token_budget": [512, 1024]}
    sweep = {"stage": "embed", "grid": grid, "seeds": [0], "metrics": {"items_per_s": "max"}}
    cfg = config(tmp_path, embedding={"keep_chunk_vectors": False}, sweeps={"tb": sweep})
    for chunk in range(2):
        outputs_of("embed", dataset="ds", chunk=chunk)
        os.remove(f"results/ds/embed/embed_{chunk}.npy")
    assert row(run(cfg), "embed").done == [False, False]  # merge not run: the vectors are missing
    outputs_of("merge", dataset="ds")
    assert row(run(cfg), "embed").done == [True, True]
    (a, _), (b, _) = est.sweeps(cfg)["tb"].jobs()
    os.makedirs(f"results/sweeps/tb/{a}/seed=0")
    with open(f"results/sweeps/tb/{a}/seed=0/metrics.json", "w") as fh:  # sweep job a has ended
        fh.write("{}")
    outputs_of("sweep_embed_chunk", sweep="tb", point=b, seed=0, chunk=1)
    swept = row(run(cfg), "embed", "sweep tb")
    assert swept.done == [True, True, False, True] and swept.left_gpu_hours == pytest.approx(swept.gpu_hours / 4)


def test_a_resumed_summarise_job_measures_the_documents_it_summarised():
    """Its `seconds` are its last attempt's; the documents its parts resumed took the
    killed attempt's time: counted, they made the measured rate (estimate and status)
    five times too fast here."""
    stats = {"items": 100, "items_generated": 20, "seconds": 10.0, "device": "cuda:0"}
    run = est.Run("results/ds/summarise", [stats], [{"s": 12.0}])
    rate, overhead = est.run_rate(run)
    assert rate == pytest.approx(2.0) and overhead == pytest.approx(2.0)


def test_what_is_left_checks_the_retrieval_tasks_query_embedding_and_search(tmp_path):
    """embed_queries and retrieval_evaluate (one job each) count done once their outputs
    exist, as make status counts them: an estimate part-way through a retrieval run priced
    both as left after they had run, and said their outputs were not checked."""
    corpus()
    beir()
    cfg = config(tmp_path, retrieval={"path": "beir", "n_chunks": 1})
    fresh = run(cfg)
    assert [row(fresh, s, "beir").done for s in ("embed_queries", "retrieval_evaluate")] == [[False], [False]]
    assert fresh.not_checked() == []
    outputs_of("embed_queries", RETRIEVAL="beir")
    part = run(cfg)
    assert row(part, "embed_queries", "beir").done == [True] and row(part, "embed_queries", "beir").left_gpu_hours == 0
    assert row(part, "retrieval_evaluate", "beir").done == [False]
    outputs_of("retrieval_evaluate", RETRIEVAL="beir")
    assert row(run(cfg), "retrieval_evaluate", "beir").done == [True]
