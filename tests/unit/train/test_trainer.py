"""The trainer: schedule, sampling, outputs, checkpoints, kill-and-resume, data parallel.

The two subprocess tests share one uninterrupted reference run (1 process,
grad_accum 2, fp32 CPU, 1 thread):
- a run SIGKILLed after its first checkpoint and restarted must reproduce it bitwise;
- 2 processes under torchrun (gloo, grad_accum 1: the same global batch) must give
  the same loss curve within REL_TOL (observed: train losses bitwise equal, val
  losses within ~1e-7, which differ only in how validation windows are batched).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from shardflow.core.hashing import sha256_file
from shardflow.train.shards import write_shard
from shardflow.train.trainer import (
    CheckpointError,
    ModelDoesNotFitError,
    OrphanedJobError,
    TrainParams,
    WindowSampler,
    holding_resume,
    load_model,
    load_shards,
    lr_at,
    micro_batch_for,
    peak_bf16_tflops,
    peak_memory_over_ranks,
    resolve_runtime,
    shard_shares,
    train,
    val_windows,
)

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]
VOCAB = 40
TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, batch_size=4, warmup_iters=5,
            eval_interval=10, eval_windows=8, checkpoint_interval=10)
# The subprocess runs: long enough (100 steps) that the kill lands well before the end.
RUN = dict(TINY, grad_accum=2, max_iters=100)
REL_TOL = 1e-5  # 1 vs 2 processes, per row of losses.parquet


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def write_tiny_shards(folder: Path) -> Path:
    """Two train shards of different sizes and one val shard, llm.c layout, plus metadata.json."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    entries = []
    for i, (split, n) in enumerate([("train", 3000), ("train", 1500), ("val", 700)]):
        tokens = (np.arange(n) * 3 % 37 + rng.integers(0, 3, n)).astype(np.uint16)  # learnable, noisy
        write_shard(folder / f"shard_{i}.bin", tokens, "uint16")
        entries.append({"file": f"shard_{i}.bin", "split": split, "tokens": n, "documents": 1,
                        "sha256": sha256_file(folder / f"shard_{i}.bin")})
    meta = {"shards": entries, "vocab_size": VOCAB, "eot_id": VOCAB - 1, "dtype": "uint16"}
    (folder / "metadata.json").write_text(json.dumps(meta))
    return folder


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return write_tiny_shards(tmp_path_factory.mktemp("shards"))


def env() -> dict:
    e = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
    return e


def cli(shards: Path, out: Path, **params) -> list[str]:
    return ["-m", "shardflow.train", "--data", str(shards), "--out", str(out), "--threads", "1",
            "--params", json.dumps(params)]


def run_ok(cmd: list[str], timeout: int = 120) -> None:
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stderr[-6000:]}"


@pytest.fixture(scope="module")
def reference_run(shards, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "model"
    run_ok([sys.executable, *cli(shards, out, **RUN)])
    return out


def curve(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "losses.parquet").drop(columns="seconds")  # wall time is the one column that may differ


# ---------------------------------------------------------------- pure functions


def test_lr_schedule_warms_up_then_decays_to_min_lr():
    p = TrainParams(lr=1e-3, min_lr=1e-4, warmup_iters=10, max_iters=110)
    lrs = [lr_at(s, p) for s in range(130)]
    assert lrs[0] == pytest.approx(1e-3 / 11)
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:11], strict=True))  # linear warmup ...
    assert lrs[10] == pytest.approx(1e-3)  # ... to the peak
    assert all(a >= b for a, b in zip(lrs[10:110], lrs[11:111], strict=True))  # cosine decay ...
    assert lrs[60] == pytest.approx((1e-3 + 1e-4) / 2)  # ... through the midpoint ...
    assert lrs[110:] == [pytest.approx(1e-4)] * 20  # ... to the floor
    assert lr_at(50, TrainParams(max_iters=1000, lr_decay_iters=50, warmup_iters=0)) == pytest.approx(1e-4)


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H100 SXM5 80GB", 989.0), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.0), ("NVIDIA GH200 480GB", 989.0), ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA L40S", 362.0), ("NVIDIA L40", 181.0),
    ("NVIDIA L4", 121.0), ("NVIDIA A10", 125.0), ("NVIDIA A10G", None), ("Tesla V100-SXM2-16GB", 125.0),
    ("Tesla T4", 65.0), ("NVIDIA GeForce RTX 4090", None),
])
def test_a_gpus_peak_is_its_models_not_a_name_it_contains(name, peak):
    """MFU's reference: an L40 was measured against the L4's peak (121 of its 181 TFLOP/s)
    and an A10G against the A10's, as "L4" and "A10" are in their names. A GH200 (Grace
    Hopper: an H100-class GPU), which "H200" matched as a substring, keeps its figure."""
    assert peak_bf16_tflops(name) == peak


def test_auto_dtype_trains_in_fp32_on_a_gpu_that_only_emulates_bf16(monkeypatch):
    """A V100 or T4: torch.cuda.is_bf16_supported() counts bf16 emulated in fp32 unless
    told not to; auto trains where bf16 runs natively, else in fp32 (train.dtype's docs)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert resolve_runtime(TrainParams(device="auto", dtype="auto")).dtype == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # an A100
    assert resolve_runtime(TrainParams(device="auto", dtype="auto")).dtype == torch.bfloat16


def test_auto_dtype_continues_a_checkpoint_in_its_dtype_where_the_gpu_can_run_it(monkeypatch):
    """A job whose attempt on an A100 (bf16) was killed and retried on a V100 or T4, or a
    job that checkpointed on a V100 before auto stopped counting emulated bf16: under auto
    the checkpoint's dtype wins where the GPU runs it at all, so the resume key matches
    and the run goes on instead of every retry stopping at a CheckpointError."""
    auto = TrainParams(device="auto", dtype="auto")

    def gpu(native: bool, emulated: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True: emulated if including_emulation else native)

    gpu(native=False, emulated=True)  # a V100 or T4
    assert resolve_runtime(auto, "bfloat16").dtype == torch.bfloat16
    assert resolve_runtime(auto, "float32").dtype == torch.float32
    assert resolve_runtime(auto).dtype == torch.float32  # no checkpoint: a new run, in fp32
    assert resolve_runtime(TrainParams(device="auto", dtype="float32"), "bfloat16").dtype == torch.float32  # as set
    gpu(native=False, emulated=False)  # no bf16 at all: the key then refuses the checkpoint, naming dtype
    assert resolve_runtime(auto, "bfloat16").dtype == torch.float32
    gpu(native=True, emulated=True)  # an A100 taking over from a V100's fp32 attempt
    assert resolve_runtime(auto, "float32").dtype == torch.float32
    assert resolve_runtime(auto).dtype == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_runtime(auto, "bfloat16").dtype == torch.float32  # the CPU: another device in the key anyway


def test_train_resolves_auto_with_the_checkpoints_dtype_and_warns(shards, tmp_path, monkeypatch, caplog):
    """_train reads the checkpoint's dtype (its key, the tensors only mapped) before it
    resolves the runtime, and says when the checkpoint's dtype is not the one auto picks
    for a new run here. The runtime is faked: a CPU cannot train a GPU's bf16 checkpoint."""
    from shardflow.train import trainer

    resume = tmp_path / "resume"
    resume.mkdir()

    def checkpoint(device: str) -> None:
        torch.save({"format": trainer.CHECKPOINT_FORMAT, "version": trainer.CHECKPOINT_VERSION,
                    "key": {"device": device, "dtype": "bfloat16"}, "model": {"w": torch.zeros(4)}},
                   resume / trainer.CHECKPOINT_NAME)

    checkpoint("cuda")
    seen = []

    def runtime(p, checkpointed=None):
        seen.append(checkpointed)
        return trainer.Runtime(torch.device("cpu"), torch.bfloat16)

    monkeypatch.setattr(trainer, "resolve_runtime", runtime)
    with caplog.at_level("WARNING"), pytest.raises(CheckpointError, match="other parameters"):
        train(shards, tmp_path / "out", TrainParams(**TINY, max_iters=2), resume_dir=resume)
    assert seen == ["bfloat16"]
    assert "written in bfloat16: continued in bfloat16, not the float32" in caplog.text
    seen.clear()
    with pytest.raises(CheckpointError):  # a dtype set in the config: the checkpoint is not read for it
        train(shards, tmp_path / "out", TrainParams(**TINY, max_iters=2, dtype="float32"), resume_dir=resume)
    checkpoint("cpu")  # a CPU run's: refused on a GPU for its device, whatever the dtype
    with pytest.raises(CheckpointError):
        train(shards, tmp_path / "out", TrainParams(**TINY, max_iters=2), resume_dir=resume)
    assert seen == [None, None]


