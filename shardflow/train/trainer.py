"""Train the GPT of `model.py` from token shards; resumable, data-parallel, reproducible.

    params = TrainParams(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12)
    metrics = train("results/x/shards", "results/x/train/model", params, logger, tokenizer=tok)

Data. Shards are memory-mapped; a training window is `block_size + 1` consecutive
tokens at a random offset of a random train shard (shards drawn in proportion to
their size), so the data never has to fit in memory. Validation uses a fixed set of
windows (drawn once from the seed) or, with `eval_windows="all"`, the whole val split
cut into non-overlapping windows; the final validation always uses the whole split.

One step. The global batch is `batch_size * grad_accum * world_size` windows. Every
rank draws the same global list of windows from the same generator and rank r trains
on micro-batches r, r + W, r + 2W, ... of it. The union of what the ranks see is
therefore independent of the world size: one process with grad_accum 2A computes the
same update as two processes with grad_accum A (up to the order of float sums).
Each micro-batch loss is divided by grad_accum and DDP averages over ranks, so the
gradient is the mean over the global batch either way.

Out of memory. A step that runs out of GPU memory ends the attempt, the error marked
with its micro-batch and GPU (core.failures.mark_out_of_memory; the train launcher
records it beside the resume folder). The next attempt on the same GPU type, given that
record (`out_of_memory`), cuts each configured micro-batch into equal pieces
(core.oom.smaller_micro_batch: 32 -> 16 -> ... -> 1) and accumulates over all of them:
each step trains on the same windows in more micro-steps, so the global batch and the
data order stay as configured, and a checkpoint (whose key holds the configured
batch_size and grad_accum) resumes across the change. The numbers match within float
rounding, not bitwise (sums in another order; dropout masks drawn in other shapes). At
micro-batch 1 the attempt ends with ModelDoesNotFitError, naming the GPU's memory.

Resume. Every `checkpoint_interval` steps, rank 0 writes `checkpoint.pt` (model,
optimizer, the sampler's generator state, step, loss history) atomically into the
resume folder, which sits beside the output folder because Snakemake deletes a failed
job's outputs. A restarted job loads it and continues; dropout masks are seeded from a
hash of (seed, rank, step), so the continued run is the same computation as an uninterrupted
one (bitwise on CPU in fp32). A checkpoint from different parameters is refused with
the differing keys named; an unreadable one is refused, never silently ignored. A
refusal is a CheckpointError, a ValueError: a retry of the attempt would find the same
checkpoint and refuse it again, so the train launcher records it and the retry stops at
once (core.failures) instead of queueing for the GPUs to fail the same way.

Told to stop. SIGTERM (scancel, a SLURM time limit or preemption, torchrun passing on
its own; not a deleted EKS pod, whose shell passes nothing on), SIGINT or SIGHUP (a closed
terminal) during the steps is held until the step ends
(core.signals); the ranks agree on it there (`agreed_signal`), rank 0 writes the
checkpoint of that step (unless the step just wrote one), every rank logs the signal,
step and checkpoint, and the process ends by the signal as it would have: a retried
failure, whose retry resumes from that step instead of the last `checkpoint_interval`
one. The same checkpoint, in the same format; a second signal meanwhile is ignored
(SIGKILL at the end of the grace period still ends the job, the previous checkpoint
intact: the write is atomic). The first is said on stderr as it comes, naming the step
under way: that step can take minutes (the first under torch.compile, an evaluation).
Under torchrun a rank that has agreed to stop no longer dies with torchrun, which a
third signal ends (controller.unbind_from_launcher: the launcher adopts the rank and
waits for it), and waits for the other ranks at most a minute (`wait_at_stop`).

Outputs (rank 0): best.safetensors, last.safetensors, config.json, losses.parquet,
metrics.json (strict JSON: a diverged run's losses are null, `strict_json`; and `made_with`,
what the run ran with, core.madewith, for provenance), sample.txt, loss.png, and hf/
(GPT-2 folder of the best weights).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from shardflow.core import locks
from shardflow.core.atomic import atomic_open, atomic_path, write_json
from shardflow.core.controller import ENV as CONTROLLER_ENV
from shardflow.core.controller import Controller, OrphanedJobError, unbind_from_launcher
from shardflow.core.devices import (
    PEAK_GPU_KEYS,
    device_memory,
    dtype_name,
    peak_memory,
    reset_peak_memory,
    resolve_dtype,
    use_compile_cache,
)
from shardflow.core.failures import mark_out_of_memory
from shardflow.core.files import read_json
from shardflow.core.hashing import digest, sha256_file
from shardflow.core.madewith import made_with
from shardflow.core.oom import OOM_ERRORS, smaller_micro_batch
from shardflow.core.parts import make_folder, remove_folder, resume_tree_top
from shardflow.core.s3 import logical_path
from shardflow.core.signals import Held
from shardflow.train.model import GPT, GPTConfig
from shardflow.train.params import TrainParams, batch_note
from shardflow.train.shards import open_shard

CHECKPOINT_FORMAT = "shardflow.train.checkpoint"
CHECKPOINT_VERSION = 1
CHECKPOINT_NAME = "checkpoint.pt"
# Keys that may change between a checkpoint and its resumption without changing the
# steps already taken: extending max_iters continues the same curve (lr_decay_iters is
# compared resolved, so a schedule that hangs on max_iters still counts as changed);
# where torch keeps its compiled kernels changes no number.
RESUMABLE_KEYS = ("max_iters", "checkpoint_interval", "compile_cache")
# Dense bf16 tensor-core peaks (TFLOP/s), by the model in the CUDA device name ("NVIDIA
# L40S", "Tesla T4"); first match wins (`peak_bf16_tflops`). V100 and T4 have no bf16
# (auto trains them in fp32): their fp16 tensor peak, the half-precision one. A GPU not
# listed (A10G, RTX cards) has no MFU. GH200 (Grace Hopper) holds an H100-class GPU: no
# longer matched by "H200" inside its name.
PEAK_BF16_TFLOPS = {"GH200": 989.0, "H200": 989.0, "H100 SXM": 989.0, "H100 80GB HBM3": 989.0,
                    "H100 NVL": 835.0, "H100": 756.0,
                    "A100": 312.0, "L40S": 362.0, "L40": 181.0, "L4": 121.0, "A10": 125.0, "V100": 125.0,
                    "T4": 65.0}

log = logging.getLogger(__name__)
# How long a rank told to stop waits for the others (`wait_at_stop`): the other ranks for
# rank 0's checkpoint, rank 0 for ranks already there. A rank no longer dies with torchrun
# once it stops (controller.unbind_from_launcher), so without a bound one whose peer hangs
# (rank 0 on a hung file system, a stopped process) stayed for the gloo group's timeout,
# 30 min, on its GPU. 60 s is past the waits that end a stop anyway (torchrun SIGKILLs
# the ranks it stops after its shutdown timeout, 30 s by default; SLURM after KillWait,
# 30 s by default), and once torchrun is gone rank 0 writes on alone. It shortens a
# write only where a signal reached some ranks alone and torchrun is not stopping them:
# a rank leaving after 60 s makes torchrun stop rank 0, SIGKILLed 30 s later.
STOP_WAIT = timedelta(seconds=60)


def _orphaned(controller: Controller | None, rt) -> bool:
    """Whether the Snakemake running this job has gone (rank 0 looks; every rank learns)."""
    gone = controller is not None and rt.is_main and not controller.alive()
    if rt.world > 1:
        flag = torch.tensor(1.0 if gone else 0.0, device=rt.device)
        gone = bool(rt.all_reduce_(flag).item() > 0)
    return gone


def agreed_signal(received: int | None, group) -> int:
    """The stop signal some rank holds at this step boundary (core.signals; the largest
    number where ranks hold different ones), else 0: every rank learns it at the same
    step, though only one was signalled. `group`: the ranks' gloo group, None alone.

    A blocking all_reduce of a CPU tensor on a gloo group of its own: no host-device sync
    (a flag on the GPU under NCCL would need one each step to be read), one round trip
    between the hosts a step (the device keeps running the queued work meanwhile), and
    the ranks stop at the first boundary after the signal. Reading the previous step's
    flags asynchronously would stop them one step later, a step more that the grace
    period before SIGKILL has to hold."""
    if group is None:
        return received or 0
    flag = torch.tensor(received or 0)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return int(flag)


def wait_at_stop(group, timeout: timedelta = STOP_WAIT) -> str | None:
    """Wait at the stop for every rank of `group` (the ranks' gloo group), so that no rank
    ends before rank 0 has written the checkpoint (torchrun would stop rank 0 with it); at
    most `timeout`. None when all came, else why not: a rank gone (gloo sees it at once)
    or one that did not come in time. The caller ends by its signal either way.

    The timeout is the barrier's own, not a wait on it: the operation ends, and a process
    that ends by SIGINT (a KeyboardInterrupt: the interpreter shuts down) has no gloo
    thread left blocked on a peer until the group's timeout."""
    options = dist.BarrierOptions()
    options.timeout = timeout
    try:
        group.barrier(options).wait()
    except RuntimeError as exc:  # gloo's errors (DistBackendError is one)
        return str(exc)
    return None


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from (unreadable, foreign, or other parameters).
    A ValueError, which core.failures counts as deterministic: every retry reads the same
    file and refuses it the same way, until the parameters are restored or the resume
    folder is deleted and the job rerun (a new run, whose first attempt runs again)."""


class ModelDoesNotFitError(RuntimeError):
    """A training step runs out of device memory even at micro-batch 1. A RuntimeError,
    retried (core.failures): a GPU another process shared, or a larger one, may hold it."""


def lr_at(step: int, p: TrainParams) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup, cosine decay, floor."""
    if step < p.warmup_iters:
        return p.lr * (step + 1) / (p.warmup_iters + 1)
    if step >= p.decay_iters:
        return p.min_lr
    progress = (step - p.warmup_iters) / max(1, p.decay_iters - p.warmup_iters)
    return p.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (p.lr - p.min_lr)


# ---------------------------------------------------------------- shards

@dataclass
class ShardSet:
    meta_path: Path
    vocab_size: int
    eot_id: int | None
    train: list[np.ndarray]
    val: list[np.ndarray]
    fingerprint: list  # (file, split, tokens, sha256) of every shard: resume checks the data is the same
    tokenizer: dict | None = None  # the identity of the tokenizer that made them (None: not recorded)
    # Whether eot_id ends each document in the shards (gather_shards); a position split
    # (shards.split: position, one text) holds none, its embedding never trained.
    eot_in_data: bool = True


def load_shards(shard_dir_or_metadata: str | os.PathLike, verify: bool = True,
                share: tuple[int, int] = (0, 1)) -> ShardSet:
    """The shards metadata.json lists, as checked memmaps; `verify`: their bytes against
    the sha256 recorded with them, and their token ids against its vocab_size (every byte
    read), for the shards of `share`, (rank, world): that rank's part (`shard_shares`)."""
    meta_path = Path(shard_dir_or_metadata)
    if meta_path.is_dir():
        meta_path = meta_path / "metadata.json"
    meta = read_json(meta_path)  # a file cut short or not JSON: an error naming it and the line
    vocab_size = _check_metadata(meta, meta_path)
    rank, world = share
    mine = set(shard_shares([entry["tokens"] for entry in meta["shards"]], world)[rank]) if verify else set()
    split = {"train": [], "val": []}
    fingerprint = []
    for i, entry in enumerate(meta["shards"]):
        check = i in mine
        path = meta_path.parent / entry["file"]
        tokens = open_shard(path, meta.get("dtype")).tokens  # checked memmap
        if len(tokens) != entry["tokens"]:
            raise ValueError(f"{path}: {len(tokens)} tokens, {meta_path.name} says {entry['tokens']}")
        # A shard changed in place keeps its size (and the folder's mtime: Snakemake plans no
        # rerun); its bytes are checked against the hash written with it.
        if check and entry.get("sha256") and (got := sha256_file(path)) != entry["sha256"]:
            raise ValueError(
                f"{path}: sha256 {got[:16]}..., {meta_path.name} recorded {entry['sha256'][:16]}... when it was "
                f"written: the shard changed since (corrupted, or edited); make the shards again "
                f"(snakemake -R gather_shards, or delete {meta_path.parent})"
            )
        # An id the model's embedding has no row for failed only at the step whose window
        # held it: an IndexError naming no file on the CPU, a device-side assert on CUDA
        # (retried). Shards made by hand, or listed with another tokenizer's vocab_size. A
        # dtype that cannot hold such an id (uint16 under 65,537 ids or more) is not read again.
        holds_outside = np.iinfo(tokens.dtype).max >= vocab_size
        if check and holds_outside and len(tokens) and (top := int(tokens.max())) >= vocab_size:
            where = int(np.argmax(tokens >= vocab_size))
            raise ValueError(
                f"{path}: token id {top} (first out-of-range id at token {where}) is outside the vocabulary of "
                f"{vocab_size} ids that {meta_path.name} gives (vocab_size): these shards were made with another "
                "tokenizer; make them again with the one metadata.json records"
            )
        split[entry["split"]].append(tokens)
        fingerprint.append([entry["file"], entry["split"], entry["tokens"], entry.get("sha256")])
    for name, shards in split.items():
        if not shards:
            raise ValueError(f"{meta_path}: no {name} shards")
    method = meta["split"].get("method") if isinstance(meta.get("split"), dict) else None  # none: made by hand
    eot_in_data = meta.get("eot_id") is not None and method != "position"
    return ShardSet(meta_path, vocab_size, meta.get("eot_id"), split["train"], split["val"], fingerprint,
                    meta.get("tokenizer"), eot_in_data)


def shard_shares(tokens: list[int], world: int) -> list[list[int]]:
    """The shards (indices into `tokens`, their token counts) each of `world` ranks
    checks: largest first onto the rank with the fewest tokens so far, so the ranks read
    about as many bytes each (corpus.split.assign_groups)."""
    from shardflow.corpus.split import assign_groups

    placed = assign_groups(dict(enumerate(tokens)), world)
    return [sorted(i for i, r in placed.items() if r == rank) for rank in range(world)]


def load_shards_on_ranks(shard_dir_or_metadata: str | os.PathLike, rt: Runtime) -> ShardSet:
    """load_shards under torchrun: each rank checks its share of the shards, before the
    group's first collective (rank 0 checking them all held the others in DDP's first
    broadcast: hundreds of GB on network storage outlasted the group's timeout, every
    attempt alike). A shard one rank finds bad stops every rank: with its own error, or
    the lowest failing rank's, outside any collective, so core.failures records the cause."""
    if rt.world == 1:
        return load_shards(shard_dir_or_metadata)
    shards, error = None, None
    try:
        shards = load_shards(shard_dir_or_metadata, share=(rt.rank, rt.world))
    except ValueError as exc:
        error = exc
    errors = [None] * rt.world
    dist.all_gather_object(errors, None if error is None else str(error))
    if error is not None:
        raise error
    if (failed := next((r for r, e in enumerate(errors) if e), None)) is not None:
        raise ValueError(f"rank {failed}, checking its share of the shards: {errors[failed]}")
    return shards


def sample_start_id(shards: ShardSet) -> int:
    """The token sample.txt is generated from: end-of-text where it ends each document (the
    sample begins as a document would), else the first train token, one the model trained
    on (nanoGPT starts its Shakespeare sample from the newline)."""
    if shards.eot_in_data:
        return shards.eot_id
    return next(int(s[0]) for s in shards.train if len(s))


def _check_metadata(meta, meta_path: Path) -> int:
    """The vocab_size of a shard folder's metadata.json (`meta`, as read), after checking
    that it holds what load_shards reads, as gather_shards writes it: another file (a
    foreign metadata.json, one written by hand) stopped on a bare KeyError or TypeError
    naming neither the file nor the key."""
    what = "a shard folder's metadata.json (gather_shards writes one)"
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path}: a JSON {type(meta).__name__}, not {what}")
    vocab_size = meta.get("vocab_size")
    if type(vocab_size) is not int or vocab_size < 1:
        raise ValueError(f"{meta_path}: 'vocab_size' is {vocab_size!r}, not a positive integer: not {what}")
    # An id the embedding has no row for failed only after the last step, writing the sample.
    eot_id = meta.get("eot_id")
    if eot_id is not None and (type(eot_id) is not int or not 0 <= eot_id < vocab_size):
        raise ValueError(f"{meta_path}: 'eot_id' is {eot_id!r}, not null or a token id below vocab_size {vocab_size}")
    if not isinstance(meta.get("shards"), list):
        raise ValueError(f"{meta_path}: 'shards' is {meta.get('shards')!r}, not a list of shard files: not {what}")
    listed: dict[str, int] = {}  # each file's first entry
    for i, entry in enumerate(meta["shards"]):
        if not isinstance(entry, dict):
            problem = "not an object"
        elif not isinstance(entry.get("file"), str):
            problem = f"'file' is {entry.get('file')!r}, not a file name"
        elif entry.get("split") not in ("train", "val"):
            problem = f"'split' is {entry.get('split')!r}, not 'train' or 'val'"
        elif type(entry.get("tokens")) is not int or entry["tokens"] < 0:
            problem = f"'tokens' is {entry.get('tokens')!r}, not a token count"
        elif (first := listed.setdefault(os.path.normpath(entry["file"]), i)) != i:
            # under train and val, the model is validated on what it trained on
            problem = (f"'file' {entry['file']} is listed again (first as shards[{first}], "
                       f"{meta['shards'][first]['split']}): a shard belongs to one split, once")
        else:
            continue
        raise ValueError(f"{meta_path}: shards[{i}]: {problem}")
    return vocab_size


