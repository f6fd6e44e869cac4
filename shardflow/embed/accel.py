"""Speed-ups of the embedding forward that are chosen per device and model: shape
buckets (for torch.compile), packed batches (no padding) and fused kernels.

Each option is `auto` by default and each `auto` resolves to today's plain path on
the CPU, so a CPU run's bytes do not change:

- length buckets: `auto` = on with a compile mode that replays CUDA graphs only
  (`reduce-overhead`, `max-autotune`: a graph per shape needs few shapes); otherwise
  `compile` traces dynamic shapes, so batches keep their own width (buckets computed
  11-35 % more tokens than length-sorted batches: benchmarks/bench_bucket_padding.py);
  `on` = the default widths whatever the mode; `off`; or a list of widths.
- packing: `auto` = off: measured on an H100, packing did not beat length-sorted
  padded batches (see AUTO_PACKING_OFF). `on` packs with the best kernel there is (CUDA:
  flash-attn's varlen through transformers for decoders, else PyTorch's flex attention
  with a per-text BlockMask; the CPU: SDPA with a block-diagonal mask, the reference
  path for tests).
- kernels: `auto` = the `liger-kernel` package's fused RMSNorm / RoPE / SwiGLU when it
  is installed, the device is CUDA and the model family is one it patches; `off`;
  `liger` = the same, but a missing piece is logged as a warning.
- padding mask: `auto` = a causal decoder's padded batches run on CUDA without their
  padding mask, padded on the right (no real token attends a pad), so SDPA can run its
  flash kernel; `off` = the same on any device; `on` = the mask always. Where no layer
  would get a mask anyway, the model's SDPA runs under a name transformers builds no
  mask for, so its mask builder (a sync per forward on CUDA) does not run.
- attention bias: `on` = an encoder's padded batches pass their mask ready-made, 4-D,
  so transformers does not read it back to the host (a sync per forward); `auto` = on
  for CUDA (provisionally), off on the CPU.
- CUDA graphs: `on` = each full padded batch replays a CUDA graph of its shape, with
  fine bucket widths so that shapes repeat (shardflow.embed.graphs); `auto` = on for the
  BERT family on CUDA when its mask goes 4-D (measured on the MiniLM-L6 shape), off for
  others.
- cuDNN attention: `auto` = SDPA runs without cuDNN's kernel on CUDA where batches pass
  a padding mask (a plan per new shape costs more than the kernel gains); `on`; `off`.

Every decision comes with its reason, for the log and the job's stats.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import logging
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from shardflow.core.batching import default_length_buckets, graph_length_buckets

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
# Families whose positions are rotary: attention sees only the distance between two
# tokens, so left padding, which moves all of a text's tokens by the same amount, leaves its
# vector as it is (within rounding). Any other model may number positions from the row's
# first slot, pads included (BERT's absolute position embeddings), and is padded on the
# right whatever side its tokenizer pads (`Encoder.setup_accel`).
ROTARY_FAMILIES = {"qwen3", "qwen2", "llama", "mistral", "gemma", "gemma2", "gemma3_text"}


@dataclass(frozen=True)
class Choice:
    """A resolved option: what runs and why."""

    value: str  # "off", or what is on: a backend name, "liger", ...
    reason: str

    @property
    def on(self) -> bool:
        return self.value != "off"


def model_config(transformer_folder: str | Path) -> dict:
    """config.json (its text model's part, for a multimodal one); cheap: no weights."""
    cfg = json.loads((Path(transformer_folder) / "config.json").read_text(encoding="utf-8"))
    text = cfg.get("text_config") or {}
    return {**cfg, **text} if text.get("model_type") else cfg


def model_type(config: dict) -> str:
    """`model_type` of a config (as `model_config` reads it, or a loaded config's vars)."""
    return str(config.get("model_type") or "")


# --------------------------------------------------------------------------- buckets


# torch.compile modes that capture CUDA graphs: one per input shape, so they want few shapes.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def resolve_buckets(
    option, compile_: bool, max_length: int, compile_mode: str = "auto", graphs: bool = False
) -> tuple[int, ...]:
    """The padded widths of a run; () means none (each batch as wide as its longest row).
    `auto`: with `graphs` (embedding.cuda_graphs on), the fine widths of
    `graph_length_buckets`; else the default widths for a compile mode with CUDA graphs
    (see CUDA_GRAPH_MODES) only. `on`: the default widths always."""
    if option == "auto" and graphs:
        return graph_length_buckets(max_length)
    if option == "off" or (option == "auto" and not (compile_ and compile_mode in CUDA_GRAPH_MODES)):
        return ()
    if option in ("auto", "on"):
        return default_length_buckets(max_length)
    widths = sorted({min(int(b), max_length) for b in option})
    if widths[-1] < max_length:
        widths.append(max_length)
    return tuple(widths)


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated layers: the ModuleList of one class with as many children
    as the config's num_hidden_layers (BERT's encoder.layer, a decoder's layers), else
    the longest such list; [] if none.

    `compile` compiles one of these at a time ("regional" compilation): every layer runs
    the same code with its own weights as inputs, so one graph per shape serves all of
    them, and compiling takes about one layer's time instead of the whole stack's."""
    layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    best: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) >= 2 and len({type(c) for c in module}) == 1:
            if len(module) == layers:  # the layer stack itself (not, say, a longer list of experts)
                return list(module)
            if len(module) > len(best):
                best = list(module)
    return best


# Where `cuda_graphs: auto` turns graphs on (CUDA only): the BERT family, whose small
# forwards leave the GPU waiting on the host's kernel launches (measured on the MiniLM-L6
# shape only; a large, GPU-bound encoder may lose what the Qwen3 shape did). On an H200 (stop 31,
# docs/gpu.md) the MiniLM shape ran 1.29x the texts/s on the demo set with graphs, and a
# 20,000-text job's encode took 0.83x the time; the Qwen3-0.6B shape with liger kernels
# (GPU-bound) ran at 44.3-44.7 % of peak with them against 44.6-44.9 % without.
GRAPH_AUTO_FAMILIES = PACKABLE_ENCODERS


def resolve_cuda_graphs(
    option: str, device: torch.device, compile_: bool, packing: Choice, mtype: str, bias: Choice
) -> Choice:
    """Whether full padded batches replay a CUDA graph of their shape ("on"; see
    shardflow.embed.graphs). `auto`: on for the model types of GRAPH_AUTO_FAMILIES (model
    type `mtype`) whose mask goes in 4-D (`bias`, the resolved attention_bias: the 2-D
    mask's builder reads from the device in every forward, which a graph cannot hold;
    graphs were measured with the 4-D mask only), off for others; `on`; `off`. Either way
    only on CUDA, without compile and without packing."""
    if option == "off":
        return Choice("off", "embedding.cuda_graphs is off")
    if option == "auto" and mtype not in GRAPH_AUTO_FAMILIES:
        return Choice(
            "off",
            f"auto = on for the BERT family only (model type {mtype or 'unknown'!r}: no gain measured, "
            "docs/gpu.md); on replays a graph per batch shape",
        )
    if device.type != "cuda":
        return Choice("off", f"CUDA graphs need a CUDA device (device is {device.type})")
    if compile_:
        return Choice("off", "compile is on: its compile_mode reduce-overhead captures graphs of its own")
    if packing.on:
        return Choice("off", "packed batches: each has its own text boundaries, a shape no graph repeats")
    if option == "auto" and not bias.on:
        return Choice(
            "off",
            f"auto: the mask goes in 2-D (attention_bias off: {bias.reason}), whose builder "
            "reads from the device in every forward; on replays a graph per batch shape",
        )
    if option == "auto":
        return Choice(
            "on",
            f"auto = on for the BERT family ({mtype}) on CUDA: one graph per full batch shape, "
            "captured after its first batch",
        )
    return Choice("on", "embedding.cuda_graphs is on: one graph per full batch shape, captured after its first batch")


# --------------------------------------------------------------------------- packing


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # imported without a spec (a stand-in module)
        return module in sys.modules


def flex_available() -> bool:
    """flex attention with BlockMask.from_kv_blocks(seq_lengths=...) (torch >= 2.6:
    packed rows are not whole blocks), and triton to compile it."""
    try:
        from torch.nn.attention.flex_attention import BlockMask
    except ImportError:
        return False
    return "seq_lengths" in inspect.signature(BlockMask.from_kv_blocks).parameters and _has("triton")


# Measured on an H100 (benchmarks/gpu_issue13.sh, 2026-11-26): length-sorted padded
# batches leave 2-5 % padding, packing with flex attention gained nothing on the
# Qwen3-0.6B shape (1,035 vs 1,027 texts/s) and cost MiniLM a 20,000-text chunk
# (4.7 s padded, 8.3 s packed, flex compiling its kernel per job). Measured again after
# the flex path's fixes (stop 19): Qwen3 fused 34.0 % of peak packed against 40.8 %
# padded (mask skipped); MiniLM demo 1.45M tokens/s packed against 1.92M padded.
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


def segment_ids(lengths: np.ndarray, total: int) -> np.ndarray:
    """[total] int64, on the host: the text each packed token belongs to (tokens past
    sum(lengths), the filler run: -1)."""
    seg = np.full(total, -1, dtype=np.int64)
    real = int(lengths.sum())
    seg[:real] = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
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
    carry the same id (one text, or one block of filler; and kv <= q for a decoder).
    One class, so that every
    batch's mask_mod has the same code and only the captured tensor changes."""

    def __init__(self, seg: torch.Tensor, causal: bool):
        self.seg, self.causal = seg, causal

    def __call__(self, b, h, q, kv):
        ok = self.seg[q] == self.seg[kv]
        return ok & (kv <= q) if self.causal else ok


