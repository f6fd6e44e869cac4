"""Speed-ups of the embedding forward that are chosen per device and model: shape
buckets (for torch.compile), packed batches (no padding) and fused kernels.

Each option is `auto` by default and each `auto` resolves to today's plain path on
the CPU, so a CPU run's bytes do not change:

- length buckets: `auto` = on with `compile` only (their point is few shapes to
  compile); `off`; or a list of widths.
- packing: `auto` = off: measured on an H100, packing did not beat length-sorted
  padded batches (see AUTO_PACKING_OFF). `on` packs with the best kernel there is (CUDA:
  flash-attn's varlen through transformers for decoders, else PyTorch's flex attention
  with a per-text BlockMask; the CPU: SDPA with a block-diagonal mask, the reference
  path for tests).
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


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated layers: the longest ModuleList whose children are all of
    one class (BERT's encoder.layer, a decoder's layers); [] if none.

    `compile` compiles one of these at a time ("regional" compilation): every layer runs
    the same code with its own weights as inputs, so one graph per shape serves all of
    them, and compiling takes about one layer's time instead of the whole stack's."""
    best: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) >= 2 and len(module) > len(best):
            if len({type(child) for child in module}) == 1:
                best = list(module)
    return best


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


# Measured on an H100 (benchmarks/gpu_issue13.sh, 2026-11-26): length-sorted padded
# batches leave 2-5 % padding, packing with flex attention gained nothing on the
# Qwen3-0.6B shape (1,035 vs 1,027 texts/s) and cost MiniLM a 20,000-text chunk
# (4.7 s padded, 8.3 s packed, flex compiling its kernel per job).
AUTO_PACKING_OFF = "auto = off: no gain measured over length-sorted padded batches; packing: on packs"


def resolve_packing(option: str, device: torch.device, mtype: str, attn_requested: str | None) -> Choice:
    """How (or whether) batches are packed: "off", "sdpa" (dense block-diagonal mask),
    "flash_attention_2" (varlen through position ids, decoders) or "flex_attention"."""
    if option == "off":
        return Choice("off", "embedding.packing is off")
    if option == "auto":
        return Choice("off", AUTO_PACKING_OFF)
    family = mtype in PACKABLE_ENCODERS or mtype in PACKABLE_DECODERS
    if not family:
        reason = f"model type {mtype!r} is not among the packable families"
        return Choice("off", reason + " (packing: on ignored)")
    if attn_requested not in (None, "sdpa"):
        return Choice("off", f"the model asks for attn_implementation={attn_requested!r}")
    if device.type == "cuda":
        if mtype in PACKABLE_DECODERS and _has("flash_attn"):
            return Choice("flash_attention_2", "CUDA, flash-attn installed: varlen kernels keyed by position ids")
        if flex_available():
            return Choice("flex_attention", "CUDA: flex attention with a per-text block mask")
        return Choice("sdpa", "packing: on without a varlen kernel: SDPA with a dense block-diagonal mask")
    return Choice("sdpa", f"packing: on, {device.type}: SDPA with a block-diagonal mask")


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


FLEX_BLOCK = 128  # flex attention's default block size (queries and keys)


class _SameText:
    """flex attention's mask_mod for a packed row: query q may see key kv when both
    belong to the same text (and kv <= q for a decoder). One class, so that every
    batch's mask_mod has the same code and only the captured tensor changes."""

    def __init__(self, seg: torch.Tensor, causal: bool):
        self.seg, self.causal = seg, causal

    def __call__(self, b, h, q, kv):
        ok = self.seg[q] == self.seg[kv]
        return ok & (kv <= q) if self.causal else ok