def test_params_are_checked():
    with pytest.raises(TypeError, match="learning_rate"):
        TrainParams(learning_rate=1e-3)
    with pytest.raises(ValueError, match="eval_windows"):
        TrainParams(eval_windows="some")
    with pytest.raises(ValueError, match="dtype"):
        TrainParams(dtype="float16")
    assert TrainParams(eval_windows="all").eval_windows == "all"


def test_sampler_is_proportional_in_bounds_and_resumable():
    shards = [np.arange(3000), np.arange(1000), np.arange(10)]  # the last one holds no window of 17
    sampler = WindowSampler(shards, block_size=16, seed=3)
    draws = sampler.draw(4000)
    counts = np.bincount([s for s, _ in draws], minlength=3)
    assert counts[2] == 0
    assert counts[0] / counts[1] == pytest.approx(2984 / 984, rel=0.15)
    assert all(0 <= o and o + 17 <= len(shards[s]) for s, o in draws)
    # The generator state is all a resumed run needs to draw the same windows.
    state = sampler.generator.get_state()
    ahead = sampler.draw(50)
    again = WindowSampler(shards, block_size=16, seed=999)
    again.generator.set_state(state)
    assert again.draw(50) == ahead
    assert WindowSampler(shards, 16, seed=3).draw(4000) == draws  # the seed fixes the sequence
    assert sampler.unsampled_tokens == 10  # the short shard's tokens: never drawn, counted (the trainer warns)


def test_a_split_too_short_for_one_window_is_named():
    with pytest.raises(ValueError, match=r"no train shard holds a window of block_size \+ 1 = 17 tokens \(largest: 10\)"):
        WindowSampler([np.arange(10)], block_size=16, seed=0)
    with pytest.raises(ValueError, match=r"no val shard .* \(or eval_windows: all, which reads every val token\)"):
        val_windows([np.arange(10)], block_size=16, count=5, seed=0)


def test_val_windows_all_predict_every_token_once():
    shards = [np.arange(100), np.arange(33)]
    windows = val_windows(shards, block_size=16, count="all", seed=0)
    for s, tokens in enumerate(shards):
        mine = sorted((o, n) for t, o, n in windows if t == s)
        predicted = [o + 1 + i for o, n in mine for i in range(n)]
        assert predicted == list(range(1, len(tokens)))
    fixed = val_windows(shards, block_size=16, count=5, seed=0)
    assert fixed == val_windows(shards, block_size=16, count=5, seed=0) and len(fixed) == 5
    with pytest.raises(ValueError, match=r"the val split \(1 tokens in 1 shards\) has no token to predict"):
        val_windows([np.arange(1)], block_size=16, count="all", seed=0)  # its loss was NaN, the job a success


def edited_copy(shards: Path, tmp_path: Path, shard: str, edit=None) -> Path:
    """A copy of the shard folder in which `shard`'s tokens are edited in place by `edit`
    (default: its first token one higher): its size, so its metadata entry, unchanged,
    only its bytes' hash tells."""
    import shutil

    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    tokens = np.memmap(copy / shard, dtype=np.uint16, mode="r+", offset=1024)
    if edit is None:
        tokens[0] += 1
    else:
        edit(tokens)
    tokens.flush()
    del tokens
    return copy


def test_a_shard_changed_since_it_was_written_is_named(shards, tmp_path):
    """A shard edited in place keeps its size, and Snakemake plans no rerun: its hash in
    metadata.json catches it before a step is taken on the wrong tokens."""
    copy = edited_copy(shards, tmp_path, "shard_1.bin", lambda tokens: tokens.fill(5))
    with pytest.raises(ValueError, match=r"shard_1.bin: sha256 .* metadata.json recorded .* changed since"):
        load_shards(copy)


def test_a_metadata_file_cut_short_is_named(shards, tmp_path):
    import shutil

    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    meta = copy / "metadata.json"
    meta.write_bytes(meta.read_bytes()[:40])
    with pytest.raises(ValueError, match=rf"{re.escape(str(meta))}:\d+: "):
        load_shards(copy)


@pytest.mark.parametrize("metadata, message", [
    ([1, 2], r"a JSON list, not a shard folder's metadata.json"),
    ({"files": []}, r"'vocab_size' is None, not a positive integer"),
    ({"vocab_size": VOCAB}, r"'shards' is None, not a list of shard files"),
    ({"vocab_size": VOCAB, "shards": [{"file": "shard_0.bin", "split": "test", "tokens": 3000}]},
     r"shards\[0\]: 'split' is 'test', not 'train' or 'val'"),
    ({"vocab_size": VOCAB, "shards": [{"split": "train", "tokens": 3000}]}, r"shards\[0\]: 'file' is None"),
])
def test_a_metadata_file_that_is_not_a_shard_folders_names_it_and_the_key(shards, tmp_path, metadata, message):
    """A foreign metadata.json (or one written by hand) stopped on a bare KeyError ('shards',
    'test') or TypeError, naming neither the file nor what is missing."""
    import shutil

    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    meta = copy / "metadata.json"
    meta.write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(meta))}: {message}"):
        load_shards(copy)


