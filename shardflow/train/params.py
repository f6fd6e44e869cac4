"""What a training run is given: `TrainParams`, the `train` section of the config.

Kept apart from the trainer (which imports torch) so that the workflow can check a
config's training settings when it is parsed, before any job runs: a contradiction
such as n_embd not a multiple of n_head stops the parse, naming the keys, instead of
failing the train job after the data preparation (shardflow.workflow.plan.train_settings).
"""

from __future__ import annotations

from dataclasses import dataclass


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
    dtype: str = "auto"  # auto (bf16 on CUDA if supported, else fp32) | float32 | bfloat16
    compile: bool = False  # torch.compile, CUDA only
    compile_cache: str | None = None  # torch's compile cache folder, shared by jobs (None: torch's own)
    device: str = "auto"  # auto | cpu | cuda

    def __post_init__(self):
        if self.eval_windows != "all" and not (isinstance(self.eval_windows, int) and self.eval_windows > 0):
            raise ValueError(f"eval_windows must be a positive int or 'all', got {self.eval_windows!r}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"dtype must be auto, float32 or bfloat16, got {self.dtype!r}")
        for key in ("batch_size", "block_size", "grad_accum", "max_iters", "eval_interval", "checkpoint_interval"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.warmup_iters < 0:
            raise ValueError(f"warmup_iters must be >= 0, got {self.warmup_iters}")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) must be <= lr ({self.lr})")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")

    @property
    def decay_iters(self) -> int:
        return self.max_iters if self.lr_decay_iters is None else self.lr_decay_iters

    def model_config(self, vocab_size: int):
        from shardflow.train.model import GPTConfig

        return GPTConfig(vocab_size=vocab_size, block_size=self.block_size, n_layer=self.n_layer,
                         n_head=self.n_head, n_embd=self.n_embd, dropout=self.dropout, bias=self.bias)