def check_tokenizer(tokenizer, shards: ShardSet) -> None:
    """Refuse a tokenizer other than the one the shards were made with (the identity their
    metadata records): it decodes the sample and goes into hf/ beside the weights, so
    another one decoded the sample into other text, or failed on an id it lacks only
    after the last step, and hf/ held a tokenizer whose ids are not the model's. Shards
    whose metadata records none (made by hand) are not checked."""
    recorded = shards.tokenizer
    if recorded is None:
        return
    given = tokenizer.identity()
    differing = [k for k in sorted(set(recorded) | set(given)) if recorded.get(k) != given.get(k)]
    if differing:
        detail = "; ".join(f"{k}: shards {recorded.get(k)!r}, given {given.get(k)!r}" for k in differing)
        raise ValueError(
            f"the tokenizer given is not the one the shards of {shards.meta_path} were made with ({detail}): its "
            "sample and hf/ folder would not match the model; pass the shards' tokenizer (gather_shards copies it "
            f"beside {shards.meta_path.name})"
        )


class WindowSampler:
    """Random (block_size + 1)-token windows from random shards, drawn by one torch.Generator.

    A shard is chosen with probability proportional to its number of window starts
    (its size less one window), then a start uniformly within it; so every start in
    the split is equally likely. Windows stay within a shard: a shard of block_size
    tokens or fewer is never read (`unsampled_tokens` counts its tokens; the trainer
    warns). The generator state is part of the checkpoint.
    """

    def __init__(self, shards: list[np.ndarray], block_size: int, seed: int, split: str = "train"):
        self.shards = shards
        self.block_size = block_size
        self.starts = torch.tensor([max(len(s) - block_size, 0) for s in shards], dtype=torch.float64)
        self.unsampled_tokens = sum(len(s) for s in shards if len(s) <= block_size)
        if not self.starts.sum() > 0:
            hint = " (or eval_windows: all, which reads every val token)" if split == "val" else ""
            raise ValueError(
                f"no {split} shard holds a window of block_size + 1 = {block_size + 1} tokens "
                f"(largest: {max((len(s) for s in shards), default=0)}): lower train.block_size, or give the "
                f"{split} split more text{hint}"
            )
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self, n: int) -> list[tuple[int, int]]:
        """n (shard, offset) pairs."""
        shard = torch.multinomial(self.starts, n, replacement=True, generator=self.generator)
        u = torch.rand(n, generator=self.generator, dtype=torch.float64)
        offset = (u * self.starts[shard]).long()
        return list(zip(shard.tolist(), offset.tolist(), strict=True))