@pytest.mark.parametrize("change, message", [
    ({"eot_id": VOCAB}, rf"'eot_id' is {VOCAB}, not null or a token id below vocab_size {VOCAB}"),
    ({"eot_id": -1}, r"'eot_id' is -1, not null or a token id"),
    ({"eot_id": "39"}, r"'eot_id' is '39', not null or a token id"),
    ({"eot_id": True}, r"'eot_id' is True, not null or a token id"),
    ({2: "shard_0.bin"}, r"shards\[2\]: 'file' shard_0.bin is listed again \(first as shards\[0\], train\)"),
    ({1: "./shard_0.bin"}, r"shards\[1\]: 'file' ./shard_0.bin is listed again \(first as shards\[0\], train\)"),
])
def test_an_eot_id_outside_the_vocabulary_or_a_shard_listed_twice_is_refused(shards, tmp_path, change, message):
    """An eot_id of vocab_size trained a whole run, then failed writing the outputs on an
    IndexError naming neither file nor key; a shard listed under train and val trained on
    the validation data. Both are refused before the shards are read."""
    import shutil

    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    meta_path = copy / "metadata.json"
    meta = json.loads(meta_path.read_text())
    for key, value in change.items():
        if isinstance(key, int):
            meta["shards"][key]["file"] = value
        else:
            meta[key] = value
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(meta_path))}: {message}"):
        load_shards(copy)
    meta["eot_id"], meta["shards"] = None, json.loads((shards / "metadata.json").read_text())["shards"]
    meta_path.write_text(json.dumps(meta))
    assert load_shards(copy).eot_id is None  # null: no end-of-text token (shards.split: position)


def test_a_token_id_outside_the_vocabulary_is_named_before_a_step(tmp_path):
    """Shards of another tokenizer (hand-made, with the sha256 of their own bytes): an id of
    vocab_size or more loaded, and training stopped at the step whose window held it, on
    an IndexError naming no file (a device-side assert on CUDA)."""
    folder = tmp_path / "shards"
    write_tiny_shards(folder)
    meta = json.loads((folder / "metadata.json").read_text())
    tokens = np.arange(700, dtype=np.uint16) % VOCAB
    tokens[500] = VOCAB  # one past the last id
    write_shard(folder / "shard_2.bin", tokens, "uint16")
    meta["shards"][2]["sha256"] = sha256_file(folder / "shard_2.bin")
    (folder / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"shard_2.bin: token id {VOCAB} \(first out-of-range id at token 500\) "
                       rf"is outside the vocabulary of {VOCAB} ids that metadata.json gives"):
        load_shards(folder)
    assert len(load_shards(folder, verify=False).val[0]) == 700  # the ranks that do not verify leave it to rank 0


# ---------------------------------------------------------------- in-process runs


def test_train_writes_outputs_and_extends_max_iters(shards, tmp_path):
    out, resume = tmp_path / "model", tmp_path / "results/ds/.resume/train"  # as the train rule gives it
    base = dict(TINY, eval_windows="all", lr_decay_iters=8)  # a schedule that does not hang on max_iters
    params = TrainParams(**base, max_iters=6)
    metrics = train(shards, out, params, resume_dir=resume, decode=lambda ids: "|".join(map(str, ids)),
                    sample_tokens=20, keep_resume=True)
    for name in ("best.safetensors", "last.safetensors", "config.json", "losses.parquet", "metrics.json",
                 "sample.txt", "loss.png", "hf/config.json", "hf/model.safetensors"):
        assert (out / name).is_file(), name
    frame = pd.read_parquet(out / "losses.parquet")
    assert list(frame.columns) == ["step", "train_loss", "val_loss", "lr", "tokens_seen", "seconds"]
    assert frame["step"].tolist() == list(range(1, 7))
    assert frame["tokens_seen"].iloc[-1] == 6 * 4 * 16
    assert frame["val_loss"].notna().tolist() == [False] * 5 + [True]
    saved = json.loads((out / "metrics.json").read_text())
    assert json.loads(json.dumps(metrics)) == saved  # what train() returns is what it wrote
    assert metrics["steps"] == 6 and metrics["resumed_from_step"] == 0  # a fresh run
    assert metrics["train_tokens"] > 0 and metrics["unsampled_train_tokens"] == 0
    assert saved["best_val_loss"] == pytest.approx(frame["val_loss"].iloc[-1])
    assert saved["mfu"] is None and saved["tokens_per_second"] > 0 and saved["world_size"] == 1
    # On the CPU: no peak GPU memory, null (not 0), for the one rank too.
    assert (saved["peak_gpu_mem_mib"], saved["peak_gpu_mem_reserved_mib"]) == (None, None)
    assert saved["peak_gpu_mem_mib_by_rank"] == [None]
    assert math.isfinite(saved["final_val_loss"]) and saved["diverged"] is False
    assert len((out / "sample.txt").read_text().strip().split("|")) == 20
    model = load_model(out, "last")
    assert torch.equal(model.transformer.wte.weight, load_file(out / "last.safetensors")["transformer.wte.weight"])

    # Raising max_iters (and moving the compile cache) continues the same run from its last checkpoint.
    more = train(shards, out, TrainParams(**base, max_iters=8, compile_cache=str(tmp_path / "cache")),
                 resume_dir=resume, keep_resume=True, sample_tokens=5)
    assert more["resumed_from_step"] == 6 and more["steps"] == 8
    assert pd.read_parquet(out / "losses.parquet")["step"].tolist() == list(range(1, 9))

    # Other parameters: refused, naming what differs.
    with pytest.raises(CheckpointError, match=r"\(lr, weight_decay\).*lr: checkpoint 0.001 != now 0.002"):
        train(shards, out, TrainParams(**base, max_iters=8, lr=2e-3, weight_decay=0.0),
              resume_dir=resume)

    # Fewer steps than the checkpoint took: refused (continued, it published the 8-step
    # model labelled max_iters 6).
    with pytest.raises(CheckpointError, match=r"at step 8, past train.max_iters 6: .* delete the resume folder"):
        train(shards, out, TrainParams(**base, max_iters=6), resume_dir=resume)

    # Finished without keep_resume: the resume folder goes, so a rerun starts afresh, and
    # with it the data set's .resume it left empty (core.parts.remove_folder).
    train(shards, out, TrainParams(**base, max_iters=8), resume_dir=resume, sample_tokens=5)
    assert not resume.parent.exists() and (tmp_path / "results/ds").is_dir()