def flex_packed_mask(lengths: np.ndarray, total: int, causal: bool, device: torch.device, block: int = FLEX_BLOCK):
    """flex attention's BlockMask for a packed row of `total` tokens holding texts of
    `lengths` (then filler), built on the host from the text boundaries in
    O((T / block)^2) and copied without waiting for the device: `create_block_mask`
    would evaluate the mask on all T x T pairs (gigabytes for a 32k-token pack).

    Every token gets an id that never decreases along the row: its text's index; for
    the filler run, one id per block (filler attends only filler of its own block, so
    a pack padded up to its bucket costs one block per filler block, not filler^2);
    past the row's end, one more id (flex attention masks those keys anyway; they keep
    the mask_mod's indexing in range). A block pair is empty when the two blocks' id
    ranges do not overlap (or, for a decoder, when the key block lies after the query
    block), full when both blocks hold one and the same id (and, for a decoder, the key
    block lies strictly before), else partial: only partial blocks evaluate the mask_mod."""
    from torch.nn.attention.flex_attention import BlockMask

    real = int(lengths.sum())
    nb = max(1, -(-total // block))
    ids = np.empty(nb * block, dtype=np.int64)
    ids[:total] = segment_ids(lengths, total)
    ids[real:total] = len(lengths) + np.arange(real, total, dtype=np.int64) // block  # filler: an id per block
    ids[total:] = (ids[total - 1] + 1) if total else 0
    blocks = ids.reshape(nb, block)
    lo, hi = blocks[:, 0], blocks[:, -1]
    overlap = (lo[:, None] <= hi[None, :]) & (lo[None, :] <= hi[:, None])  # [q block, kv block]
    single = lo == hi
    full = single[:, None] & single[None, :] & (lo[:, None] == lo[None, :])
    if causal:
        order = np.arange(nb)
        overlap &= order[None, :] <= order[:, None]
        full &= order[None, :] < order[:, None]
    partial = overlap & ~full

    def as_indices(m: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        count = m.sum(-1).astype(np.int32)
        idx = np.argsort(~m, axis=-1, kind="stable").astype(np.int32)  # chosen blocks first, ascending
        return (
            torch.from_numpy(count[None, None]).to(device, non_blocking=True),
            torch.from_numpy(np.ascontiguousarray(idx[None, None])).to(device, non_blocking=True),
        )

    kv_num, kv_idx = as_indices(partial)
    full_num, full_idx = as_indices(full)
    mask_mod = _SameText(torch.from_numpy(ids).to(device, non_blocking=True), causal)
    return BlockMask.from_kv_blocks(
        kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(total, total)
    )


def position_offset(model: torch.nn.Module) -> int:
    """What a packed row's position ids (each text's counted from 0) need added for this
    model: pad_token_id + 1 for the RoBERTa family (RoBERTa, XLM-R, CamemBERT), whose
    embeddings number a text's positions from there, fairseq's way, when not given them
    (and keep that pad id as `padding_idx`); 0 for the rest (BERT and ELECTRA count from
    0, and a decoder's embeddings are no `embeddings` module)."""
    embeddings = getattr(model, "embeddings", None)
    pad = getattr(embeddings, "padding_idx", None)
    if pad is None or not hasattr(embeddings, "position_embeddings"):
        return 0
    return int(pad) + 1


def repad(hidden: torch.Tensor, lengths: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed states [1, T, D] -> right-padded [n, max_len, D] and its mask [n, max_len],
    so pooling runs exactly as on a padded batch. Positions come from the host's
    lengths: nothing waits for the device."""
    n, width, real = len(lengths), int(lengths.max()), int(lengths.sum())
    keep = np.arange(width)[None, :] < lengths[:, None]
    rows = torch.from_numpy(np.flatnonzero(keep)).to(hidden.device, non_blocking=True)  # packed order
    out = hidden.new_zeros((n * width, hidden.shape[-1]))
    out.index_copy_(0, rows, hidden[0, :real])
    mask = torch.from_numpy(keep.astype(np.int64)).to(hidden.device, non_blocking=True)
    return out.view(n, width, hidden.shape[-1]), mask


# --------------------------------------------------------------------------- the padding mask


def causal_config(mtype: str, cfg: dict) -> bool:
    """Whether config.json describes a decoder whose every token attends only to the
    tokens before it (a family in PACKABLE_DECODERS, not turned bidirectional)."""
    return (
        mtype in PACKABLE_DECODERS
        and not cfg.get("use_bidirectional_attention", False)
        and cfg.get("is_causal", True) is not False
    )


def resolve_padding_mask(
    option: str, device: torch.device, mtype: str, cfg: dict, attn_requested: str | None, packing: Choice
) -> Choice:
    """Whether a padded batch runs without its padding mask ("skip") or passes it ("off").

    In a causal decoder no token attends to a later one, so with the padding after each
    text (right padding) no real token ever sees a pad: the mask changes nothing a
    pooled embedding reads. Without it, transformers hands SDPA `is_causal=True` and no
    mask, so SDPA may pick its flash kernel and run grouped-query attention without
    copying keys and values per head (with a mask: the memory-efficient kernel, after a
    copy). `auto` skips it on CUDA with SDPA; `off` skips it wherever the model is
    causal (the CPU too); `on` always passes it. Measured on an H100 (docs/gpu.md):
    the Qwen3-0.6B shape with liger kernels, 40.8 % of peak skipped, 31.0 % passed."""
    if option == "on":
        return Choice("off", "embedding.padding_mask is on: every padded batch passes its mask")
    if packing.on:
        return Choice("off", "packed batches have no padding")
    if not causal_config(mtype, cfg):
        reason = f"model type {mtype!r} is not a causal decoder: its padding must be masked"
        return Choice("off", reason + (" (padding_mask: off ignored)" if option == "off" else ""))
    if option == "auto" and device.type != "cuda":
        return Choice("off", f"auto = skipped on CUDA only ({device.type}: the plain path)")
    if option == "auto" and attn_requested not in (None, "sdpa"):
        return Choice("off", f"auto: the model asks for attn_implementation={attn_requested!r}")
    return Choice(
        "skip", "causal decoder: right padding, no real token attends a pad; SDPA runs is_causal without a mask"
    )


def confirm_causal(model: torch.nn.Module, choice: Choice) -> Choice:
    """`choice`, if the loaded model is causal: its config as loaded (config.json plus
    any `config_kwargs` of the model's sentence-transformers config; transformers'
    mask builders read `is_causal` there) and every attention module say so. Else the
    mask is passed after all."""
    if not choice.on:
        return choice
    config = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if config is not None and not causal_config(model_type(vars(config)), vars(config)):
        return Choice("off", "the loaded model's config makes attention bidirectional: padding masked")
    flags = [m.is_causal for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "is_causal")]
    if flags and all(flags):
        return choice
    return Choice("off", "the loaded model's attention modules are not all causal: padding masked")


# transformers' own SDPA function, registered under a name of ours (AttentionInterface):
# a name without a mask function, for which transformers builds no mask.
UNMASKED_SDPA = "shardflow_sdpa_unmasked"


def unmasked_attention(model: torch.nn.Module, max_width: int | None) -> tuple[bool, str]:
    """Switch a causal decoder whose padding mask is skipped to attention that builds no
    mask, where that changes no output byte; whether it did, and why.

    Given None, transformers' mask builder still runs: it checks the position ids for
    texts packed into one row, with a `.all()` in an `if` (`masking_utils`, 5.24), and on
    CUDA that waits for the device to finish all queued work, a sync at the start of
    every forward. It then returns None, and every layer runs SDPA with `is_causal`.
    For an attention implementation that has no mask function registered, transformers
    skips the builder and passes None (its route for attention that needs no mask). So
    the model runs transformers' SDPA function under a name of ours (`UNMASKED_SDPA`):
    the same kernels, given the same None, with no builder. Only where every layer's
    mask would be None anyway: SDPA loaded, every layer attending in full or through a
    sliding window at least as wide as a batch can be (`max_width`; None: no limit), and
    confirmed on the loaded model: a probe batch gives the same output bytes both ways.
    Else the model is left as loaded."""
    config = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    impl = getattr(config, "_attn_implementation", None)
    if impl != "sdpa":
        return False, f"attention is {impl!r}, not SDPA: transformers builds its mask"
    types_ = set(getattr(config, "layer_types", None) or ["full_attention"])
    if types_ - {"full_attention", "sliding_attention"}:
        return False, f"layers of types {sorted(types_)}: transformers builds their masks"
    # Some families (Mistral) take the window from `sliding_window` alone, whatever
    # `layer_types` says; those that have one unused set it to None (Qwen2, Qwen3).
    window = getattr(config, "sliding_window", None)
    if (window or "sliding_attention" in types_) and (max_width is None or not window or window < max_width):
        width = "texts are not truncated" if max_width is None else f"batches up to {max_width} tokens"
        return False, f"a sliding window (of {window} tokens; {width}): transformers builds its masks"
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register(UNMASKED_SDPA, sdpa_attention_forward)
    before = model.config._attn_implementation
    param = next(model.parameters())
    vocab = int(getattr(config, "vocab_size", 2) or 2)
    ids = (torch.arange(2 * 7, device=param.device).reshape(2, 7) * 7 + 1) % vocab
    with torch.inference_mode():
        built = model(input_ids=ids, attention_mask=None)[0]  # a failure here is the model's own
        try:
            model.set_attn_implementation(UNMASKED_SDPA)  # some models only log that they cannot
            if config._attn_implementation != UNMASKED_SDPA:
                why = "the model did not switch its attention implementation"
            elif torch.equal(built, model(input_ids=ids, attention_mask=None)[0]):
                return True, f"SDPA without a mask builder ({UNMASKED_SDPA!r}: no device sync per forward)"
            else:
                why = "attention without a mask builder gave other output bytes on a probe"
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a model that does not take it: the builder runs
            why = f"the model did not take attention without a mask builder ({type(exc).__name__}: {exc})"
    model.set_attn_implementation(before)
    return False, f"{why}: transformers builds the mask"


# --------------------------------------------------------------------------- the mask as a 4-D tensor

# Padding mask passed, SDPA's own kernel choice, the 2-D mask: the attention decisions
# (see params.resolve_attention) of an encoder whose options were not resolved.
PLAIN_ATTENTION = (Choice("off", "not resolved"), Choice("on", "not resolved"), Choice("off", "not resolved"))


def resolve_attention_bias(
    option: str, device: torch.device, mtype: str, attn_requested: str | None, padding_mask: Choice, packing: Choice
) -> Choice:
    """Whether a padded batch's mask reaches the model ready-made, [rows, 1, 1, width]
    bool ("on"), instead of as the [rows, width] mask transformers expands itself.

    For a 2-D mask, transformers' mask builder first asks whether any token is padding
    (`padding_mask.all()` in `masking_utils`) so it may drop the mask: on CUDA that reads
    a value back from the device, a sync per forward that stops the host from queueing
    the next batch while the device runs this one. A 4-D mask is taken as given. Only
    for the families known to take one (the BERT family: `PACKABLE_ENCODERS`, whose
    packed batches pass 4-D masks too) with SDPA attention. `auto`: on CUDA, provisionally
    (an H200 at stop 23, single samples: MiniLM's demo set 1.07x the tokens/s and a
    20,000-text job's encode 0.94x the time, but a second encode in one process 1.25x; see
    docs/gpu.md); off on the CPU, which has no device to wait for (it keeps the plain
    path's bytes); `on`; `off`."""
    if option == "off":
        return Choice("off", "embedding.attention_bias is off")
    if option == "auto" and device.type != "cuda":
        return Choice("off", f"auto: on CUDA only (device is {device.type}: no device sync to save)")
    if packing.on:
        return Choice("off", "packed batches pass masks of their own")
    if padding_mask.on:
        return Choice("off", "no padding mask is passed (causal decoder, right padding)")
    if mtype not in PACKABLE_ENCODERS:
        return Choice("off", f"model type {mtype!r} is not known to take a 4-D mask as given")
    if attn_requested not in (None, "sdpa"):
        return Choice("off", f"the model asks for attn_implementation={attn_requested!r} (a 4-D bool mask needs SDPA)")
    how = "is on" if option == "on" else "auto: on CUDA"
    return Choice("on", f"embedding.attention_bias {how}: [rows, 1, 1, width] bool mask, taken as given (no device sync)")


def confirm_sdpa(model: torch.nn.Module, choice: Choice) -> Choice:
    """`choice`, if the loaded model's attention is SDPA (an eager attention would add a
    bool mask to its scores); else off."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if not choice.on or impl == "sdpa":
        return choice
    return Choice("off", f"the loaded model's attention is {impl!r}, not SDPA: its 2-D mask is passed")


def attention_bias(mask: torch.Tensor) -> torch.Tensor:
    """[rows, width] 0/1 padding mask -> [rows, 1, 1, width] bool, True where a key is a
    real token (SDPA broadcasts it over heads and queries)."""
    return mask[:, None, None, :].bool()


# --------------------------------------------------------------------------- cuDNN attention

@contextlib.contextmanager
def sdpa_without_cudnn():
    """A context in which SDPA may not pick cuDNN's kernel; its other backends stay as
    set. The switch is process-wide: one encoder's forwards at a time (the device loop)."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def resolve_cudnn_attention(
    option: str, device: torch.device, padding_mask: Choice, packing: Choice, attn_requested: str | None
) -> Choice:
    """Whether SDPA may run cuDNN's attention kernel ("on") or not ("off").

    cuDNN builds an execution plan for each new shape it sees, and length-sorted batches
    bring a new width almost every batch. Measured on an H100 (docs/gpu.md), a MiniLM job
    of 20,000 texts: its one encode took 2.82 s with cuDNN, 1.45 s without; a second
    encode in the same process (the plans built) about as long either way. `auto`: off
    on CUDA where the batches pass a padding mask (encoders), on where a causal decoder
    runs without one (there cuDNN's flash kernel is faster once planned: the Qwen3 shape
    at 39.3 % of peak against 36.1 %); `off`: off on any device (only CUDA has the
    kernel); `on`: SDPA's choice."""
    if option == "on":
        return Choice("on", "embedding.cudnn_attention is on: SDPA picks its kernel")
    if option == "off":
        return Choice("off", "embedding.cudnn_attention is off")
    if device.type != "cuda":
        return Choice("on", f"auto: cuDNN attention is CUDA's ({device.type}: nothing to turn off)")
    if packing.value in ("flash_attention_2", "flex_attention") or attn_requested not in (None, "sdpa"):
        return Choice("on", "auto: attention does not run through SDPA here (packed or another implementation)")
    if padding_mask.on:
        return Choice("on", "auto: batches without a padding mask (causal decoder): SDPA picks its kernel")
    return Choice("off", "auto: padded batches with their mask: cuDNN would build a plan per new batch shape")


# --------------------------------------------------------------------------- fused kernels


def liger_version() -> str | None:
    if not _has("liger_kernel"):
        return None
    try:
        from importlib.metadata import version

        return version("liger-kernel")
    except Exception:  # noqa: BLE001 - an unusual install still counts as present
        return "unknown"


def compiles_ahead(params, packing: Choice) -> bool:
    """Whether the padded forward runs from an AOTInductor package (`compile_mode: aot`;
    packed batches keep their eager path)."""
    return bool(params.compile) and params.compile_mode == "aot" and not packing.on


def resolve_kernels(option: str, device: torch.device, mtype: str, aot: bool = False) -> Choice:
    """Whether liger-kernel's fused kernels are applied, and why (not). `aot`: the padded
    forward is compiled ahead of time (`compile_mode: aot`, padded batches), where `auto`
    leaves them out: inductor fuses the norms, RoPE and MLP into kernels of its own, and
    liger calls its Triton kernels in a way `torch.export` cannot trace (it traces without
    dynamo, which sees a raw kernel launch only through torch's triton wrappers), so a
    patched model's build would fail. `liger` still applies them, and the job then runs
    eagerly without trying a build (`Encoder.setup_accel`)."""
    if option == "off":
        return Choice("off", "embedding.kernels is off")
    if device.type != "cuda":
        return Choice("off", f"fused kernels need CUDA (device is {device.type})")
    if mtype not in LIGER_FAMILIES:
        return Choice("off", f"liger-kernel does not patch model type {mtype!r}")
    if aot and option == "auto":
        return Choice("off", "compile_mode aot: inductor fuses the norms, RoPE and MLP in the package itself")
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
        # liger patches module by module: some of this model's may be fused already.
        logger.warning("fused kernels: liger-kernel failed on %s (%s: %s); running unfused (parts may be fused)", mtype, type(exc).__name__, exc)
        return Choice("off", f"liger-kernel failed: {type(exc).__name__}: {exc}")
    finally:
        if modeling is not None:
            changed = _restore_module(modeling, before)
    functions = {k: v for k, v in changed.items() if inspect.isfunction(v)}
    rebound = _rebind_functions(model, modeling, functions) if functions else 0
    if functions and not rebound:
        logger.warning("fused kernels: no forward of %s calls %s by name; those run unfused", mtype, sorted(functions))
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
    with the module's globals plus the replacements, inside the same decorators (each
    rebuilt around the new function). Returns how many were bound."""
    count = 0
    for sub in model.modules():
        if "forward" in vars(sub):  # already given its own forward (by liger itself, say)
            continue
        chain = _wrapper_chain(type(sub).forward)
        inner = chain[-1]
        if not inspect.isfunction(inner) or inner.__globals__ is not vars(modeling):
            continue
        names = functions.keys() & _global_names(inner.__code__)
        if not names:
            continue
        scope = dict(inner.__globals__)
        scope.update({k: functions[k] for k in names})
        forward = _rewrap(chain, _copy_function(inner, scope))
        if forward is None:
            continue  # a decorator that does not keep the function in a closure: left unfused
        sub.forward = types.MethodType(forward, sub)
        count += 1
    return count


def _wrapper_chain(fn) -> list:
    """[outermost, ..., the undecorated function], following `__wrapped__`."""
    chain = [fn]
    while hasattr(chain[-1], "__wrapped__") and len(chain) < 32:
        chain.append(chain[-1].__wrapped__)
    return chain


def _global_names(code: types.CodeType) -> set[str]:
    """Global names a function's code (and code nested in it) may look up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _copy_function(fn, scope: dict | None = None, closure: tuple | None = None):
    new = types.FunctionType(
        fn.__code__,
        fn.__globals__ if scope is None else scope,
        fn.__name__,
        fn.__defaults__,
        fn.__closure__ if closure is None else closure,
    )
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    return new


def _rewrap(chain: list, inner):
    """Rebuild the decorators of `chain` (outermost first) around `inner`: each wrapper
    copied with the closure cell that held the next function now holding its new copy.
    None if a wrapper does not keep the next function in a closure cell."""
    new = inner
    for wrapper, wrapped in zip(reversed(chain[:-1]), reversed(chain[1:]), strict=True):
        cells = wrapper.__closure__ or ()
        if not inspect.isfunction(wrapper) or not any(c.cell_contents is wrapped for c in cells):
            return None
        closure = tuple(types.CellType(new) if c.cell_contents is wrapped else c for c in cells)
        copy = _copy_function(wrapper, closure=closure)
        copy.__wrapped__ = new
        new = copy
    return new