def read_windows(shards: list[np.ndarray], windows: list[tuple[int, int]], length: int, device) -> tuple:
    """Inputs and next-token targets (B, length) for windows given as (shard, offset)."""
    rows = np.stack([np.asarray(shards[s][o : o + length + 1], dtype=np.int64) for s, o in windows])
    xy = torch.from_numpy(rows)
    if device.type == "cuda":
        xy = xy.pin_memory().to(device, non_blocking=True)
    return xy[:, :-1], xy[:, 1:]


def val_windows(shards: list[np.ndarray], block_size: int, count: int | str, seed: int) -> list[tuple[int, int, int]]:
    """Validation windows (shard, offset, length): `count` random ones, or all of the split.

    "all" cuts each shard into non-overlapping windows that predict every token but
    the first (the last window of a shard is shorter).
    """
    if count == "all":
        out = []
        for s, tokens in enumerate(shards):
            for o in range(0, len(tokens) - 1, block_size):
                out.append((s, o, min(block_size, len(tokens) - 1 - o)))
        if not out:  # a val loss of 0/0: NaN, and the "best" weights the last ones
            raise ValueError(
                f"the val split ({sum(len(s) for s in shards)} tokens in {len(shards)} shards) has no token to "
                "predict (a shard needs 2 tokens or more): raise shards.val_fraction, or give the corpus more text"
            )
        return out
    sampler = WindowSampler(shards, block_size, seed, "val")  # a generator of its own: the set never changes
    return [(s, o, block_size) for s, o in sampler.draw(count)]