def test_a_position_split_samples_from_a_trained_token_and_exports_no_bos(shards, tmp_path, monkeypatch):
    """shards.split: position (nanoGPT's Shakespeare) adds no end-of-text between
    documents: the sample started from EOT, whose embedding never trained, and hf/ named
    EOT the bos. It starts from the first train token; hf/ has no bos. Shards of
    documents each ending in EOT (here, metadata without a split: made by hand) keep EOT."""
    from shardflow.train.model import GPT
    from shardflow.train.prepare import TextFileParams, prepare_text_file
    from shardflow.train.tokenizer import CharTokenizer
    from shardflow.train.trainer import sample_start_id

    text = "".join(np.random.default_rng(0).choice(list("ab cd\nefg"), size=2000)) + "\n"
    tok = CharTokenizer.train([text])
    folder = tmp_path / "position"
    prepare_text_file(_write(tmp_path / "input.txt", text), tok, folder, TextFileParams(val_fraction=0.1))
    position = load_shards(folder)
    start = sample_start_id(position)
    assert start != tok.eot_id and start == tok.encode(text[0])[0]
    assert any(bool((s == start).any()) for s in position.train)
    assert sample_start_id(load_shards(shards)) == VOCAB - 1  # the fixture's eot_id

    starts = []
    generate = GPT.generate
    monkeypatch.setattr(GPT, "generate", lambda self, idx, *a, **k: starts.append(idx.tolist()) or generate(self, idx, *a, **k))
    out = tmp_path / "model"
    train(folder, out, TrainParams(**TINY, max_iters=2), resume_dir=tmp_path / "resume", tokenizer=tok,
          sample_tokens=5)
    assert starts == [[[start]]]
    hf = json.loads((out / "hf" / "config.json").read_text())
    assert hf["bos_token_id"] is None and hf["eos_token_id"] == tok.eot_id
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(out / "hf", local_files_only=True)  # as the model's config says
    assert auto.bos_token_id is None and auto.eos_token_id == tok.eot_id


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_runs_of_neighbouring_seeds_draw_no_common_dropout_masks(shards, tmp_path, monkeypatch):
    """The seeds the trainer gives torch per step: a sweep over seeds 0 and 1 drew the same
    dropout masks one step apart while they were seed + c * (rank + 1) + step."""
    seeds = []
    monkeypatch.setattr(torch, "manual_seed", lambda seed: seeds.append(seed) or torch.random.default_generator)
    drawn = {}
    for seed in (0, 1):
        seeds.clear()
        train(shards, tmp_path / f"seed{seed}", TrainParams(**TINY, dropout=0.1, seed=seed, max_iters=4),
              resume_dir=tmp_path / f"seed{seed}.resume", sample_tokens=0)
        drawn[seed] = set(seeds) - {seed}  # the initial weights' seed is the run's own
    assert len(drawn[0]) == len(drawn[1]) == 4  # one per step
    assert not drawn[0] & drawn[1]


def test_one_process_of_a_two_gpu_config_trains_the_two_processes_global_batch(shards, tmp_path):
    """A CPU job of a config with train.gpus 2 runs one process: it trains the micro-batches
    of both ranks in turn, the windows of one process with twice the grad_accum (the same
    computation, bitwise here), not half the global batch."""
    from shardflow.train.__main__ import main

    base = dict(TINY, max_iters=6, eval_windows="all")
    one = train(shards, tmp_path / "one", TrainParams(**base, grad_accum=2), sample_tokens=0)
    two = main(["--data", str(shards), "--out", str(tmp_path / "two"), "--sample-tokens", "0",
                "--params", json.dumps({**base, "gpus": 2, "grad_accum": 1})])
    assert two["tokens_per_step"] == one["tokens_per_step"] == 4 * 16 * 2
    assert (two["grad_accum"], two["config_grad_accum"], two["world_size"]) == (2, 1, 1)
    pd.testing.assert_frame_equal(curve(tmp_path / "two"), curve(tmp_path / "one"), check_exact=True)
    ours, ref = load_file(tmp_path / "two" / "last.safetensors"), load_file(tmp_path / "one" / "last.safetensors")
    assert all(torch.equal(ours[k], ref[k]) for k in ref)


def test_peak_gpu_memory_is_the_largest_ranks_with_every_ranks(monkeypatch):
    """Under torchrun each rank reads its own GPU's peak; metrics.json holds the largest
    over the ranks and each rank's. No GPU (nor second process) here: rank 1 of two,
    its peak faked, and rank 0's row added as the all-reduce would add it."""
    from shardflow.train import trainer

    class TwoRanks(trainer.Runtime):
        def all_reduce_(self, t, op=None):
            t[0] += torch.tensor([900.0, 1100.0], dtype=t.dtype)  # rank 0's peaks
            return t

    asked = []
    monkeypatch.setattr(trainer, "peak_memory", lambda device: asked.append(device)
                        or {"peak_gpu_mem_mib": 700.0, "peak_gpu_mem_reserved_mib": 1200.0})
    rt = TwoRanks(torch.device("cpu"), torch.float32, rank=1, world=2)
    assert peak_memory_over_ranks(rt) == {"peak_gpu_mem_mib": 900.0, "peak_gpu_mem_reserved_mib": 1200.0,
                                          "peak_gpu_mem_mib_by_rank": [900.0, 700.0]}
    assert asked == [rt.device]  # the rank's own device (cuda:LOCAL_RANK under torchrun)
    monkeypatch.undo()
    assert peak_memory_over_ranks(rt)["peak_gpu_mem_mib_by_rank"] == [None, None]  # on the CPU: no collective


def test_a_job_whose_snakemake_is_gone_keeps_its_checkpoint_and_writes_no_outputs(shards, tmp_path, monkeypatch):
    """An orphan (its controller SIGKILLed) must not publish outputs that no Snakemake
    records: it stops at its next checkpoint, and the rerun resumes from it."""
    import subprocess

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs; a start time no process has
    monkeypatch.setenv("SHARDFLOW_CONTROLLER", f"{gone.pid}:1")
    out, resume = tmp_path / "model", tmp_path / "resume"
    params = TrainParams(**dict(TINY, max_iters=20))
    with pytest.raises(OrphanedJobError, match=rf"pid {gone.pid}\) is gone, found at a checkpoint: .* step 10 kept"):
        train(shards, out, params, resume_dir=resume)
    assert (resume / "checkpoint.pt").is_file() and not (out / "metrics.json").exists()
    from shardflow.core import controller

    alive = controller.Controller(os.getpid(), controller._stat(os.getpid())[1])  # a controller that is there
    monkeypatch.setenv("SHARDFLOW_CONTROLLER", alive.to_env())
    metrics = train(shards, out, params, resume_dir=resume)
    assert metrics["resumed_from_step"] == 10 and (out / "metrics.json").is_file()


