"""Speed-ups of the embedding forward that are chosen per device and model: shape
buckets (for torch.compile), packed batches (no padding) and fused kernels.

Each option is `auto` by default and each `auto` resolves to today's plain path on
the CPU, so a CPU run's bytes do not change:

- length buckets: `auto` = on with `compile` only (their point is few shapes to
  compile); `off`; or a list of widths.
- packing: `auto` = on only where a variable-length attention kernel exists for the
  model (CUDA: flash-attn's varlen through transformers for decoders, else PyTorch's
  flex attention with a document mask); `on` also packs on the CPU, through SDPA with
  a block-diagonal mask (as fast as padding at best: the reference path for tests).
- kernels: `auto` = the `liger-kernel` package's fused RMSNorm / RoPE / SwiGLU when it
  is installed, the device is CUDA and the model family is one it patches; `off`;
  `liger` = the same, but a missing piece is logged as a warning.

Every decision comes with its reason, for the log and the job's stats.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from shardflow.core.batching import default_length_buckets

# Families with fused-kernel patches in liger-kernel (model_type -> apply function suffix).
LIGER_FAMILIES = {
    "qwen3": "qwen3",
    "qwen2": "qwen2",
    "llama": "llama",
    "mistral": "mistral",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3_text",
}
# Families whose transformers implementation takes position ids and a 4-D attention
# mask (or flex attention's BlockMask) as given, so a packed row attends within texts.
PACKABLE_ENCODERS = {"bert", "roberta", "xlm-roberta", "camembert", "electra"}
PACKABLE_DECODERS = {"qwen3", "qwen2", "llama", "mistral", "gemma", "gemma2"}


@dataclass(frozen=True)
class Choice:
    """A resolved option: what runs and why."""

    value: str  # "off", or what is on: a backend name, "liger", ...
    reason: str

    @property
    def on(self) -> bool:
        return self.value != "off"


def model_type(transformer_folder: str | Path) -> str:
    """`model_type` from config.json (cheap: no weights)."""
    cfg = json.loads((Path(transformer_folder) / "config.json").read_text(encoding="utf-8"))
    text = cfg.get("text_config") or {}
    return str(text.get("model_type") or cfg.get("model_type") or "")


# --------------------------------------------------------------------------- buckets


def resolve_buckets(option, compile_: bool, max_length: int) -> tuple[int, ...]:
    """The padded widths of a run; () means none (each batch as wide as its longest row)."""
    if option == "off" or (option == "auto" and not compile_):
        return ()
    if option == "auto":
        return default_length_buckets(max_length)
    widths = sorted({min(int(b), max_length) for b in option})
    if widths[-1] < max_length:
        widths.append(max_length)
    return tuple(widths)


# --------------------------------------------------------------------------- packing


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # imported without a spec (a stand-in module)
        return module in sys.modules


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import create_block_mask  # noqa: F401
    except ImportError:
        return False
    return _has("triton")


def resolve_packing(option: str, device: torch.device, mtype: str, attn_requested: str | None) -> Choice:
    """How (or whether) batches are packed: "off", "sdpa" (dense block-diagonal mask),
    "flash_attention_2" (varlen through position ids, decoders) or "flex_attention"."""
    if option == "off":
        return Choice("off", "embedding.packing is off")
    family = mtype in PACKABLE_ENCODERS or mtype in PACKABLE_DECODERS
    if not family:
        reason = f"model type {mtype!r} is not among the packable families"
        if option == "on":
            reason += " (packing: on ignored)"
        return Choice("off", reason)
    if attn_requested not in (None, "sdpa"):
        return Choice("off", f"the model asks for attn_implementation={attn_requested!r}")
    if device.type == "cuda":
        if mtype in PACKABLE_DECODERS and _has("flash_attn"):
            return Choice("flash_attention_2", "CUDA, flash-attn installed: varlen kernels keyed by position ids")
        if flex_available():
            return Choice("flex_attention", "CUDA: flex attention with a per-text block mask")
        if option == "on":
            return Choice("sdpa", "packing: on without a varlen kernel: SDPA with a dense block-diagonal mask")
        return Choice("off", "no variable-length attention kernel on this CUDA install")
    if option == "on":
        return Choice("sdpa", f"packing: on, {device.type}: SDPA with a block-diagonal mask")
    return Choice("off", f"no variable-length attention kernel on {device.type}")


def segment_ids(lengths: torch.Tensor, total: int) -> torch.Tensor:
    """[total] int: the text each packed token belongs to (tokens past sum(lengths): -1)."""
    seg = torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)
    if seg.numel() < total:
        seg = torch.cat([seg, seg.new_full((total - seg.numel(),), -1)])
    return seg


def dense_packed_mask(seg: torch.Tensor, causal: bool) -> torch.Tensor:
    """[1, 1, T, T] bool, True where query i may attend key j: same text (and j <= i
    for a decoder). Filler tokens (segment -1) attend each other, never a text."""
    mask = seg[:, None] == seg[None, :]
    if causal:
        mask = mask & torch.ones_like(mask).tril()
    return mask[None, None]


def flex_packed_mask(seg: torch.Tensor, causal: bool):
    from torch.nn.attention.flex_attention import create_block_mask

    seg = seg.contiguous()

    def same_text(b, h, q, kv):
        ok = seg[q] == seg[kv]
        return ok & (kv <= q) if causal else ok

    n = seg.numel()
    return create_block_mask(same_text, B=None, H=None, Q_LEN=n, KV_LEN=n, device=seg.device)


def repad(hidden: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed states [1, T, D] -> right-padded [n, max_len, D] and its mask [n, max_len],
    so pooling runs exactly as on a padded batch."""
    n, width = len(lengths), int(lengths.max())
    cols = torch.arange(width, device=lengths.device)
    keep = cols[None, :] < lengths[:, None]
    out = hidden.new_zeros((n, width, hidden.shape[-1]))
    out[keep] = hidden[0, : int(lengths.sum())]
    return out, keep.to(torch.int64)