# ---------------------------------------------------------------- the run


@dataclass
class Runtime:
    """Where and how this process runs: device, precision, rank."""

    device: torch.device
    dtype: torch.dtype
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def all_reduce_(self, t: torch.Tensor, op=None) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
        return t


def resolve_runtime(p: TrainParams, checkpointed: str | None = None) -> Runtime:
    """The device and precision `p` names, auto resolved here. `checkpointed`: the dtype
    of the checkpoint this run continues, if any (`checkpoint_dtype`), for `auto_dtype`."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    device = p.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    dtype = auto_dtype(device, checkpointed) if p.dtype == "auto" else p.dtype
    return Runtime(device, getattr(torch, dtype), rank, world)


def auto_dtype(device: torch.device, checkpointed: str | None = None) -> str:
    """train.dtype auto on `device`: bf16 where the GPU runs it natively (compute
    capability 8 and up; a V100 or T4 emulates it in fp32, core.devices.resolve_dtype),
    else fp32. A checkpoint's dtype wins where the GPU can run it, emulated bf16 included:
    the dtype is part of the resume key, so an attempt on an A100 retried on a V100 (or a
    V100's fp32 attempt retried on an A100, or a V100 checkpoint from before 2026-11-29,
    when auto counted emulated bf16) would otherwise be refused on every retry. The run
    goes on as it began, slower where bf16 is emulated."""
    if device.type == "cuda" and (
        checkpointed == "float32" or (checkpointed == "bfloat16" and torch.cuda.is_bf16_supported())
    ):
        return checkpointed
    return dtype_name(resolve_dtype("auto", device, "train"))


def checkpoint_dtype(path: Path) -> str | None:
    """The dtype the GPU run whose checkpoint is at `path` trained in, its tensors mapped,
    not read (a checkpoint of several GB is loaded once, by load_checkpoint). None where
    there is no checkpoint, a CPU run's (refused on a GPU for its device anyway), or one
    that cannot be read: load_checkpoint then says why."""
    try:
        key = torch.load(path, map_location="cpu", weights_only=True, mmap=True)["key"]
        dtype = key["dtype"] if key["device"] == "cuda" else None
    except Exception:  # unreadable, foreign, not there: load_checkpoint reads it again and says why
        return None
    return dtype if isinstance(dtype, str) else None


@torch.no_grad()
def evaluate(model, shards, windows, batch_size: int, rt: Runtime) -> float:
    """Mean next-token loss over `windows` (split across ranks, summed in float64)."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=rt.device)  # loss sum, token count
    mine = windows[rt.rank :: rt.world]
    by_length: dict[int, list] = {}
    for s, o, n in mine:
        by_length.setdefault(n, []).append((s, o))
    for length, group in by_length.items():
        for i in range(0, len(group), batch_size):
            x, y = read_windows(shards, group[i : i + batch_size], length, rt.device)
            with rt.autocast():
                logits, _ = model(x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum")
            totals += torch.stack([loss.double(), torch.tensor(float(y.numel()), dtype=torch.float64, device=rt.device)])
    rt.all_reduce_(totals)
    model.train(was_training)
    return (totals[0] / totals[1]).item()


def memory_settings(cfg: GPTConfig, p: TrainParams, rt: Runtime) -> str:
    """What, besides the micro-batch and the GPU type, decides the memory a training step
    takes (the model with its vocabulary, the precision, compilation, the processes): an
    out-of-memory record of other settings does not apply to this run (digest)."""
    return digest({"model": cfg.to_dict(), "dtype": str(rt.dtype), "compile": p.compile and rt.device.type == "cuda",
                   "world_size": rt.world})


def micro_batch_for(p: TrainParams, out_of_memory: dict | None, device: str, settings: str) -> tuple[int, dict | None]:
    """The micro-batch this attempt trains with, and the out-of-memory details that chose
    it (None: train.batch_size, as configured). `out_of_memory`: the details an earlier
    attempt or run recorded (core.failures: the micro-batch that did not fit, the GPU's
    name, `settings`); on the same GPU type with the same settings the micro-batch is
    core.oom.smaller_micro_batch of the one that did not fit (1 again after 1), else the
    configured one (another GPU type may hold it; so may a batch_size lowered below the
    micro-batch that did not fit: it is tried as configured)."""
    d = out_of_memory or {}
    failed = d.get("micro_batch")
    if d.get("device") != device or d.get("settings") != settings or not isinstance(failed, int) or failed < 1:
        return p.batch_size, None
    if failed > p.batch_size:  # a batch_size lowered since: nothing says it does not fit
        return p.batch_size, None
    micro = smaller_micro_batch(p.batch_size, failed) or 1
    return micro, (d if micro < p.batch_size else None)


def out_of_memory_error(exc: BaseException, p: TrainParams, micro: int, rt: Runtime, settings: str) -> BaseException:
    """The error a step that ran out of memory at micro-batch `micro` ends the attempt
    with, marked with what the next attempt needs (core.failures.mark_out_of_memory): `exc`
    itself, or at micro-batch 1 a ModelDoesNotFitError naming the GPU and its memory."""
    name, mib = device_memory(rt.device)
    smaller = smaller_micro_batch(p.batch_size, micro)
    details = {"micro_batch": micro, "next_micro_batch": smaller,
               "next_grad_accum": None if smaller is None else p.grad_accum * (p.batch_size // smaller),
               "batch_size": p.batch_size, "grad_accum": p.grad_accum, "device": name, "gpu_memory_mib": mib,
               "settings": settings}
    if smaller is None:
        memory = f"{rt.device} ({name}, {mib:,} MiB)" if mib is not None else str(rt.device)
        exc = ModelDoesNotFitError(
            f"the model does not fit in the memory of {memory} even at micro-batch 1 (train.batch_size "
            f"{p.batch_size} x grad_accum {p.grad_accum} run as {p.batch_size * p.grad_accum} micro-steps of one "
            f"window of {p.block_size} tokens; {type(exc).__name__}: {str(exc)[:300]}): lower train.block_size, "
            "n_embd or n_layer, or give the job a GPU with more memory"
        )
    return mark_out_of_memory(exc, details)


def make_optimizer(model: GPT, p: TrainParams, rt: Runtime) -> torch.optim.AdamW:
    # Decay matrices and embeddings only; biases and LayerNorm gains stay free (as GPT-2/nanoGPT).
    params = [q for q in model.parameters() if q.requires_grad]
    groups = [
        {"params": [q for q in params if q.dim() >= 2], "weight_decay": p.weight_decay},
        {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0},
    ]
    extra = {"fused": True} if rt.device.type == "cuda" else {}
    return torch.optim.AdamW(groups, lr=p.lr, betas=(p.beta1, p.beta2), **extra)


def dropout_seed(seed: int, rank: int, step: int) -> int:
    """The seed of the dropout masks of `rank` at `step` of a run seeded `seed`.

    A hash of the three, not a sum: `seed + c * (rank + 1) + step` gave seed s at step
    t + 1 the masks of seed s + 1 at step t, so the runs of a sweep over seeds drew the
    same masks one step apart."""
    return int(digest(["dropout", seed, rank, step]), 16) >> 193  # 63 bits: torch takes any int64


def resume_key(p: TrainParams, model_cfg: GPTConfig, rt: Runtime, shards: ShardSet, ranks_here: int = 1) -> dict:
    """Everything a checkpoint must agree on to be continued (resolved values). The world
    size is the processes whose global batch the run trains, in one process or many."""
    key = {k: v for k, v in dataclasses.asdict(p).items() if k not in RESUMABLE_KEYS}
    key.update(lr_decay_iters=p.decay_iters, device=rt.device.type, dtype=str(rt.dtype).removeprefix("torch."),
               world_size=rt.world * ranks_here, vocab_size=model_cfg.vocab_size, data=shards.fingerprint)
    return key


def load_checkpoint(path: Path, key: dict) -> dict:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except OSError:  # the file could not be read (a disk or network file system error): a retry may read it
        raise
    except Exception as exc:  # truncated zip, a pickle of foreign classes, not a torch file at all
        # `from None`: torch reports a truncated file as a RuntimeError, which core.failures
        # takes for a transient cause, but the bytes stay what they are and a retry would
        # fail the same way. The message keeps torch's error.
        raise CheckpointError(f"cannot read checkpoint {path} ({type(exc).__name__}: {str(exc)[:200]}); "
                              "delete it (or its folder) to start training from scratch") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a shardflow training checkpoint; delete it to start from scratch")
    if ckpt.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: checkpoint version {ckpt.get('version')}, this code reads {CHECKPOINT_VERSION}")
    old = ckpt["key"]
    differing = sorted(k for k in set(old) | set(key) if old.get(k) != key.get(k))
    if differing:
        detail = "; ".join(f"{k}: checkpoint {_short(old.get(k))} != now {_short(key.get(k))}" for k in differing)
        if "lr_decay_iters" in differing:
            detail += (f" (lr_decay_iters null follows max_iters: to raise max_iters and continue, set "
                       f"lr_decay_iters: {_short(old.get('lr_decay_iters'))})")
        raise CheckpointError(f"checkpoint {path} was written with other parameters ({', '.join(differing)}): "
                              f"{detail}. Restore them, or delete the resume folder {path.parent} to start over")
    return ckpt


def _short(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def weights(model: GPT) -> dict[str, torch.Tensor]:
    """State dict for safetensors: the tied head is the embedding, so it is left out."""
    return {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}


def best_file(resume_dir: Path, step: int | None) -> Path:
    """The best weights found at `step`, in the resume folder. Named by step: a newer best
    found after the last checkpoint lives beside the one the checkpoint records, so a run
    killed in between resumes with the weights that match its checkpoint's best."""
    return resume_dir / f"best-{step}.safetensors"


def keep_best_of_checkpoint(resume_dir: Path, step: int | None, logger=None) -> None:
    """Remove best-weights files of other steps than the checkpoint's best: older ones, and a
    lost attempt's newer ones (found after the checkpoint the run resumed from). A folder
    from before best files were named by step holds `best.safetensors`: it becomes the
    checkpoint's (the best that version kept)."""
    keep = best_file(resume_dir, step)
    legacy = resume_dir / "best.safetensors"
    if legacy.exists():
        if step is not None and not keep.exists():
            os.replace(legacy, keep)
        else:
            legacy.unlink()
    for path in resume_dir.glob("best-*.safetensors"):
        if path == keep:
            continue
        found = path.name.removeprefix("best-").removesuffix(".safetensors")
        if logger is not None and step is not None and found.isdigit() and int(found) > step:
            logger.info("removing %s: a best found after the checkpoint's (step %s) by an attempt that was lost",
                        path.name, step)
        path.unlink(missing_ok=True)


def save_weights(model: GPT, path: Path) -> None:
    with atomic_path(path) as tmp:
        save_file(weights(model), str(tmp), metadata={"format": "pt"})


def load_model(out_dir: str | os.PathLike, which: str = "best") -> GPT:
    """A trained model from an output folder: `which` is "best" or "last"."""
    out_dir = Path(out_dir)
    cfg = GPTConfig(**json.loads((out_dir / "config.json").read_text())["model"])
    model = GPT(cfg)
    state = load_file(str(out_dir / f"{which}.safetensors"))
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state)
    return model.eval()


RESUME_LOCK = "train.lock"


@contextlib.contextmanager
def holding_resume(resume_dir: Path):
    """Rank 0 holds `resume_dir`'s lock while it trains: a second process on the same
    checkpoints (the train job of an earlier run, left running when its Snakemake was
    killed without its jobs, then a rerun) stops at once, naming the holder, instead of
    training beside it into the same files. Other ranks follow rank 0."""
    if int(os.environ.get("RANK", "0")) != 0:
        yield
        return
    make_folder(resume_dir)  # other jobs of the data set may remove an emptied .resume meanwhile
    path = resume_dir / RESUME_LOCK
    fd = locks.try_lock(path, resume_dir=str(resume_dir))
    if fd is None:
        raise RuntimeError(
            f"another training process is using {resume_dir} ({locks.holder(path)}): an earlier run's train "
            "job still running (its Snakemake killed without its jobs?); stop it or let it finish, then run again"
        )
    try:
        yield
    finally:
        locks.release(fd)


def train(
    shard_dir_or_metadata: str | os.PathLike,
    out_dir: str | os.PathLike,
    params: TrainParams,
    logger: logging.Logger | None = None,
    *,
    resume_dir: str | os.PathLike | None = None,
    decode: Callable[[list[int]], str] | None = None,
    sample_tokens: int = 500,
    keep_resume: bool = False,
    tokenizer=None,
    out_of_memory: dict | None = None,
    processes: int = 1,
) -> dict:
    """Train (or continue training) and write the outputs; returns metrics (on every rank).

    resume_dir: where checkpoints live; default `<out_dir>/../<out_dir name>.resume`,
    outside the output folder, held by one process at a time (`holding_resume`). It is
    removed after the outputs are written unless keep_resume, so a finished job rerun
    with new parameters starts afresh; so are the folders above it that this leaves
    empty, up to the `.resume` folder it lies in (`core.parts.remove_folder`).
    tokenizer: the shards' (shardflow.train.tokenizer): it decodes the sample (unless
    `decode` is given) and goes into the Hugging Face folder with the weights; another
    one is refused before the first step (`check_tokenizer`).
    out_of_memory: what an earlier attempt that ran out of memory recorded (the train
    launcher passes it, core.failures): on that GPU type, the micro-batch is made smaller
    and the steps take the same windows in more micro-steps (`micro_batch_for`).
    processes: how many data-parallel processes the global batch is for (train.gpus).
    Under torchrun, the world size. One process given more (a CPU job of a config with
    train.gpus N) trains the micro-batches of all N in turn, grad_accum x N micro-steps a
    step: the same global batch and windows as the N processes, not bitwise the same
    numbers (sums in another order, dropout masks drawn otherwise).
    """
    out_dir = Path(out_dir)
    resume_dir = Path(resume_dir) if resume_dir else out_dir.parent / f"{out_dir.name}.resume"
    with holding_resume(resume_dir):
        return _train(shard_dir_or_metadata, out_dir, params, logger, resume_dir, decode, sample_tokens,
                      keep_resume, tokenizer, out_of_memory, processes)


def _train(shard_dir_or_metadata, out_dir: Path, params: TrainParams, logger, resume_dir: Path, decode,
           sample_tokens: int, keep_resume: bool, tokenizer, out_of_memory: dict | None, processes: int) -> dict:
    if decode is None and tokenizer is not None:
        decode = tokenizer.decode
    logger = logger or log
    p = params
    ckpt_path = resume_dir / CHECKPOINT_NAME
    checkpointed = checkpoint_dtype(ckpt_path) if p.dtype == "auto" else None
    rt = resolve_runtime(p, checkpointed)
    fresh = auto_dtype(rt.device)
    if checkpointed is not None and dtype_name(rt.dtype) == checkpointed != fresh:
        slower = " (slower: this GPU emulates bf16)" if checkpointed == "bfloat16" else ""
        logger.warning("checkpoint %s was written in %s: continued in %s, not the %s that train.dtype auto picks "
                       "for a new run on %s, so the run goes on as it began%s. Delete the resume folder %s to "
                       "start over in %s", ckpt_path, checkpointed, checkpointed, fresh, device_memory(rt.device)[0],
                       slower, resume_dir, fresh)
    if processes < 1 or (rt.world > 1 and processes not in (1, rt.world)):
        raise ValueError(f"train for {processes} processes cannot run as {rt.world} (torchrun's world size)")
    # the ranks whose micro-batches this process trains: 1, or all of them in one process
    ranks_here = processes if rt.world == 1 else 1
    shards = load_shards_on_ranks(shard_dir_or_metadata, rt)
    if tokenizer is not None:
        check_tokenizer(tokenizer, shards)
    cfg = p.model_config(shards.vocab_size)
    key = resume_key(p, cfg, rt, shards, ranks_here)  # the configured batch: a smaller micro-batch resumes the same run
    settings = memory_settings(cfg, p, rt)
    micro, after_oom = micro_batch_for(p, out_of_memory, device_memory(rt.device)[0], settings)
    pieces = p.batch_size // micro  # each configured micro-batch is cut into `pieces` of `micro` windows
    grad_accum = p.grad_accum * pieces * ranks_here  # micro-steps per optimizer step and process
    if rt.device.type == "cuda":
        torch.cuda.set_device(rt.device)
        reset_peak_memory(rt.device)  # this run's peak (metrics.json), from before the model is built
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    torch.manual_seed(p.seed)  # same initial weights on every rank
    raw = GPT(cfg).to(rt.device)
    optimizer = make_optimizer(raw, p, rt)
    sampler = WindowSampler(shards.train, p.block_size, p.seed)
    fixed_val = val_windows(shards.val, p.block_size, p.eval_windows, p.seed + 1)
    train_tokens = sum(len(s) for s in shards.train)
    if sampler.unsampled_tokens:
        logger.warning(
            "%d of %d train tokens (%.1f %%) sit in shards of block_size = %d tokens or fewer and are never "
            "trained on (windows stay within a shard): raise shards.tokens_per_shard or lower train.block_size",
            sampler.unsampled_tokens, train_tokens, 100 * sampler.unsampled_tokens / train_tokens, p.block_size,
        )

    step, history, best, prior_seconds = 0, [], {"val_loss": math.inf, "step": None}, 0.0
    controller = Controller.from_env(os.environ.get(CONTROLLER_ENV))

    def stop_if_orphaned(when: str) -> None:
        if _orphaned(controller, rt):
            message = (f"the Snakemake that started this job (pid {controller.pid}) is gone, {when}: outputs "
                       f"written now would not be recorded; stopping with the checkpoint at step {step} kept in "
                       f"{resume_dir} (a rerun resumes from it)")
            logger.critical(message)
            raise OrphanedJobError(message)
    if ckpt_path.exists():
        ckpt = load_checkpoint(ckpt_path, key)
        if ckpt["step"] > p.max_iters:  # continued, it would publish a longer run labelled with this max_iters
            raise CheckpointError(
                f"checkpoint {ckpt_path} is at step {ckpt['step']}, past train.max_iters {p.max_iters}: a run of "
                f"{p.max_iters} steps cannot continue from it. Raise train.max_iters to {ckpt['step']} or more, or "
                f"delete the resume folder {resume_dir} to train {p.max_iters} steps from scratch"
            )
        raw.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        sampler.generator.set_state(ckpt["sampler_generator"])
        step, history, best, prior_seconds = ckpt["step"], ckpt["history"], ckpt["best"], ckpt["seconds"]
        written_at = ckpt.get("micro_batch", p.batch_size)  # older checkpoints: the configured one
        logger.info("resumed from %s at step %d%s", ckpt_path, step,
                    f" (written at micro-batch {written_at}, now {micro})" if written_at != micro else "")
        if rt.is_main:
            keep_best_of_checkpoint(resume_dir, best["step"], logger)
    resumed_from = step

    model = raw
    if p.compile and rt.device.type == "cuda":
        use_compile_cache(p.compile_cache)
        model = torch.compile(model)
    eval_model = model
    if rt.world > 1:
        device_ids = [rt.device.index] if rt.device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)

    micro_per_step = p.grad_accum * rt.world * ranks_here  # configured micro-batches per step, over the ranks
    tokens_per_step = p.batch_size * p.block_size * micro_per_step
    flops_per_token = raw.flops_per_token(p.block_size)
    logger.info("model: %s, %.2fM parameters, %s on %s x%d, %d tokens per step: micro-batch %d x grad_accum %d "
                "x %d process(es) x block_size %d", cfg, raw.num_params() / 1e6, rt.dtype, rt.device, rt.world,
                tokens_per_step, micro, grad_accum, rt.world, p.block_size)
    if ranks_here > 1:
        logger.info("one process trains the micro-batches of train.gpus = %d processes in turn (grad_accum %d x %d): "
                    "their global batch and windows, not bitwise their numbers", ranks_here, p.grad_accum, ranks_here)
    if after_oom is not None:
        logger.warning("%s (an earlier attempt ran out of memory at micro-batch %s on %s)",
                       batch_note(micro, grad_accum, p.batch_size), after_oom.get("micro_batch"), after_oom.get("device"))

    pending: list[tuple] = []  # steps whose train loss still sits on the device

    def my_micro_batches(windows: list) -> list:
        """This rank's micro-batches of a step's global list of windows: configured
        micro-batches r, r + W, r + 2W, ... (rank r of W), each cut into `pieces` of
        `micro` windows, so a smaller micro-batch trains each step on the same windows."""
        mine = [windows[m * p.batch_size : (m + 1) * p.batch_size] for m in range(rt.rank, micro_per_step, rt.world)]
        return [batch[j * micro : (j + 1) * micro] for batch in mine for j in range(pieces)]

    def flush():
        for s, loss, lr, seconds in pending:
            history.append({"step": s, "train_loss": loss.item(), "val_loss": math.nan, "lr": lr,
                            "tokens_seen": s * tokens_per_step, "seconds": seconds})
        pending.clear()

    def checkpoint():
        flush()
        if rt.is_main:
            state = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "key": key, "step": step,
                     "model": raw.state_dict(), "optimizer": optimizer.state_dict(),
                     "sampler_generator": sampler.generator.get_state(), "history": history, "best": best,
                     "seconds": prior_seconds + time.perf_counter() - t_start, "micro_batch": micro}
            with atomic_path(ckpt_path) as tmp:
                torch.save(state, tmp)
            keep_best_of_checkpoint(resume_dir, best["step"], logger)

    finishing = step + 1  # the step under way, which a stop signal lets end

    def stop_note() -> str:
        """Said on stderr when the signal comes (core.signals), not when the step ends."""
        return (f"finishing step {finishing} and saving its checkpoint, then ending "
                "(a second signal is ignored; kill -9 ends at once)")

    held = Held(stop_note)  # SIGTERM, SIGINT and SIGHUP, during the steps
    stop_group = dist.new_group(backend="gloo") if rt.world > 1 else None  # every rank makes it

    def stop_on(signum: int) -> None:
        """Save this step and end as `signum` ends the process (the module's docstring)."""
        unbind_from_launcher()  # torchrun ends at its third signal: the write goes on without it
        if not (step % p.checkpoint_interval == 0 or step == p.max_iters):  # not just written
            checkpoint()
        if stop_group is not None:  # no rank ends (torchrun then stops the rest) before rank 0 has written
            missing = wait_at_stop(stop_group)
            if missing is not None:
                logger.warning("not every rank reached the stop (%s): ending without them", missing)
        logger.warning("stopping on %s after step %d: checkpoint %s (a retry resumes from it)",
                       signal.Signals(signum).name, step, ckpt_path)
        held.end(signum)

    t_start = time.perf_counter()
    t_timed, overhead, timed_tokens = None, 0.0, 0
    model.train()
    try:  # a step that runs out of memory ends the attempt, telling the next one its micro-batch
        with held:
            while step < p.max_iters:
                finishing = step + 1
                lr = lr_at(step, p)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                # Dropout masks depend only on (seed, rank, step): nothing to restore on resume.
                torch.manual_seed(dropout_seed(p.seed, rt.rank, step))
                loss_sum = torch.zeros((), device=rt.device)
                for i, batch in enumerate(my_micro_batches(sampler.draw(p.batch_size * micro_per_step))):
                    x, y = read_windows(shards.train, batch, p.block_size, rt.device)
                    last = i == grad_accum - 1
                    no_sync = model.no_sync() if rt.world > 1 and not last else contextlib.nullcontext()
                    with no_sync:
                        with rt.autocast():
                            _, loss = model(x, y)
                        (loss / grad_accum).backward()
                    loss_sum += loss.detach()
                if p.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(raw.parameters(), p.grad_clip)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                train_loss = rt.all_reduce_(loss_sum / grad_accum) / rt.world
                pending.append((step, train_loss, lr, prior_seconds + time.perf_counter() - t_start))

                if t_timed is None:  # the first step warms up (allocator, compile): not timed
                    rt.sync()
                    t_timed = time.perf_counter()
                else:
                    timed_tokens += tokens_per_step

                if step % p.eval_interval == 0 or step == p.max_iters:
                    rt.sync()
                    t0 = time.perf_counter()
                    val = evaluate(eval_model, shards.val, fixed_val, micro, rt)
                    flush()
                    history[-1]["val_loss"] = val
                    if val < best["val_loss"]:
                        best = {"val_loss": val, "step": step}
                        if rt.is_main:
                            save_weights(raw, best_file(resume_dir, step))
                    logger.info("step %d: train %.4f val %.4f lr %.2e", step, history[-1]["train_loss"], val, lr)
                    overhead += time.perf_counter() - t0
                if step % p.checkpoint_interval == 0 or step == p.max_iters:
                    rt.sync()
                    t0 = time.perf_counter()
                    checkpoint()
                    stop_if_orphaned("found at a checkpoint")
                    overhead += time.perf_counter() - t0
                if signum := agreed_signal(held.received, stop_group):
                    stop_on(signum)
        flush()
        rt.sync()
        train_seconds = (time.perf_counter() - t_timed - overhead) if t_timed is not None else 0.0
        tokens_per_sec = timed_tokens / train_seconds if timed_tokens and train_seconds > 0 else None

        final_val = evaluate(eval_model, shards.val, val_windows(shards.val, p.block_size, "all", 0), micro, rt)
    except OOM_ERRORS as exc:
        error = out_of_memory_error(exc, p, micro, rt, settings)
        if error is exc:
            raise
        raise error from exc
    peaks = peak_memory_over_ranks(rt)
    metrics = {
        "best_val_loss": best["val_loss"],
        "best_step": best["step"],
        "final_val_loss": final_val,  # last weights, whole val split
        "final_train_loss": history[-1]["train_loss"] if history else None,
        "steps": step,
        "resumed_from_step": resumed_from,
        "train_tokens": train_tokens,
        "unsampled_train_tokens": sampler.unsampled_tokens,  # in shards too short for one window
        "tokens_per_step": tokens_per_step,
        # what ran: micro-batch x grad_accum (per process); smaller than configured after out-of-memory
        "micro_batch": micro,
        "grad_accum": grad_accum,
        "config_micro_batch": p.batch_size,
        "config_grad_accum": p.grad_accum,
        "tokens_per_second": tokens_per_sec,  # global, training steps only (no eval/checkpoint), this process
        "wall_seconds": time.perf_counter() - t_start,
        "train_seconds_total": history[-1]["seconds"] if history else 0.0,
        "flops_per_token": flops_per_token,
        "mfu": mfu(tokens_per_sec, flops_per_token, rt),
        "n_params": raw.num_params(),
        "device": str(rt.device),
        "dtype": str(rt.dtype).removeprefix("torch."),
        "world_size": rt.world,
        **peaks,  # the largest rank's peak GPU memory, each rank's by rank; null on the CPU
    }
    metrics = strict_json(metrics)
    stop_if_orphaned("found before writing the outputs")
    if rt.is_main:
        # What the run ran with (its GPU, torch, CUDA and cuDNN, the checkout), as the GPU
        # jobs of the other stages record it: the provenance job, on a CPU host (under
        # --use-conda in another environment), reads it from metrics.json. Not a metric:
        # sweeps skip it. Rank 0's alone: only it writes metrics.json.
        metrics["made_with"] = made_with("train", None, str(rt.device), torch.get_num_threads())
        write_outputs(out_dir, resume_dir, raw, p, cfg, shards, history, metrics, decode, sample_tokens, rt, tokenizer)
        if not keep_resume:
            remove_folder(resume_dir, resume_tree_top(resume_dir))
    if rt.world > 1:
        dist.barrier()
    logger.info("done: %s", json.dumps(metrics))
    return metrics