def test_the_published_best_weights_are_the_checkpoints_best_not_a_lost_attempts(shards, tmp_path):
    """Best weights are kept per step: one found after the last checkpoint by an attempt
    that was then killed (its file outlives it) is not what the resumed run publishes,
    nor are a pre-upgrade folder's best.safetensors and the recorded best_step apart."""
    out, resume = tmp_path / "model", tmp_path / "resume"
    base = dict(TINY, eval_interval=5, checkpoint_interval=10, lr_decay_iters=20)
    train(shards, out, TrainParams(**base, max_iters=10), resume_dir=resume, keep_resume=True)
    kept = sorted(p.name for p in resume.glob("best*.safetensors"))
    best_step = json.loads((out / "metrics.json").read_text())["best_step"]
    assert kept == [f"best-{best_step}.safetensors"]  # older bests removed at the checkpoint
    lost = resume / "best-15.safetensors"  # a later attempt's best, never checkpointed
    lost.write_bytes(b"not these weights")
    metrics = train(shards, out, TrainParams(**base, max_iters=12), resume_dir=resume, keep_resume=True)
    assert not lost.exists() and metrics["resumed_from_step"] == 10
    (published,) = resume.glob("best-*.safetensors")
    assert published.name == f"best-{metrics['best_step']}.safetensors"
    assert (out / "best.safetensors").read_bytes() == published.read_bytes()


def test_a_tokenizer_other_than_the_shards_is_refused_before_a_step(shards, tmp_path):
    """The tokenizer decodes the sample and goes into hf/ beside the weights. Another one
    (passed by hand, or a tokenizer folder made again) decoded the sample into other
    text, or failed on an id it lacks after the last step, and hf/ got a tokenizer whose
    ids are not the model's; metadata.json records the shards' tokenizer."""
    import shutil

    from shardflow.train.tokenizer import CharTokenizer

    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    theirs = CharTokenizer(chr(65 + i) for i in range(VOCAB - 1))  # VOCAB ids, end-of-text last
    meta = json.loads((copy / "metadata.json").read_text())
    (copy / "metadata.json").write_text(json.dumps({**meta, "tokenizer": theirs.identity()}))
    other = CharTokenizer(chr(97 + i) for i in range(VOCAB - 1))  # as many ids, other characters
    params = TrainParams(**TINY, max_iters=2)
    with pytest.raises(ValueError, match=r"not the one the shards of .*metadata.json were made with \(sha256: "):
        train(copy, tmp_path / "other", params, resume_dir=tmp_path / "other.resume", tokenizer=other)
    assert not (tmp_path / "other.resume" / "checkpoint.pt").exists()  # refused before a step
    train(copy, tmp_path / "theirs", params, tokenizer=theirs, sample_tokens=5)
    assert (tmp_path / "theirs" / "hf" / "tokenizer.json").is_file()


def test_a_diverged_run_writes_its_outputs_without_a_sample(shards, tmp_path):
    """A sweep point with a learning rate far too high diverges: its metrics and losses are
    written (for the sweep's table to show), and sampling text from weights that are not
    finite no longer fails the job (and with it the whole sweep). metrics.json is strict
    JSON: its losses that are not finite are null (it held NaN and Infinity, which jq and
    JavaScript refuse), and `diverged` says so."""
    out = tmp_path / "model"
    params = TrainParams(**dict(TINY, max_iters=6, eval_interval=3, lr=1e30, grad_clip=0.0, warmup_iters=0))
    metrics = train(shards, out, params, resume_dir=tmp_path / "resume", sample_tokens=10)
    assert metrics["final_val_loss"] is None and metrics["diverged"] is True
    assert not pd.read_parquet(out / "losses.parquet")["train_loss"].map(math.isfinite).all()  # kept as it was

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    assert json.loads((out / "metrics.json").read_text(), parse_constant=refuse) == metrics
    assert (out / "sample.txt").read_text().startswith("(no sample: the weights are not finite")
    assert (out / "hf" / "model.safetensors").is_file()


def test_metrics_record_what_the_run_ran_with(shards, tmp_path):
    """The embed and summarise jobs record `made_with` (core.madewith), which provenance
    collects; the train job recorded nothing, so a training run's GPU, torch and CUDA
    were unrecorded (provenance's own `accelerator` is its CPU host's). metrics.json, which
    provenance hashes and reads, holds it now."""
    params = TrainParams(**dict(TINY, n_layer=1, n_embd=16, eval_windows=1, max_iters=1))
    metrics = train(shards, tmp_path / "model", params, resume_dir=tmp_path / "resume", sample_tokens=1)
    made = json.loads((tmp_path / "model" / "metrics.json").read_text())["made_with"]
    assert made == metrics["made_with"]
    assert (made["role"], made["model"], made["device"], made["gpu"], made["threads"]) == ("train", None, "cpu", None, 1)
    assert made["packages"]["torch"] == torch.__version__ and "commit" in made["git"]


def test_a_second_process_on_the_same_checkpoints_stops_naming_the_first(shards, tmp_path):
    """An earlier run's train job still running (its Snakemake killed alone) holds the
    resume folder: a rerun's trainer stops at once, naming it, rather than training into
    the same files beside it; once the holder is gone, training runs."""
    import subprocess
    import sys

    resume = tmp_path / "resume"
    resume.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys, time; from shardflow.core import locks; "
                                 "assert locks.try_lock(sys.argv[1], job='train earlier') is not None; "
                                 "print('held', flush=True); time.sleep(60)"), str(resume / "train.lock")],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeError, match=rf"another training process is using {resume} .*train earlier"):
            train(shards, tmp_path / "model", TrainParams(**TINY, max_iters=2), resume_dir=resume)
        assert not (tmp_path / "model").exists() and list(resume.iterdir()) == [resume / "train.lock"]
    finally:
        holder.kill()
        holder.wait()
    metrics = train(shards, tmp_path / "model", TrainParams(**TINY, max_iters=2), resume_dir=resume, sample_tokens=2)
    assert metrics["steps"] == 2 and not resume.exists()


def test_the_resume_folder_is_made_though_another_job_removes_its_emptied_parent(tmp_path, monkeypatch):
    """An embed job of the data set removing results/<ds>/.resume, left empty by its
    parts, between the trainer's mkdir of .resume and of .resume/train: the trainer
    makes .resume again and holds its folder (core.parts.make_folder)."""
    resume = tmp_path / "results/ds/.resume/train"
    real_mkdir, raced = os.mkdir, []

    def mkdir(path, *args, **kwargs):
        if Path(path) == resume and resume.parent.is_dir() and not raced:  # the embed job's rmdir lands here
            raced.append(path)
            os.rmdir(resume.parent)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.delenv("RANK", raising=False)
    with holding_resume(resume):
        assert raced and (resume / "train.lock").is_file()


def test_unreadable_or_foreign_checkpoint_is_refused(shards, tmp_path):
    params = TrainParams(**TINY, max_iters=2)
    resume = tmp_path / "resume"
    train(shards, tmp_path / "a", params, resume_dir=resume, keep_resume=True, sample_tokens=2)
    checkpoint = resume / "checkpoint.pt"
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cannot read checkpoint .*delete it"):
        train(shards, tmp_path / "b", params, resume_dir=resume)
    torch.save({"model": {}, "step": 3}, checkpoint)
    with pytest.raises(CheckpointError, match="not a shardflow training checkpoint"):
        train(shards, tmp_path / "b", params, resume_dir=resume)


