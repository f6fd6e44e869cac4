"""What a training run is given: `TrainParams`, the `train` section of the config.

Kept apart from the trainer (which imports torch) so that the workflow can check a
config's training settings when it is parsed, before any job runs: a contradiction
such as n_embd not a multiple of n_head stops the parse, naming the keys, instead of
failing the train job after the data preparation (shardflow.workflow.plan.train_settings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shardflow.core.config import recorded
from shardflow.core.fields import check_device, check_field_types, whole_floats_as_ints


@dataclass(frozen=True)
class TrainParams:
    # model (vocab_size comes from the shards' metadata)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    # batch: batch_size windows of block_size tokens per micro-batch, grad_accum micro-batches per step and rank
    batch_size: int = 12
    block_size: int = 64
    grad_accum: int = 1
    # optimiser: AdamW, linear warmup then cosine decay to min_lr at lr_decay_iters
    max_iters: int = 2000
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    lr_decay_iters: int | None = None  # None: max_iters
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # max global gradient norm; 0 disables
    # evaluation and checkpoints
    eval_interval: int = 250
    eval_windows: int | str = 200  # fixed val windows, or "all": the whole val split
    checkpoint_interval: int = 250
    # execution
    seed: int = 1337
    dtype: str = "auto"  # auto (bf16 where the GPU runs it natively, else fp32) | float32 | bfloat16
    compile: bool = False  # torch.compile, CUDA only
    compile_cache: str | None = None  # torch's compile cache folder, shared by jobs (None: torch's own)
    device: str = "auto"  # auto | cpu | cuda

    def __post_init__(self):
        # 2000.0 (JSON Schema's "integer" takes it) is 2000: torch sizes and seeds take no float.
        whole_floats_as_ints(self)
        if self.eval_windows != "all" and not (isinstance(self.eval_windows, int) and self.eval_windows > 0):
            raise ValueError(f"eval_windows must be a positive int or 'all', got {self.eval_windows!r}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"dtype must be auto, float32 or bfloat16, got {self.dtype!r}")
        # Before the comparisons below: a string there is Python's bare TypeError, and
        # compile='false' (a true string) or bias=0 were kept as they came.
        check_field_types(self)
        # Any string was kept until torch.device refused it in the trainer ('gpu'). After
        # the type check: None stays its TypeError.
        check_device(self.device)
        # torch takes p = 1 and drops everything: the logits never see the input and the
        # run trains a unigram model without a word. Above 1 nn.Dropout fails, but only
        # when the job builds the model.
        if not 0 <= self.dropout < 1:
            raise ValueError(
                f"dropout must be in [0, 1), got {self.dropout}: at 1 every activation is dropped in training"
            )
        for key in ("batch_size", "block_size", "grad_accum", "max_iters", "eval_interval", "checkpoint_interval"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.warmup_iters < 0:
            raise ValueError(f"warmup_iters must be >= 0, got {self.warmup_iters}")
        # As the schema says; run by hand (python -m shardflow.train) nothing else checks:
        # a negative grad_clip turned clipping off silently (0 is off).
        for key in ("grad_clip", "weight_decay"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) must be <= lr ({self.lr})")
        # A decay that ends where the warmup ends, or before, has no cosine: the rate
        # climbs to just under lr and then drops to min_lr in one step (lr_at), so lr
        # is never used (nanoGPT's get_lr divides by zero at equality). null follows
        # max_iters: a run of max_iters <= warmup_iters stops inside the warmup, where
        # every step's rate is the one any schedule with that warmup gives it (a short
        # measuring run), so it stays accepted.
        if self.lr_decay_iters is not None and self.lr_decay_iters <= self.warmup_iters:
            raise ValueError(
                f"lr_decay_iters ({self.lr_decay_iters}) must be above warmup_iters ({self.warmup_iters}): the "
                "cosine decay to min_lr would end no later than the warmup, so the rate would drop from the warmup "
                "straight to min_lr and never reach lr; set lr_decay_iters above warmup_iters (nanoGPT: max_iters), "
                "or null (max_iters)"
            )
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")

    @property
    def decay_iters(self) -> int:
        return self.max_iters if self.lr_decay_iters is None else self.lr_decay_iters

    def model_config(self, vocab_size: int):
        from shardflow.train.model import GPTConfig

        return GPTConfig(vocab_size=vocab_size, block_size=self.block_size, n_layer=self.n_layer,
                         n_head=self.n_head, n_embd=self.n_embd, dropout=self.dropout, bias=self.bias)


def batch_note(micro_batch: int, grad_accum: int, config_micro_batch: int) -> str:
    """How a run's batch differs from its config (the trainer's log, the report): the
    micro-batch it trained with after running out of memory, and its grad_accum."""
    return (
        f"micro-batch {micro_batch} (config {config_micro_batch}) x grad_accum {grad_accum} after out-of-memory: "
        f"the same global batch; numbers not bitwise those of micro-batch {config_micro_batch}"
    )


def job_params(train: Mapping, device: str) -> dict:
    """The train job's params: the `train` section (`train`, a sweep job's point and seed
    applied) as Snakemake records it and the trainer gets it (`--params`), under
    `gpu_jobs.device` (`device`). Left out: core.config's untracked keys (passed on their
    own) and sample_tokens (a param of its own); gpus where it is 1 (the launcher's --gpus
    decides; it is there for the record, since the global batch is batch_size x
    grad_accum x gpus, and at 1 it is left out, as before it was recorded, so that no
    finished job reran on upgrade). compile is false where the device is `cpu`: the
    trainer compiles on CUDA only, so there the key changes no output, and recorded as
    given it reran finished training. Under `auto` the record cannot tell a CPU job from
    a GPU one (a dry run or a cluster run counts as a GPU run), so it stays as given."""
    p = {k: v for k, v in recorded("train", train).items() if k not in ("gpus", "sample_tokens")}
    if train["gpus"] != 1:
        p["gpus"] = train["gpus"]
    if device == "cpu":
        p["compile"] = False
    return p