LOSSES = ("best_val_loss", "final_val_loss", "final_train_loss")


def peak_memory_over_ranks(rt: Runtime) -> dict:
    """This run's peak GPU memory (core.devices.peak_memory, MiB, since `_train` reset it):
    under torchrun each rank has its own GPU and its own peak, so `peak_gpu_mem_mib` and
    `peak_gpu_mem_reserved_mib` are the largest over the ranks (what each GPU must hold)
    and `peak_gpu_mem_mib_by_rank` lists every rank's allocated peak (rank 0 alone
    checkpoints and saves the weights). Null on the CPU (a list of nulls, one per rank: a list
    either way, never a metric a sweep could name). Every rank calls it (a collective)."""
    mine = peak_memory(rt.device)
    if mine["peak_gpu_mem_mib"] is None:
        return {**mine, "peak_gpu_mem_mib_by_rank": [None] * rt.world}
    table = torch.zeros((rt.world, len(PEAK_GPU_KEYS)), dtype=torch.float64, device=rt.device)
    table[rt.rank] = torch.tensor([mine[k] for k in PEAK_GPU_KEYS], dtype=torch.float64)
    rows = rt.all_reduce_(table).tolist()  # each rank fills its own row: the sum holds every rank's
    return {
        **{k: max(row[j] for row in rows) for j, k in enumerate(PEAK_GPU_KEYS)},
        "peak_gpu_mem_mib_by_rank": [row[0] for row in rows],
    }