def test_a_refused_checkpoint_is_an_error_a_retry_repeats_but_a_failed_read_is_retried(shards, tmp_path, monkeypatch):
    """Each refusal fails every retry the same way (the same file under the same params):
    core.failures must count it deterministic, so the train launcher records it and the
    retry stops before queueing for GPUs again. torch reports a truncated file as a
    RuntimeError, a transient cause there, so the refusal must not be chained to it. An
    OSError while reading stays an OSError: a retry may read the file."""
    from shardflow.core.failures import deterministic

    base = dict(TINY, lr_decay_iters=100)  # a schedule that does not follow max_iters
    params = TrainParams(**base, max_iters=2)
    resume = tmp_path / "resume"
    train(shards, tmp_path / "a", params, resume_dir=resume, keep_resume=True, sample_tokens=2)
    checkpoint = resume / "checkpoint.pt"
    good = checkpoint.read_bytes()

    def refusal(run_params=params) -> BaseException:
        with pytest.raises(CheckpointError) as refused:
            train(shards, tmp_path / "b", run_params, resume_dir=resume)
        return refused.value

    other = refusal(TrainParams(**base, max_iters=2, lr=2e-3))
    assert "other parameters (lr)" in str(other) and deterministic(other)
    past = refusal(TrainParams(**base, max_iters=1))
    assert "past train.max_iters 1" in str(past) and deterministic(past)
    checkpoint.write_bytes(good[: len(good) // 2])
    truncated = refusal()
    assert "cannot read checkpoint" in str(truncated) and "RuntimeError" in str(truncated)
    assert deterministic(truncated)
    checkpoint.write_bytes(b"")
    assert deterministic(refusal())
    torch.save({"format": "shardflow.train.checkpoint", "version": 99}, checkpoint)
    newer = refusal()
    assert "checkpoint version 99" in str(newer) and deterministic(newer)

    def unreadable(*args, **kwargs):
        raise OSError(5, "Input/output error")

    checkpoint.write_bytes(good)
    monkeypatch.setattr(torch, "load", unreadable)
    with pytest.raises(OSError, match="Input/output error") as failed:
        train(shards, tmp_path / "b", params, resume_dir=resume)
    assert not deterministic(failed.value)


# ---------------------------------------------------------------- out of memory: a smaller micro-batch


def fits_in(limit: dict, monkeypatch) -> None:
    """GPT.forward runs out of memory on more than limit["windows"] windows at once, from
    the limit["after"]-th training forward pass on (from the start without it)."""
    from shardflow.train.model import GPT

    real = GPT.forward

    def forward(self, idx, *args, **kwargs):
        if self.training and limit.get("after", 0) > 0:
            limit["after"] -= 1
        if limit.get("after", 0) == 0 and idx.size(0) > limit["windows"]:
            raise torch.OutOfMemoryError(f"CUDA out of memory (a batch of {idx.size(0)} windows)")
        return real(self, idx, *args, **kwargs)

    monkeypatch.setattr(GPT, "forward", forward)


def test_out_of_memory_resumes_with_half_the_micro_batch_and_the_same_steps(shards, tmp_path, monkeypatch):
    """An attempt that runs out of memory at step 5 says which micro-batch did not fit; the
    next, told so, resumes from the step-4 checkpoint with micro-batch 2 x grad_accum 2
    instead of 4 x 1: the same windows per step, so the loss curve of an undisturbed run
    (within float rounding: sums in another order). A checkpoint of another configured
    batch is still refused."""
    from shardflow.core.failures import out_of_memory_details

    base = dict(TINY, max_iters=8, eval_interval=4, checkpoint_interval=4)
    reference = tmp_path / "reference"
    train(shards, reference, TrainParams(**base), resume_dir=tmp_path / "ref.resume", sample_tokens=2)

    out, resume = tmp_path / "model", tmp_path / "resume"
    fits_in({"windows": 2, "after": 5}, monkeypatch)  # steps 1-4 fit, step 5 does not
    with pytest.raises(torch.OutOfMemoryError) as failed:
        train(shards, out, TrainParams(**base), resume_dir=resume)
    details = out_of_memory_details(failed.value)
    assert {k: details[k] for k in ("micro_batch", "next_micro_batch", "next_grad_accum", "device")} == {
        "micro_batch": 4, "next_micro_batch": 2, "next_grad_accum": 2, "device": "cpu"}
    assert torch.load(resume / "checkpoint.pt", weights_only=True)["step"] == 4

    metrics = train(shards, out, TrainParams(**base), resume_dir=resume, out_of_memory=details, sample_tokens=2,
                    keep_resume=True)
    assert metrics["resumed_from_step"] == 4
    assert [metrics[k] for k in ("micro_batch", "grad_accum", "config_micro_batch", "config_grad_accum")] == [2, 2, 4, 1]
    assert metrics["tokens_per_step"] == json.loads((reference / "metrics.json").read_text())["tokens_per_step"]
    ours, ref = curve(out), curve(reference)
    pd.testing.assert_series_equal(ours["tokens_seen"], ref["tokens_seen"])
    for column in ("train_loss", "val_loss"):
        np.testing.assert_allclose(ours[column], ref[column], rtol=1e-5, err_msg=column)

    with pytest.raises(CheckpointError, match=r"\(batch_size, grad_accum\)"):  # configured otherwise: another run
        train(shards, out, TrainParams(**dict(base, batch_size=2, grad_accum=2)), resume_dir=resume)


def test_out_of_memory_at_micro_batch_1_says_the_model_does_not_fit(shards, tmp_path, monkeypatch):
    from shardflow.core.failures import out_of_memory_details

    params = TrainParams(**dict(TINY, batch_size=2, max_iters=1))
    fits_in({"windows": 0}, monkeypatch)
    with pytest.raises(torch.OutOfMemoryError) as failed:
        train(shards, tmp_path / "a", params, resume_dir=tmp_path / "r")
    with pytest.raises(ModelDoesNotFitError, match=r"does not fit in the memory of cpu even at micro-batch 1 "
                       r"\(train.batch_size 2 x grad_accum 1 run as 2 micro-steps") as again:
        train(shards, tmp_path / "a", params, resume_dir=tmp_path / "r", out_of_memory=out_of_memory_details(failed.value))
    assert out_of_memory_details(again.value)["next_micro_batch"] is None  # recorded: micro-batch 1 again


def test_an_out_of_memory_record_of_another_gpu_or_model_keeps_the_configured_micro_batch():
    p = TrainParams(batch_size=12)
    t4 = {"micro_batch": 12, "device": "Tesla T4", "settings": "s"}
    assert micro_batch_for(p, t4, "Tesla T4", "s") == (6, t4)
    assert micro_batch_for(p, dict(t4, micro_batch=6), "Tesla T4", "s")[0] == 3
    assert micro_batch_for(p, dict(t4, micro_batch=1), "Tesla T4", "s")[0] == 1  # 1 again: a shared GPU may free up
    assert micro_batch_for(p, t4, "NVIDIA A100-SXM4-80GB", "s") == (12, None)
    assert micro_batch_for(p, t4, "Tesla T4", "another model") == (12, None)
    assert micro_batch_for(p, None, "Tesla T4", "s") == (12, None)
    # A batch_size lowered below the micro-batch that did not fit is tried as configured:
    # the record says nothing of it (it would have been cut to 6).
    assert micro_batch_for(p, dict(t4, micro_batch=16), "Tesla T4", "s") == (12, None)
    assert micro_batch_for(TrainParams(batch_size=24), dict(t4, micro_batch=16), "Tesla T4", "s") == (8, t4 | {"micro_batch": 16})


# ---------------------------------------------------------------- real processes


def test_sigkilled_run_resumes_bitwise(shards, reference_run, tmp_path):
    out = tmp_path / "model"
    checkpoint = tmp_path / "model.resume" / "checkpoint.pt"  # the default resume folder
    proc = subprocess.Popen([sys.executable, *cli(shards, out, **RUN)], cwd=REPO, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not checkpoint.exists():
            assert proc.poll() is None, "training exited before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 90 s"
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = torch.load(checkpoint, weights_only=True)["step"]
    assert 10 <= killed_at < RUN["max_iters"]
    assert not (out / "metrics.json").exists()

    run_ok([sys.executable, *cli(shards, out, **RUN)])  # what Snakemake's restart does
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == killed_at
    pd.testing.assert_frame_equal(curve(out), curve(reference_run), check_exact=True)
    for name in ("last.safetensors", "best.safetensors"):
        ours, ref = load_file(out / name), load_file(reference_run / name)
        assert ours.keys() == ref.keys()
        assert all(torch.equal(ours[k], ref[k]) for k in ref), name
    assert (out / "sample.txt").read_text() == (reference_run / "sample.txt").read_text()


def wait_for_line(log: Path, pattern: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    """Until `log` holds a line matching `pattern` (the run's own progress, not a guess at its speed)."""
    deadline = time.monotonic() + seconds
    while not (log.exists() and re.search(pattern, log.read_text(), re.MULTILINE)):
        assert proc.poll() is None, f"training exited ({proc.returncode}) before {pattern!r} in its log"
        assert time.monotonic() < deadline, f"no {pattern!r} in {log} within {seconds} s"
        time.sleep(0.002)


def stop_lines(text: str) -> list[tuple[str, int, str]]:
    """(signal, step, checkpoint) of each line where a rank says it stops on a signal."""
    return [(m[1], int(m[2]), m[3]) for m in re.finditer(r"stopping on (SIG\w+) after step (\d+): checkpoint (\S+)", text)]


def test_a_sigtermed_run_saves_the_step_it_reached_and_resumes_to_the_same_run(shards, reference_run, tmp_path):
    """SIGTERM (scancel, a preemption, a deleted pod) saved nothing since the last
    checkpoint_interval (up to 250 steps of paid GPU time): the run now checkpoints the
    step it reached, then dies by SIGTERM as before (a retried failure, not a recorded
    one), and the retry continues to the uninterrupted run's numbers bit for bit."""
    out, log = tmp_path / "model", tmp_path / "train.log"
    checkpoint = tmp_path / "model.resume" / "checkpoint.pt"
    params = dict(RUN, checkpoint_interval=1000)  # no interval checkpoint before the last step: any is the signal's
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen([sys.executable, *cli(shards, out, **params), "--log", str(log)], cwd=REPO, env=env(),
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for_line(log, r"step 10: train", proc)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGTERM, (tmp_path / "stderr").read_text()[-3000:]
    stopped_at = torch.load(checkpoint, weights_only=True)["step"]
    assert 10 <= stopped_at < RUN["max_iters"]
    assert stop_lines(log.read_text()) == [("SIGTERM", stopped_at, str(checkpoint))]
    said = f"SIGTERM: finishing step {stopped_at} and saving its checkpoint, then ending (a second signal is ignored"
    assert said in (tmp_path / "stderr").read_text()  # when the signal came, naming the step it stopped after
    assert not (out / "metrics.json").exists()

    run_ok([sys.executable, *cli(shards, out, **params)])  # the retry
    assert json.loads((out / "metrics.json").read_text())["resumed_from_step"] == stopped_at
    pd.testing.assert_frame_equal(curve(out), curve(reference_run), check_exact=True)
    ours, ref = load_file(out / "last.safetensors"), load_file(reference_run / "last.safetensors")
    assert ours.keys() == ref.keys() and all(torch.equal(ours[k], ref[k]) for k in ref)


def ranks_of(torchrun_pid: int) -> dict[int, int]:
    """torchrun's worker processes by their RANK (Linux /proc)."""
    found = {}
    for pid in Path(f"/proc/{torchrun_pid}/task/{torchrun_pid}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError):
            environ = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
            found[int(environ["RANK"])] = int(pid)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the ranks in /proc")
def test_one_ranks_sigterm_stops_every_rank_at_one_step_with_one_checkpoint(shards, tmp_path):
    """Under torchrun a signal may reach one rank alone; the ranks agree at the next step
    boundary, rank 0 (which got none) writes the one checkpoint, and both end at that step."""
    out, log = tmp_path / "model", tmp_path / "stderr"  # both ranks' (torchrun takes --log for its --log-dir)
    checkpoint = tmp_path / "model.resume" / "checkpoint.pt"
    params = dict(RUN, grad_accum=1, checkpoint_interval=1000)
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", *cli(shards, out, **params)]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    ranks: dict[int, int] = {}
    try:
        wait_for_line(log, r"step 10: train", proc)
        ranks.update(ranks_of(proc.pid))
        os.kill(ranks[1], signal.SIGTERM)
        proc.wait(timeout=60)
        ranks.clear()  # reaped by torchrun: their pids may be another process's now
    finally:
        for pid in (proc.pid, *ranks.values()):  # the ranks run in sessions of their own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode != 0
    stopped_at = torch.load(checkpoint, weights_only=True)["step"]
    assert 10 <= stopped_at < RUN["max_iters"]
    said = log.read_text()
    assert stop_lines(said) == [("SIGTERM", stopped_at, str(checkpoint))] * 2, said[-3000:]
    assert not (out / "metrics.json").exists()


@pytest.mark.parametrize("rank_0", ["dies", "hangs"])
def test_a_rank_at_the_stop_waits_a_bounded_time_for_a_rank_that_never_comes(tmp_path, rank_0):
    """A rank told to stop waits there for the others while rank 0 writes the checkpoint.
    It no longer dies with torchrun (controller.unbind_from_launcher), so nothing else
    ended that wait: a rank that hangs kept it for the gloo group's timeout (30 min), and
    one that died raised gloo's error, so the rank ended by that and not by its signal.
    Now the wait is bounded and says why it ended. Two gloo processes, rank 1 waiting."""
    script = (
        "import datetime, os, sys, time\n"
        "import torch.distributed as dist\n"
        "from shardflow.train.trainer import wait_at_stop\n"
        "rank = int(sys.argv[1])\n"
        f"dist.init_process_group('gloo', init_method={(tmp_path / 'store').as_uri()!r}, rank=rank, world_size=2)\n"
        "group = dist.new_group(backend='gloo')\n"
        "if rank == 0:\n"
        f"    os._exit(0) if {rank_0 == 'dies'} else time.sleep(120)\n"
        "print(wait_at_stop(group, datetime.timedelta(seconds=1)))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r)], cwd=REPO, env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        out, err = procs[1].communicate(timeout=60)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert procs[1].returncode == 0, err[-3000:]
    said = {"dies": "by peer", "hangs": "Timed out waiting 1000ms"}[rank_0]  # gloo: closed or reset by peer
    assert said in out, out + err[-3000:]


def test_two_processes_match_one_with_the_same_global_batch(shards, reference_run, tmp_path):
    out = tmp_path / "model"
    params = dict(RUN, grad_accum=RUN["grad_accum"] // 2)  # x 2 processes: the same 8 windows a step
    run_ok([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", *cli(shards, out, **params)],
           timeout=180)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["tokens_per_step"] == 4 * 16 * 1 * 2  # batch x block x grad_accum x world
    ours, ref = curve(out), curve(reference_run)
    assert ours["step"].tolist() == ref["step"].tolist()
    pd.testing.assert_series_equal(ours["tokens_seen"], ref["tokens_seen"])
    for column in ("train_loss", "val_loss", "lr"):
        np.testing.assert_allclose(ours[column], ref[column], rtol=REL_TOL, atol=0, err_msg=column)


def test_the_ranks_share_the_shard_check_largest_first():
    """Each shard is checked by one rank, the ranks' token counts as even as largest-first
    onto the least loaded makes them; one process checks them all."""
    assert shard_shares([3000, 1500, 700], 1) == [[0, 1, 2]]
    assert shard_shares([3000, 1500, 700], 2) == [[0], [1, 2]]
    assert shard_shares([5, 100, 100, 5, 90], 3) == [[1], [2], [0, 3, 4]]
    assert shard_shares([7], 2) == [[0], []]


def test_a_rank_checks_only_its_share_of_the_shards(shards, tmp_path):
    """Under torchrun the check of every shard's bytes is shared: rank 0 alone read them all
    while the other ranks waited in DDP's first collective, past the group's timeout
    for hundreds of GB."""
    copy = edited_copy(shards, tmp_path, "shard_1.bin")
    assert len(load_shards(copy, share=(0, 2)).train) == 2  # shard_0: intact
    with pytest.raises(ValueError, match=r"shard_1.bin: sha256 .* changed since"):
        load_shards(copy, share=(1, 2))  # shards 1 and 2


def test_a_shard_one_rank_finds_bad_stops_every_rank_with_its_error(shards, tmp_path):
    """Two processes under torchrun (gloo), a shard in rank 1's share changed: each rank
    reports the error naming it, outside any collective (core.failures records it and
    stops the retries), where rank 1 was left to fail in DDP's first collective."""
    from shardflow.core.failures import RANK_REPORTS_ENV, rank_failure, rank_reports

    copy = edited_copy(shards, tmp_path, "shard_2.bin")
    reports = tmp_path / "reports"
    reports.mkdir()
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2",
           *cli(copy, tmp_path / "model", **dict(TINY, max_iters=2))]
    proc = subprocess.run(cmd, cwd=REPO, env={**env(), RANK_REPORTS_ENV: str(reports)}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    found = rank_reports(reports)
    assert [(r.get("rank"), r.get("error"), r.get("collective")) for r in found] == [
        ("0", "ValueError", False), ("1", "ValueError", False)], found
    assert all("shard_2.bin: sha256" in r["message"] for r in found)
    assert rank_failure(found) is not None


def test_every_train_param_parses_from_its_flag():
    """Each TrainParams field is a flag; optional ones take none/null."""
    from shardflow.train.__main__ import parse_args

    args = parse_args(["--data", "d", "--out", "o", "--compile-cache", "/tmp/cc", "--lr-decay-iters", "none",
                       "--batch-size", "3", "--compile", "true", "--eval-windows", "all"])
    assert (args.compile_cache, args.lr_decay_iters, args.batch_size, args.compile, args.eval_windows) == (
        "/tmp/cc", None, 3, True, "all")
    assert parse_args(["--data", "d", "--out", "o", "--compile-cache", "null"]).compile_cache is None
    assert parse_args(["--data", "d", "--out", "o", "--lr-decay-iters", "40"]).lr_decay_iters == 40


def test_int_flags_take_a_whole_float_and_refuse_a_fraction_naming_the_flag(capsys):
    """The train rule passes train.checkpoint_interval and train.sample_tokens as the
    config gives them, and JSON Schema's "integer" takes 10.0: the flags read it as 10.
    10.5 is argparse's usual error, naming the flag."""
    from shardflow.train.__main__ import parse_args

    args = parse_args(["--data", "d", "--out", "o", "--checkpoint-interval", "10.0", "--sample-tokens", "5e2",
                       "--threads", "2.0", "--lr-decay-iters", "40.0", "--eval-windows", "8.0"])
    assert (args.checkpoint_interval, args.sample_tokens, args.threads, args.lr_decay_iters, args.eval_windows) == (
        10, 500, 2, 40, 8)
    assert all(type(v) is int for v in (args.checkpoint_interval, args.sample_tokens, args.lr_decay_iters))
    for flag in ("--checkpoint-interval", "--sample-tokens", "--threads"):
        with pytest.raises(SystemExit):
            parse_args(["--data", "d", "--out", "o", flag, "10.5"])
        assert f"argument {flag}: expected an integer, got '10.5'" in capsys.readouterr().err


def test_the_loss_figure_is_closed_when_saving_it_fails(tmp_path, monkeypatch):
    """pyplot keeps a figure until it is closed: a failed save left one open per call in
    a long process."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from shardflow.train.trainer import plot_losses

    frame = pd.DataFrame({"step": [0, 1, 2], "train_loss": [3.0, 2.5, 2.0], "val_loss": [3.1, None, 2.2]})
    plt.close("all")

    def fail(self, *args, **kwargs):
        raise RuntimeError("renderer died")

    monkeypatch.setattr(Figure, "savefig", fail)
    with pytest.raises(RuntimeError, match="renderer died"):
        plot_losses(frame, tmp_path / "loss.png")
    assert plt.get_fignums() == [] and not (tmp_path / "loss.png").exists()