def flex_packed_mask(seg: torch.Tensor, causal: bool, block: int = FLEX_BLOCK):
    """flex attention's BlockMask for a packed row, built from the segment boundaries
    in O((T / block)^2): `create_block_mask` would evaluate the mask on all T x T pairs
    (gigabytes for a 32k-token pack, every batch).

    Texts are packed in order, so segment ids never decrease, except the filler run
    (-1) at the end; it is renumbered past the last text, where it still only sees
    itself. A block pair is empty when the two blocks' id ranges do not overlap (or,
    for a decoder, when the key block lies after the query block), full when both
    blocks hold one and the same text (and, for a decoder, the key block lies
    strictly before), else partial: only partial blocks evaluate the mask_mod."""
    from torch.nn.attention.flex_attention import BlockMask

    n = seg.numel()
    nb = max(1, -(-n // block))
    last = int(seg.max()) + 1 if n else 0
    ids = torch.where(seg < 0, torch.full_like(seg, last), seg)
    # Pad to whole blocks with one more id: those keys are past the row's end, which
    # flex attention masks anyway; the padded ids keep the mask_mod's indexing in range.
    ids = torch.cat([ids, ids.new_full((nb * block - n,), last + 1)]).contiguous()
    blocks = ids.view(nb, block)
    lo, hi = blocks[:, 0], blocks[:, -1]
    overlap = (lo[:, None] <= hi[None, :]) & (lo[None, :] <= hi[:, None])  # [q block, kv block]
    single = lo == hi
    full = single[:, None] & single[None, :] & (lo[:, None] == lo[None, :])
    if causal:
        order = torch.arange(nb, device=seg.device)
        overlap = overlap & (order[None, :] <= order[:, None])
        full = full & (order[None, :] < order[:, None])
    partial = overlap & ~full

    def as_indices(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        count = m.sum(-1, dtype=torch.int32)
        # Stable sort puts the chosen blocks first, in ascending order.
        idx = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return count[None, None].contiguous(), idx[None, None].contiguous()

    kv_num, kv_idx = as_indices(partial)
    full_num, full_idx = as_indices(full)
    kwargs = {"BLOCK_SIZE": block, "mask_mod": _SameText(ids, causal)}
    if "seq_lengths" in inspect.signature(BlockMask.from_kv_blocks).parameters:
        kwargs["seq_lengths"] = (n, n)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, **kwargs)


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
    A failure falls back to the unpatched model, logged; returns what happened.

    Only this model is patched. liger-kernel also rewrites the transformers modelling
    module for the whole process (its RMSNorm and MLP classes, its RoPE function), so
    that any model loaded later (sentence-transformers' reference in a check or a
    benchmark, an encoder with `kernels: off`) would run fused too: the module is put
    back as it was, and the functions it swapped are bound into this model's own
    forwards instead (see `_rebind_functions`)."""
    name = type(model).__module__
    modeling = sys.modules.get(name) if name.startswith("transformers.models.") else None
    before = dict(vars(modeling)) if modeling is not None else {}
    changed: dict[str, object] = {}
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
    finally:
        if modeling is not None:
            changed = _restore_module(modeling, before)
    functions = {k: v for k, v in changed.items() if inspect.isfunction(v)}
    rebound = _rebind_functions(model, modeling, functions) if functions else 0
    detail = f"; {', '.join(sorted(functions))} bound into {rebound} forwards" if functions else ""
    return Choice("liger", f"liger-kernel {liger_version()} applied to {mtype}{detail}")


def _restore_module(module, before: dict) -> dict[str, object]:
    """Put a module's namespace back as `before`; return what had been changed."""
    now = vars(module)
    changed = {k: v for k, v in now.items() if k in before and before[k] is not v}
    added = [k for k in now if k not in before]
    for k in changed:
        setattr(module, k, before[k])
    for k in added:
        changed[k] = now[k]
        delattr(module, k)
    return changed


def _rebind_functions(model: torch.nn.Module, modeling, functions: dict[str, object]) -> int:
    """Give each submodule whose forward (defined in `modeling`) calls one of `functions`
    by its global name a forward of its own that sees the replacement: the same code,
    with the module's globals plus the replacements. Returns how many were bound."""
    import types

    count = 0
    for sub in model.modules():
        inner = inspect.unwrap(type(sub).forward)  # past decorators, to the code itself
        if not inspect.isfunction(inner) or inner.__globals__ is not vars(modeling):
            continue
        names = functions.keys() & set(inner.__code__.co_names)
        if not names:
            continue
        scope = dict(inner.__globals__)
        scope.update({k: functions[k] for k in names})
        forward = types.FunctionType(inner.__code__, scope, inner.__name__, inner.__defaults__, inner.__closure__)
        forward.__kwdefaults__ = inner.__kwdefaults__
        sub.forward = types.MethodType(forward, sub)
        count += 1
    return count