def strict_json(metrics: dict) -> dict:
    """`metrics` as strict JSON: a number that is not finite becomes null, and `diverged`
    says whether a loss was one (a diverged run's NaN; a best_val_loss of inf: no finite
    validation loss was ever seen). Python's json writes NaN and Infinity, which jq,
    JavaScript and other strict parsers refuse; the sweep tables read null as no value."""
    diverged = any(isinstance(metrics[k], float) and not math.isfinite(metrics[k]) for k in LOSSES)
    finite = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in metrics.items()}
    return {**finite, "diverged": diverged}


def peak_bf16_tflops(device_name: str) -> float | None:
    """The PEAK_BF16_TFLOPS entry of a CUDA device name, or None. A model number matches
    whole: "L4" is not the L40's (181) nor "A10" the A10G's, as a plain substring was."""
    for key, peak in PEAK_BF16_TFLOPS.items():
        tail = r"(?![0-9A-Za-z])" if key[-1].isdigit() else ""  # "H100 SXM" matches "H100 SXM5"
        if re.search(rf"(?<![0-9A-Za-z]){re.escape(key)}{tail}", device_name):
            return peak
    return None


def mfu(tokens_per_sec: float | None, flops_per_token: int, rt: Runtime) -> float | None:
    """Model FLOP utilisation against the bf16 dense peak of the GPU (None on CPU or unknown GPUs)."""
    if rt.device.type != "cuda" or not tokens_per_sec:
        return None
    peak = peak_bf16_tflops(torch.cuda.get_device_name(rt.device))
    if peak is None:
        return None
    return tokens_per_sec * flops_per_token / (peak * 1e12 * rt.world)