# --------------------------------------------------------------------------- fused kernels


def liger_version() -> str | None:
    if not _has("liger_kernel"):
        return None
    try:
        from importlib.metadata import version

        return version("liger-kernel")
    except Exception:  # noqa: BLE001 - an unusual install still counts as present
        return "unknown"


def resolve_kernels(option: str, device: torch.device, mtype: str) -> Choice:
    """Whether liger-kernel's fused kernels are applied, and why (not)."""
    if option == "off":
        return Choice("off", "embedding.kernels is off")
    if device.type != "cuda":
        return Choice("off", f"fused kernels need CUDA (device is {device.type})")
    if mtype not in LIGER_FAMILIES:
        return Choice("off", f"liger-kernel does not patch model type {mtype!r}")
    ver = liger_version()
    if ver is None:
        return Choice("off", "the optional package liger-kernel is not installed")
    return Choice("liger", f"liger-kernel {ver}: fused RMSNorm, RoPE and MLP for {mtype}")


def apply_kernels(model, mtype: str, logger: logging.Logger) -> Choice:
    """Patch a loaded model with liger-kernel (inference pieces only: no loss kernels).
    A failure falls back to the unpatched model, logged; returns what happened."""
    try:
        mp = importlib.import_module("liger_kernel.transformers.monkey_patch")
        fn = getattr(mp, "MODEL_TYPE_TO_APPLY_LIGER_FN", {}).get(mtype) or getattr(
            mp, f"apply_liger_kernel_to_{LIGER_FAMILIES[mtype]}"
        )
        wanted = {
            "rope": True,
            "rms_norm": True,
            "swiglu": True,
            "geglu": True,
            "cross_entropy": False,
            "fused_linear_cross_entropy": False,
            "model": model,
        }
        accepted = inspect.signature(fn).parameters
        fn(**{k: v for k, v in wanted.items() if k in accepted})
    except Exception as exc:  # noqa: BLE001 - an optional speed-up never stops a run
        logger.warning("fused kernels: liger-kernel failed on %s (%s: %s); running unfused", mtype, type(exc).__name__, exc)
        return Choice("off", f"liger-kernel failed: {type(exc).__name__}: {exc}")
    return Choice("liger", f"liger-kernel {liger_version()} applied to {mtype}")
