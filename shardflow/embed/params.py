"""What decides an embedding run: `EmbedParams`, its resolution to a device, dtype
and token budget, and the identity of the output (for resume keys).

Everything here is cheap: no model weights are loaded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from shardflow.core import parts
from shardflow.core.batching import LEAD_FRACTION
from shardflow.core.devices import (
    DTYPES,
    dtype_name,
    kernel_hardware,
    resolve_device,
    resolve_dtype,
)
from shardflow.core.fields import check_device, check_field_types, one_of, whole_floats_as_ints
from shardflow.core.hashing import model_identity
from shardflow.embed.stconfig import ModelSpec, load_model_spec

OUTPUT_DTYPES = ("float32", "float16")
COMPILE_MODES = ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "aot")
PACKING = ("auto", "off", "on")
KERNELS = ("auto", "off", "liger")
SWITCH = ("auto", "on", "off")  # padding_mask, cudnn_attention, attention_bias, cuda_graphs
# Added after outputs existed: in the identity only when they resolve to something on.
_ACCEL_FIELDS = (
    "length_buckets", "compile_mode", "packing", "kernels", "padding_mask", "cudnn_attention", "attention_bias", "cuda_graphs"
)
# Default token budgets. On CPU, throughput per token is flat from ~512 to ~2048
# padded tokens per batch and drops beyond (cache misses), while smaller batches
# pad less: 1024 measured best for MiniLM on 2 cores. GPUs want large batches.
AUTO_TOKEN_BUDGET = {"cpu": 1024, "cuda": 32768}
# In the identity when a causal decoder runs without its padding mask (right-padded).
PADDING_MASK_SKIPPED = "skipped: causal, right padding"
# In the identity when an encoder's padding mask is passed ready-made, 4-D.
ATTENTION_BIAS_ON = "[rows, 1, 1, width] bool mask"
# The identity keys of the attention decisions (see `attention_identity`).
ATTENTION_KEYS = ("padding_mask", "cudnn_attention", "attention_bias")
SPEEDUP_KEYS = ("packing", "cuda_graphs", "length_buckets", "kernels")  # speedup_identity's


@dataclass(frozen=True)
class EmbedParams:
    """Everything that decides how (and, for the last bits, what) a chunk embeds to.

    token_budget: most padded tokens (rows x longest row) in one batch; None picks
        a per-device default (AUTO_TOKEN_BUDGET).
    max_batch_size: most rows in one batch, whatever the budget.
    max_length: truncate here instead of the model's max_seq_length.
    prompt / prompt_name: as in `SentenceTransformer.encode`; neither means the
        model's default prompt, if it has one.
    window: texts per resume part (tokenized and sorted in two groups: core.batching.sort_groups).
    threads: torch intra-op threads (None: leave torch's setting).
    length_buckets: "auto" (with a CUDA-graph compile mode only), "on" (the default
        widths), "off", or padded widths to round batches up to (see `accel.resolve_buckets`).
    compile_mode: torch.compile mode; "auto" = its default mode; "aot": the padded
        forward exported and compiled ahead of time into a package that later jobs
        load instead of compiling (see `shardflow.embed.aot`).
    compile_cache: folder for torch's compile cache (TORCHINDUCTOR_CACHE_DIR), so that
        jobs after the first skip most of the compiling; None: torch's own (per machine,
        in /tmp). Not part of the output identity.
    packing: "auto" | "off" | "on": texts of a batch back to back, unpadded.
    kernels: "auto" | "off" | "liger": fused kernels from liger-kernel.
    padding_mask: "auto" | "on" | "off": whether a causal decoder's padded batches
        pass their padding mask ("auto": not on CUDA; see `accel.resolve_padding_mask`).
    cudnn_attention: "auto" | "on" | "off": whether SDPA may run cuDNN's attention kernel
        ("auto": not where CUDA batches pass a mask; see `accel.resolve_cudnn_attention`).
    attention_bias: "auto" | "on" | "off": an encoder's padding mask passed ready-made
        as a 4-D tensor (no device sync in transformers; see `accel.resolve_attention_bias`).
    cuda_graphs: "auto" | "on" | "off": full padded batches replay a CUDA graph of their
        shape (see `shardflow.embed.graphs`; "auto": on for the BERT family on CUDA with
        its mask 4-D, see `accel.resolve_cuda_graphs`).

    The accelerations at "auto" keep the plain path on the CPU, and leave the output
    identity (hence resume keys) as it was unless they resolve to something on.
    """

    model: str
    device: str = "auto"
    dtype: str = "auto"
    output_dtype: str = "float32"
    token_budget: int | None = None
    max_batch_size: int = 512
    max_length: int | None = None
    prompt_name: str | None = None
    prompt: str | None = None
    compile: bool = False
    window: int = 8192
    seed: int = 0
    threads: int | None = None
    length_buckets: str | tuple[int, ...] = "auto"
    compile_mode: str = "auto"
    packing: str = "auto"
    kernels: str = "auto"
    padding_mask: str = "auto"
    cudnn_attention: str = "auto"
    attention_bias: str = "auto"
    cuda_graphs: str = "auto"
    compile_cache: str | None = None

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # max_length 128.0 (a sweep value): the engine counts with it
        # An unquoted on/off (YAML 1.1) is a boolean: the workflow's config and a sweep's
        # point values are read as the word at validation (core.config.yaml11_switches);
        # Python callers may still pass True/False.
        for name in ("length_buckets", "packing", "padding_mask", "cudnn_attention", "attention_bias", "cuda_graphs"):
            if isinstance(getattr(self, name), bool):
                object.__setattr__(self, name, "on" if getattr(self, name) else "off")
        if self.kernels is False:
            object.__setattr__(self, "kernels", "off")
        if not isinstance(self.length_buckets, list) and self.length_buckets not in ("auto", "on", "off"):
            raise ValueError(f"length_buckets {self.length_buckets!r}: expected auto, on, off or a list of widths")
        choices = (
            ("compile_mode", COMPILE_MODES),
            ("packing", PACKING),
            ("kernels", KERNELS),
            ("padding_mask", SWITCH),
            ("cudnn_attention", SWITCH),
            ("attention_bias", SWITCH),
            ("cuda_graphs", SWITCH),
        )
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} {getattr(self, name)!r}: expected one of {allowed}")
        check_device(self.device)
        if self.dtype != "auto" and not one_of(self.dtype, DTYPES):  # a dict: a list is unhashable there
            raise ValueError(f"dtype {self.dtype!r}: expected auto or one of {sorted(DTYPES)}")
        if self.output_dtype not in OUTPUT_DTYPES:
            raise ValueError(f"output_dtype {self.output_dtype!r}: expected one of {OUTPUT_DTYPES}")
        check_field_types(self)  # before the comparisons below: a string or None there is Python's bare TypeError
        if isinstance(self.length_buckets, list):  # a list from YAML: a hashable tuple
            object.__setattr__(self, "length_buckets", tuple(int(b) for b in self.length_buckets))
            if not self.length_buckets or min(self.length_buckets) < 1:
                raise ValueError("length_buckets: a non-empty list of widths >= 1, auto, on or off")
        for name in ("max_batch_size", "window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError("token_budget must be >= 1 or None")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError("max_length must be >= 1 or None")
        if self.threads is not None and self.threads < 1:
            raise ValueError("threads must be >= 1 or None")
        if self.prompt is not None and self.prompt_name is not None:
            raise ValueError("give either prompt or prompt_name, not both")


def resolve_token_budget(params: EmbedParams, device: torch.device) -> int:
    return params.token_budget or AUTO_TOKEN_BUDGET.get(device.type, AUTO_TOKEN_BUDGET["cuda"])


def output_identity(params: EmbedParams, spec: ModelSpec | None = None) -> dict[str, Any]:
    """Everything that decides the output bytes for given texts (for resume keys and manifests)."""
    import transformers

    spec = spec or load_model_spec(params.model)
    device = resolve_device(params.device)
    identity = {
        "format": parts.FORMAT_VERSION,
        "model": model_identity(spec.folder),
        "device": device.type,
        # Parts made on other hardware hold other last bits: not resumed into this output.
        "hardware": kernel_hardware(device),
        "dtype": dtype_name(resolve_dtype(params.dtype, device)),
        "prompt": spec.resolve_prompt(params.prompt, params.prompt_name),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    identity.update(
        {
            k: v
            for k, v in asdict(params).items()
            if k not in ("model", "device", "dtype", "prompt", "prompt_name", "threads", "compile_cache", *_ACCEL_FIELDS)
        }
    )
    # What this version reads from the model folder differently from older ones (for the
    # same files): only where it applies, so that parts made before are not resumed into
    # an output they do not belong to, and every other model's key stays as it was.
    if spec.truncate_dim is not None:
        identity["truncate_dim"] = spec.truncate_dim
    if not spec.has_st_config and spec.pooling != ("mean",):
        identity["pooling"] = list(spec.pooling)  # a causal LM's folder without modules.json
    if spec.unread:
        identity["unread"] = list(spec.unread)  # read before 2026-11-29 (a folder without modules.json)
    if spec.listed_out_of_idx_order:
        identity["modules"] = "as listed"  # run in idx order before 2026-11-29
    identity.update(accel_identity(params, spec, device))
    identity["token_budget"] = resolve_token_budget(params, device)
    # How a window is cut into sort groups decides the batches (core.batching.sort_groups).
    identity["sort_groups"] = f"longest 1/{LEAD_FRACTION} of characters, then the rest"
    if device.type == "cpu":  # CPU kernels split work by thread count, which can move the last bits
        identity["threads"] = params.threads or torch.get_num_threads()
    return identity


def accel_identity(params: EmbedParams, spec: ModelSpec, device: torch.device) -> dict[str, Any]:
    """The speed-up options that change the output's last bits, as resolved on `device`;
    empty when all resolve to the plain path (so older identities stay valid)."""
    from shardflow.embed import accel

    out: dict[str, Any] = {}
    cfg = accel.model_config(spec.transformer_folder)
    mtype = accel.model_type(cfg)
    attn = dict(spec.model_kwargs).get("attn_implementation")
    packing = accel.resolve_packing(params.packing, device, mtype, attn)
    attention = resolve_attention(params, device, mtype, cfg, attn, packing)
    graphs = accel.resolve_cuda_graphs(params.cuda_graphs, device, params.compile, packing, mtype, attention[2])
    kernels = accel.resolve_kernels(params.kernels, device, mtype, aot=accel.compiles_ahead(params, packing))
    out.update(speedup_identity(params, packing, graphs, kernels))
    out.update(attention_identity(device, *attention))
    if params.compile and params.compile_mode not in ("auto", "default"):
        out["compile_mode"] = params.compile_mode
    return out


def resolve_attention(
    params: EmbedParams,
    device: torch.device,
    mtype: str,
    cfg: dict,
    attn_requested: str | None,
    packing: Any,
    model: torch.nn.Module | None = None,
) -> tuple[Any, Any, Any]:
    """The attention decisions, each resting on the one before: the padding mask, cuDNN's
    kernel, the mask passed 4-D (`accel.Choice`s). From config.json alone, or, given the
    loaded `model`, as it confirms them."""
    from shardflow.embed import accel

    padding = accel.resolve_padding_mask(params.padding_mask, device, mtype, cfg, attn_requested, packing)
    if model is not None:
        padding = accel.confirm_causal(model, padding)
    cudnn = accel.resolve_cudnn_attention(params.cudnn_attention, device, padding, packing, attn_requested)
    bias = accel.resolve_attention_bias(params.attention_bias, device, mtype, attn_requested, padding, packing)
    if model is not None:
        bias = accel.confirm_sdpa(model, bias)
    return padding, cudnn, bias


def speedup_identity(params: EmbedParams, packing: Any, graphs: Any, kernels: Any) -> dict[str, str]:
    """The identity entries (keys SPEEDUP_KEYS) of the packing, CUDA-graph and fused-kernel
    decisions (`accel.Choice`s) and of the bucket widths they imply: only those that
    change the output from the plain path's. From config.json's decisions before loading
    (`accel_identity`), and again from the loaded model's (`Encoder.setup_accel`: a
    packing kernel that failed to load, liger that failed to patch, a mask the loaded
    model takes 2-D and so no graphs at auto)."""
    from shardflow.embed import accel

    out = {}
    if packing.on:
        out["packing"] = packing.value
    if graphs.on and accel.resolve_buckets(params.length_buckets, params.compile, 1 << 30, params.compile_mode, True):
        out["cuda_graphs"] = "on"  # (without bucket widths the encoder turns graphs off: Encoder.setup_accel)
    # Widths depend on max_length (known once the tokenizer loads), so the option as
    # given stands for them (with cuda_graphs, "auto" is graph_length_buckets); with
    # packing, buckets pad the packed rows.
    if accel.resolve_buckets(params.length_buckets, params.compile, 1 << 30, params.compile_mode, graphs.on):
        out["length_buckets"] = params.length_buckets
    if kernels.on:
        out["kernels"] = f"liger-kernel {accel.liger_version()}"
    return out


def attention_identity(device: torch.device, padding: Any, cudnn: Any, bias: Any) -> dict[str, str]:
    """The identity entries of `resolve_attention`'s decisions (keys ATTENTION_KEYS):
    only those that change the output from the plain path's."""
    out = {}
    if padding.on:
        out["padding_mask"] = PADDING_MASK_SKIPPED
    if device.type == "cuda" and not cudnn.on:  # the CPU has no cuDNN kernel to turn off
        out["cudnn_attention"] = "off"
    if bias.on:
        out["attention_bias"] = ATTENTION_BIAS_ON
    return out


def resume_key(chunk_path: str | Path, params: EmbedParams, identity: dict[str, Any] | None = None) -> str:
    """Folder name for a chunk's resume state: a hash of the chunk's bytes and path, the model
    identity and the params (core.parts.resume_key)."""
    return parts.resume_key(chunk_path, identity if identity is not None else output_identity(params))