def write_outputs(out_dir, resume_dir, raw, p, cfg, shards, history, metrics, decode, sample_tokens, rt, tokenizer=None):
    import pandas as pd

    from shardflow.train.hf_export import export_gpt2

    out_dir.mkdir(parents=True, exist_ok=True)
    save_weights(raw, out_dir / "last.safetensors")
    best_path = best_file(resume_dir, metrics["best_step"])
    if not best_path.exists():  # no finite validation loss was ever seen
        save_weights(raw, best_path)
    with atomic_path(out_dir / "best.safetensors") as tmp:
        shutil.copyfile(best_path, tmp)
    write_json(out_dir / "config.json", {
        "model": cfg.to_dict(), "train": dataclasses.asdict(p), "vocab_size": shards.vocab_size,
        "eot_id": shards.eot_id, "data": logical_path(shards.meta_path), "world_size": rt.world,
        "hf": "hf/ holds the best weights as a Hugging Face GPT-2 folder (and the tokenizer, when given)",
    })
    frame = pd.DataFrame(history, columns=["step", "train_loss", "val_loss", "lr", "tokens_seen", "seconds"])
    with atomic_path(out_dir / "losses.parquet") as tmp:
        frame.to_parquet(tmp, index=False)
    write_json(out_dir / "metrics.json", metrics)
    plot_losses(frame, out_dir / "loss.png")

    # The sample and the Hugging Face folder come from the best weights.
    best_model = load_model(out_dir, "best").to(rt.device)
    export_gpt2(best_model, out_dir / "hf", eot_id=shards.eot_id, bos_is_eot=shards.eot_in_data)
    if tokenizer is not None:  # AutoTokenizer.from_pretrained(hf) then encodes as the shards did
        tokenizer.save_for_transformers(out_dir / "hf", cfg.block_size, bos_is_eot=shards.eot_in_data)
    if not all(bool(torch.isfinite(t).all()) for t in best_model.state_dict().values()):
        # Diverged (a sweep's too-high learning rate): the run's losses and metrics stand as
        # written, but no text can be sampled from weights that are not finite.
        log.warning("the best weights are not finite (training diverged): no sample text")
        text = "(no sample: the weights are not finite; training diverged, see losses.parquet)"
    else:
        start = sample_start_id(shards)
        generator = torch.Generator(device=rt.device).manual_seed(p.seed)
        idx = torch.tensor([[start]], device=rt.device)
        with rt.autocast():
            out = best_model.generate(idx, sample_tokens, temperature=1.0, top_k=200, generator=generator)
        ids = out[0, 1:].tolist()
        text = decode(ids) if decode else " ".join(map(str, ids))
    with atomic_open(out_dir / "sample.txt", "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


def plot_losses(frame, path: Path) -> None:
    from shardflow.core.figures import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(7, 4))
    ax.plot(frame["step"], frame["train_loss"], label="train (batch)", alpha=0.6, linewidth=0.8)
    val = frame.dropna(subset=["val_loss"])
    ax.plot(val["step"], val["val_loss"], "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, str(path), dpi=120, crop=False)  # loss.png's canvas and bytes as they always were
