"""A fast, resumable sentence-embedding engine on plain transformers + torch.

The output matches `SentenceTransformer(path).encode(texts)` for the modules in
`stconfig` (same prompt, truncation, pooling, Dense, Normalize), but the batching is
built for throughput:

1. Texts are processed in windows of `window` texts. Each window is tokenized
   once, without padding, in a background thread while the previous one runs.
   A long text is tokenized from the head that truncation keeps, where that gives
   the whole text's ids (`embed.prefix`).
2. Within a window, texts are sorted by token count and cut into batches by a
   token budget (rows x longest row), not by a fixed count: little padding, and
   roughly constant memory per batch whatever the text lengths. A window is
   tokenized and sorted in two groups, its longest texts by characters (taken
   until they hold an eighth of its characters) and the rest (`core.batching.sort_groups`): the device starts on the
   longest texts while the rest is tokenized, instead of waiting for the whole
   first window, and the two groups are length bands, so padding stays as low.
3. A second background thread collates batches ahead with numpy (and pins them
   on CUDA, for non-blocking copies), through a bounded queue: the model does not
   wait for Python.
4. On CUDA, out-of-memory splits the batch and halves the budget for the rest of
   the run; a text that does not fit even alone fails with its index and length.
   With `cuda_graphs`, each full batch of a bucket shape replays a CUDA graph of the
   forward after the shape's first batch (`embed.graphs`).
5. With a resume folder, each finished window is written there atomically and a
   restarted run skips it. Batching is a pure function of (window texts, params),
   so a resumed run writes the same bytes as an uninterrupted one.

Padding: a tokenizer that pads on the left is followed only for models with rotary
positions (`accel.ROTARY_FAMILIES`), where the side moves a vector within rounding. Any
other model is padded on the right, so each text gets the vector sentence-transformers
gives it alone: a model that numbers positions from the row's first slot (BERT), padded on the
left, gives a text a vector that depends on how much its batch pads it, in
sentence-transformers too.

Determinism: fp32 on CPU gives bitwise-identical output for the same texts,
params and torch thread count, in one process or across processes. Changing the
thread count, the device (its type, and the GPU or CPU model: core.devices.kernel_hardware),
the dtype, the window or the token budget can change the last bits (different kernels or
batch shapes); `resume_key` covers all of them.
An out-of-memory back-off also changes batch shapes, hence the last bits.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from shardflow.core import controller
from shardflow.core.batching import (
    Batch,
    bucket_rows,
    bucket_width,
    collate,
    collate_to,
    length_order,
    pack,
    plan_batches,
    plan_bucketed_batches,
    plan_packed_batches,
    sort_groups,
    split_batch,
)
from shardflow.core.columns import write_ids_parquet
from shardflow.core.devices import dtype_name, peak_memory, reset_peak_memory, runtime, use_compile_cache
from shardflow.core.hashing import digest, texts_fingerprint
from shardflow.core.jobs import EngineCounters
from shardflow.core.models import NO_LIMIT, load_for_inference
from shardflow.core.npyio import write_npy
from shardflow.core.oom import OomBackoff, TooLargeError
from shardflow.core.parts import JobIdentity, PartStore, configured, job_identity, remove_job_parts, resume_folder
from shardflow.core.s3 import logical_path
from shardflow.corpus.chunks import naming_records, read_chunk
from shardflow.embed import accel, aot
from shardflow.embed.graphs import CudaBackend, ShapeGraphs
from shardflow.embed.params import (
    ATTENTION_KEYS,
    SPEEDUP_KEYS,
    EmbedParams,
    attention_identity,
    output_identity,
    resolve_attention,
    resolve_token_budget,
    resume_key,
    speedup_identity,
)
from shardflow.embed.pooling import build_head, last_hidden, pool
from shardflow.embed.prefix import PrefixTokenizer, premise_fails
from shardflow.embed.stconfig import (
    ModelSpec,
    UnsupportedModelError,
    load_model_spec,
    output_dim,
)

# Inside the compile cache: graphs traced with SDPA's cuDNN kernel turned off.
NO_CUDNN_CACHE = "sdpa-without-cudnn"

__all__ = ["EmbedParams", "EncodeStats", "Encoder", "TextTooLargeError", "embed_chunk", "load_encoder", "resume_key"]

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 5.0
# Encoder-decoder checkpoints whose encoder alone embeds (as sentence-transformers loads them).
_ENCODER_ONLY = {"t5": "T5EncoderModel", "mt5": "MT5EncoderModel", "umt5": "UMT5EncoderModel"}
_cpu_fallback_warned = False


class TextTooLargeError(TooLargeError):
    """A single text does not fit in device memory, even in a batch of its own."""

    @property
    def index(self) -> int:
        return self.row


class EmptyTextError(ValueError):
    """A text that leaves no token to pool: an empty text, and a tokenizer that adds no
    special token; or, where the model's Pooling excludes the prompt, a text whose tokens
    are all the prompt's. `row`: its index in the texts encoded (embed_chunk names its
    chunk and id)."""

    def __init__(self, message: str, row: int):
        super().__init__(message)
        self.row = row


@dataclass
class EncodeStats(EngineCounters):
    items: int = 0  # texts in the output
    items_embedded: int = 0  # texts computed by this call (the rest came from resume parts)
    real_tokens: int = 0
    padded_tokens: int = 0
    # Texts whose tokens (prompt and special tokens included) reached max_length: cut there
    # (or exactly that long, and whole: the count cannot tell those apart).
    at_max_length: int = 0
    # Forwards in which torch.compile built a graph (the first batch of a shape no graph
    # covered yet), timed apart from the steady state: seconds includes them,
    # steady_seconds does not.
    warmup_seconds: float = 0.0
    warmup_shapes: int = 0
    warmup_items: int = 0
    warmup_tokens: int = 0
    # What ran, and why (see shardflow.embed.accel).
    compile: str = "off"
    length_buckets: list[int] | None = None
    packing: str = "off"
    packing_reason: str = ""
    kernels: str = "off"
    kernels_reason: str = ""
    padding_mask: str = "passed"
    padding_mask_reason: str = ""
    cudnn_attention: str = "on"
    cudnn_attention_reason: str = ""
    attention_bias: str = "off"
    attention_bias_reason: str = ""
    cuda_graphs: str = "off"
    cuda_graphs_reason: str = ""
    # With cuda_graphs: shapes captured by this call, batches replayed, the host's
    # seconds spent capturing (and checking the first captures; see embed.graphs).
    graphs_captured: int = 0
    graph_replays: int = 0
    graph_capture_seconds: float = 0.0
    # Where the host's time goes (the device waits on the host when it cannot keep up):
    # tokenizing (a helper thread, the next window while this one runs), collating and
    # pinning batches (the producer thread), and the device loop waiting for a batch.
    tokenize_seconds: float = 0.0
    collate_seconds: float = 0.0
    host_wait_seconds: float = 0.0
    first_batch_seconds: float = 0.0  # of host_wait_seconds: the waits before the first batch
    # The rest of the device loop: queueing each batch's forward (on CUDA the host only
    # launches kernels; large when launching is what limits; it also holds compiling,
    # warmup_seconds, and out-of-memory retries) and gathering each window's embeddings
    # (on CUDA this waits for the device to finish what was queued: large when the
    # device is what limits).
    launch_seconds: float = 0.0
    gather_seconds: float = 0.0
    # Long texts tokenized from the head truncation keeps (embed.prefix), and those of
    # them tokenized whole after all (the head fell short of the limit).
    tokenized_heads: int = 0
    tokenized_heads_retried: int = 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["items_per_s"] = self.per_second(self.items_embedded)
        d["tokens_per_s"] = self.per_second(self.real_tokens)
        steady = max(self.seconds - self.warmup_seconds, 1e-9)
        d["steady_seconds"] = self.seconds - self.warmup_seconds
        d["steady_items_per_s"] = (self.items_embedded - self.warmup_items) / steady
        d["steady_tokens_per_s"] = (self.real_tokens - self.warmup_tokens) / steady
        d["padding_fraction"] = 1 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0
        return d


# --------------------------------------------------------------------------- loading


def _load_tokenizer(spec: ModelSpec, text_positions: int | None, max_length: int | None, logger: logging.Logger):
    """The model's tokenizer, its `model_max_length` the model's limit (sentence-transformers'
    max_seq_length, else the tokenizer's own) and at most `text_positions`, the position
    embeddings a text can use: past them the model fails on the first text that long, with
    a tensor index error naming no file (sentence-transformers too). Where that limit is
    the cut (`max_length`, embedding.max_length, null), a configured limit above the
    positions is warned of, naming it; texts are cut at the positions."""
    from tokenizers.normalizers import Lowercase
    from tokenizers.normalizers import Sequence as NormalizerSequence
    from transformers import AutoTokenizer

    kwargs = dict(spec.tokenizer_kwargs)
    if spec.max_seq_length is not None and "model_max_length" not in kwargs:
        kwargs["model_max_length"] = spec.max_seq_length
    tok = AutoTokenizer.from_pretrained(str(spec.transformer_folder), **kwargs)
    if text_positions is not None and tok.model_max_length > text_positions:
        if max_length is None and tok.model_max_length < NO_LIMIT:  # a limit given, and the one cutting
            key = "max_seq_length" if spec.max_seq_length is not None else "the tokenizer's model_max_length"
            logger.warning(
                "%s: %s %d is more than the model's %d positions for text: texts are cut at %d "
                "(set embedding.max_length to choose another cut)",
                spec.folder, key, tok.model_max_length, text_positions, text_positions,
            )
        tok.model_max_length = text_positions
    if spec.do_lower_case:  # as sentence-transformers: a Lowercase normalizer in front
        if tok.is_fast:
            norm = tok.backend_tokenizer.normalizer
            parts = list(norm) if isinstance(norm, NormalizerSequence) else ([norm] if norm is not None else [])
            if not any(isinstance(n, Lowercase) for n in parts):
                tok.backend_tokenizer.normalizer = NormalizerSequence([Lowercase(), *parts])
        else:
            tok.do_lower_case = True
    return tok


def _load_model(
    spec: ModelSpec, dtype: torch.dtype, device: torch.device, logger: logging.Logger, attn_override: str | None = None
):
    import transformers
    from transformers import AutoConfig, AutoModel

    folder = str(spec.transformer_folder)
    config = AutoConfig.from_pretrained(folder, **dict(spec.config_kwargs))
    if hasattr(config, "use_cache"):
        config.use_cache = False  # no KV cache for a single forward (sentence-transformers does the same)
    cls = AutoModel
    if config.model_type in _ENCODER_ONLY:
        cls = getattr(transformers, _ENCODER_ONLY[config.model_type])
    elif getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{folder}: encoder-decoder model_type {config.model_type!r} is not supported")
    kwargs = {k: v for k, v in spec.model_kwargs if k not in ("dtype", "torch_dtype", "device_map")}
    attn = kwargs.pop("attn_implementation", "sdpa")
    if attn_override is not None:
        attn = attn_override
    model = load_for_inference(
        cls, folder, config=config, dtype=dtype, device=device, logger=logger, attn_implementation=attn, **kwargs
    )
    return model, config


def load_encoder(
    params: EmbedParams,
    logger: logging.Logger | None = None,
    *,
    before_forward: Callable[[torch.Tensor], None] | None = None,
) -> Encoder:
    """Load the model once; `Encoder.encode` then embeds any number of text lists.

    `before_forward(input_ids)` runs before every forward pass: tests use it to raise
    `torch.OutOfMemoryError` on CPU and exercise the back-off.
    """

    global _cpu_fallback_warned
    logger = logger or log
    device, dtype, described = runtime(params.device, params.dtype, params.threads)
    logger.info("embed params %s | %s token_budget %d", asdict(params), described, resolve_token_budget(params, device))
    if params.device == "auto" and device.type == "cpu" and not _cpu_fallback_warned:
        logger.warning("no CUDA device available: falling back to CPU (slow for large corpora)")
        _cpu_fallback_warned = True
    torch.manual_seed(params.seed)
    spec = load_model_spec(params.model)
    for note in spec.notes:
        logger.warning("model %s: %s", params.model, note)
    cfg = accel.model_config(spec.transformer_folder)
    mtype = accel.model_type(cfg)
    attn_requested = dict(spec.model_kwargs).get("attn_implementation")
    packing = accel.resolve_packing(params.packing, device, mtype, attn_requested)
    kernels = accel.resolve_kernels(params.kernels, device, mtype, aot=accel.compiles_ahead(params, packing))
    logger.info("packing: %s (%s)", packing.value, packing.reason)
    attn = packing.value if packing.value in ("flash_attention_2", "flex_attention") else None
    try:
        model, config = _load_model(spec, dtype, device, logger, attn)
    except (ValueError, ImportError) as exc:
        if attn is None:
            raise
        packing = accel.Choice("off", f"attn_implementation={attn!r} failed to load: {exc}")
        logger.warning("packing: off (%s)", packing.reason)
        model, config = _load_model(spec, dtype, device, logger)
    if kernels.on:
        kernels = accel.apply_kernels(model, mtype, logger)
    attention = resolve_attention(params, device, mtype, cfg, attn_requested, packing, model)
    cuda_graphs = accel.resolve_cuda_graphs(params.cuda_graphs, device, params.compile, packing, mtype, attention[2])
    (logger.warning if params.kernels == "liger" and not kernels.on else logger.info)(
        "fused kernels: %s (%s)", kernels.value, kernels.reason
    )
    max_positions = getattr(
        config.get_text_config() if hasattr(config, "get_text_config") else config, "max_position_embeddings", None
    )
    # The RoBERTa family numbers a text's positions from its pad id + 1: the embeddings
    # below that hold no text's (XLM-R: 514, of which 512 for text).
    offset = accel.position_offset(model)
    text_positions = max_positions - offset if max_positions not in (None, -1) else None
    if params.max_length and text_positions is not None and params.max_length > text_positions:
        # The model would fail on the first long text, with a tensor-size error naming no key.
        skipped = (
            f" ({max_positions} position embeddings, numbered for text from its pad id + 1 = {offset})" if offset else ""
        )
        raise ValueError(
            f"embedding.max_length {params.max_length} is more than the {text_positions} positions of the model "
            f"{spec.folder}{skipped}: lower it, or leave it null for the model's own limit"
        )
    tokenizer = _load_tokenizer(spec, text_positions, params.max_length, logger)
    head = build_head(spec.head, spec.truncate_dim).to(device)
    encoder = Encoder(params, spec, tokenizer, model, head, device, dtype, output_dim(spec), logger, before_forward)
    encoder.setup_accel(mtype, packing, kernels, attention, cuda_graphs)
    padding, cudnn, bias = encoder.padding_mask, encoder.cudnn_attention, encoder.attention_bias  # as applied
    (logger.warning if params.padding_mask == "off" and not padding.on else logger.info)(
        "padding mask: %s (%s)", "skipped" if padding.on else "passed", padding.reason
    )
    logger.info("cuDNN attention: %s (%s)", cudnn.value, cudnn.reason)
    (logger.warning if params.attention_bias == "on" and not bias.on else logger.info)(
        "attention bias: %s (%s)", bias.value, bias.reason
    )
    graphs = encoder.cuda_graphs
    (logger.warning if params.cuda_graphs == "on" and not graphs.on else logger.info)(
        "CUDA graphs: %s (%s)", graphs.value, graphs.reason
    )
    return encoder


# --------------------------------------------------------------------------- the engine


@dataclass
class _Ready:
    """A collated batch, as torch tensors (pinned on CUDA)."""

    window: int
    batch: Batch
    input_ids: torch.Tensor
    attention_mask: torch.Tensor


@dataclass
class _WindowEnd:
    window: int


@dataclass
class _Failed:
    error: BaseException


_DONE = object()


class Encoder:
    """A loaded model plus its tokenizer and head; see `load_encoder`."""

    # Where a group's ids become Python lists: on the collate thread (see `_produce`), or,
    # as before 2026-11-28, on the tokenizer thread. Only benchmarks set it False
    # (bench_job_encode.py's `ids_helper` variant), to compare the two on one host.
    ids_on_collate_thread = True

    def __init__(self, params, spec, tokenizer, model, head, device, dtype, dim, logger, before_forward):
        self.params: EmbedParams = params
        self.spec: ModelSpec = spec
        self.tokenizer = tokenizer
        self.model = model
        self.head = head
        self.device: torch.device = device
        self.dtype: torch.dtype = dtype
        self.dim: int = dim
        self.logger: logging.Logger = logger
        self.before_forward = before_forward
        self.prompt = spec.resolve_prompt(params.prompt, params.prompt_name)
        self.max_length = params.max_length or tokenizer.model_max_length
        self.truncate = self.max_length < NO_LIMIT
        self.backend = self._fast_backend()
        self.prefix = self._prefix_tokenizer()
        self.left_pad = tokenizer.padding_side == "left"
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # Added to a packed row's position ids (each text's from 0): the RoBERTa family
        # counts from its pad id + 1 (accel.position_offset). Read before compile wraps the model.
        self.position_offset = accel.position_offset(model)
        self.prompt_length = self._prompt_length() if (self.prompt and not spec.include_prompt) else 0
        # The token budget halves on out-of-memory, for the Encoder's lifetime.
        self.backoff = OomBackoff(resolve_token_budget(params, device), device, logger)
        self.output_dtype = np.dtype(params.output_dtype)
        self.identity = output_identity(params, spec)
        # As configured (core.parts.configured): a killed attempt on another node type had the same.
        self.settings = configured(params, self.identity["model"])
        self.last_stats = EncodeStats()
        self.packing = accel.Choice("off", "not set up")
        self.kernels = accel.Choice("off", "not set up")
        self.padding_mask, self.cudnn_attention, self.attention_bias = accel.PLAIN_ATTENTION
        self.cuda_graphs = accel.Choice("off", "not set up")
        self.graphs: ShapeGraphs | None = None
        self.causal = False
        self.buckets: tuple[int, ...] = ()
        self.packed_buckets: tuple[int, ...] = ()
        self.compiled = "off"
        self.aot: aot.AotForward | None = None  # compile_mode aot, once its package is loaded and checked
        self.aot_pending = False  # compile_mode aot, before the first padded batch
        self.seen_shapes: set[tuple[int, ...]] = set()  # batch shapes run so far (each compiled once)

    def setup_accel(
        self,
        mtype: str,
        packing: accel.Choice,
        kernels: accel.Choice,
        attention: tuple[accel.Choice, accel.Choice, accel.Choice] | None = None,
        cuda_graphs: accel.Choice | None = None,
    ) -> None:
        """Apply the resolved speed-ups: buckets, packing, compile, CUDA graphs, and
        `attention` (from `resolve_attention`; None: the plain path's mask, SDPA's own
        kernel choice)."""
        params = self.params
        self.packing, self.kernels = packing, kernels
        attention = attention or accel.PLAIN_ATTENTION
        self.padding_mask, self.cudnn_attention, self.attention_bias = attention
        self.identity.pop("padding_side", None)
        if self.left_pad and mtype not in accel.ROTARY_FAMILIES:
            # Left padding moved the positions of a model that numbers them from the row's
            # first slot (a BERT whose tokenizer pads left: cosine 0.50 to what
            # sentence-transformers gives the text alone), by however much its batch padded
            # it. Padded on the right, each text gets the vector it has alone; pooling finds
            # real tokens through the mask either way.
            self.left_pad = False
            self.identity["padding_side"] = "right"  # left before 2026-11-29
            self.logger.info("padding: right (the tokenizer pads left; model type %r numbers positions from the row's start)", mtype)
        if self.padding_mask.on:
            self.left_pad = False  # pads after each text, where a causal model's real tokens never look
            # Before compile: the probe runs eager.
            _, why = accel.unmasked_attention(self.model, self.max_length if self.truncate else None)
            self.padding_mask = accel.Choice(self.padding_mask.value, f"{self.padding_mask.reason}; {why}")
        # As the loaded model confirmed them (the identity was resolved from config.json).
        for key in ATTENTION_KEYS:
            self.identity.pop(key, None)
        self.identity.update(attention_identity(self.device, *attention))
        self.causal = mtype in accel.PACKABLE_DECODERS
        limit = self.width_limit = self.max_length if self.truncate else 8192
        graphs = cuda_graphs or accel.Choice("off", "not set up")
        self.buckets = accel.resolve_buckets(params.length_buckets, params.compile, limit, params.compile_mode, graphs.on)
        if graphs.on and not self.buckets:
            graphs = accel.Choice("off", "length_buckets is off: batch shapes would not repeat")
        self.cuda_graphs = graphs
        # As applied: packing that fell back, liger that failed to patch, graphs that
        # auto turns off for a mask the loaded model takes 2-D (as the attention keys above).
        for key in SPEEDUP_KEYS:
            self.identity.pop(key, None)
        self.identity.update(speedup_identity(params, packing, graphs, kernels))
        self.identity.pop("packed_positions", None)
        if packing.on and self.position_offset:
            # Packed parts made before the offset (2026-11-29) hold other vectors: not resumed.
            self.identity["packed_positions"] = f"from {self.position_offset}"
        if graphs.on:
            self.graphs = ShapeGraphs(self._graph_forward, CudaBackend(self.device), self.logger)
            # Out of memory: the graphs' pool goes before the halves run (their shapes are
            # the old budget's; empty_cache cannot free a pool that live graphs hold).
            self.backoff.on_oom = self.graphs.drop
        if packing.on and (self.buckets or packing.value == "flex_attention"):
            # A packed row's length is its token total: bucket that, in quarters of the budget.
            # Always for flex attention: transformers compiles its kernel, and a BlockMask's
            # lengths are constants to dynamo, so each new total would compile again.
            step = max(64, self.token_budget // 4)
            self.packed_buckets = tuple(range(step, max(self.token_budget, limit) + step, step))
            self.buckets = ()
        # Read by inductor when it first compiles: the model with `compile`, flex
        # attention's kernel with packing. SDPA's kernel is chosen when a graph is
        # traced, and neither dynamo's guards nor the cache's keys see that choice:
        # graphs traced without cuDNN keep to a folder of their own.
        without_cudnn = params.compile and not self.cudnn_attention.on
        cache = use_compile_cache(params.compile_cache, NO_CUDNN_CACHE if without_cudnn else None)
        if params.compile and params.compile_mode == "aot":
            if packing.on:
                self.compiled = "off (compile_mode aot compiles the padded forward: packed batches run eagerly)"
                self.logger.warning("compile: %s", self.compiled)
            elif kernels.on:
                # Not tried: torch.export traces without dynamo, so liger's raw Triton launches
                # meet fake tensors ("Cannot access data pointer of Tensor"). The build would
                # fail in the first job, and its error named neither liger nor a way out.
                self.compiled = (
                    "off (compile_mode aot: kernels: liger patched the model with liger-kernel, whose Triton "
                    "kernels torch.export cannot trace; kernels: auto builds the package without them, inductor "
                    "fusing the same ops)"
                )
                self.logger.warning("compile: %s; running eagerly", self.compiled)
            else:
                self.aot_pending = True  # the first padded batch builds or loads the package (embed.aot)
                self.compiled = "aot, dynamic shapes, whole model: the package loads on the first batch"
        elif params.compile:
            mode = None if params.compile_mode in ("auto", "default") else params.compile_mode
            static = bool(self.buckets or self.packed_buckets)
            blocks = accel.repeated_blocks(self.model)
            if static:
                # One graph per bucket shape (per block, where torch keys graphs by module);
                # allow that many before dynamo gives up and runs the rest uncompiled.
                n_graphs = (len(self.buckets or self.packed_buckets) + 4) * max(1, len(blocks))
                cfg = torch._dynamo.config
                for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
                    if hasattr(cfg, name):
                        setattr(cfg, name, max(getattr(cfg, name), n_graphs))
            if blocks:
                # Regional: each repeated layer compiled in place (see accel.repeated_blocks);
                # embeddings, masks and pooling stay eager.
                for block in blocks:
                    block.compile(dynamic=not static, mode=mode)
                scope = f"per block ({len(blocks)} x {type(blocks[0]).__name__})"
            else:
                self.model = torch.compile(self.model, dynamic=not static, mode=mode)
                scope = "whole model"
            self.compiled = f"{mode or 'default'}, {'static bucket shapes' if static else 'dynamic shapes'}, {scope}"
            if cache is not None:
                self.compiled += f", cache {cache}"
        self.logger.info(
            "compile: %s; length buckets: %s%s",
            self.compiled,
            list(self.buckets) or "off",
            f"; packed-length buckets: {len(self.packed_buckets)}" if self.packed_buckets else "",
        )

    @property
    def token_budget(self) -> int:
        return self.backoff.token_budget

    # ---- tokenization -------------------------------------------------------------

    def _tokenize_raw(self, texts: Sequence[str]) -> list[list[int]]:
        return _ids(self._tokenize_lazy(texts))

    def _tokenize_lazy(self, texts: Sequence[str]) -> list:
        """`_tokenize_raw` with the ids of the `tokenizers` path still in their Encodings
        (items with `.ids`); transformers' path gives lists of ids. `_ids` makes lists."""
        if self.prefix is not None:
            return self.prefix.encodings(texts)
        if self.backend is not None:
            return self._backend_encodings(self.backend, texts)
        return self._tokenize_hf(texts)

    def _tokenize_hf(self, texts: Sequence[str]) -> list[list[int]]:
        kwargs: dict[str, Any] = {"truncation": True, "max_length": self.max_length} if self.truncate else {}
        return self.tokenizer(
            list(texts), padding=False, return_attention_mask=False, return_token_type_ids=False, **kwargs
        )["input_ids"]

    def _tokenize_backend(self, backend, texts: Sequence[str]) -> list[list[int]]:
        """The `tokenizers` library directly: the same ids as `_tokenize_hf`, without
        transformers building a Python dict per text around them (MiniLM, 20,000 texts,
        2 cores: 4.8 s instead of 6.8 s, benchmarks/bench_tokenize.py). Batch encoding runs on the
        job's threads (RAYON_NUM_THREADS, set by start_gpu_job)."""
        return [e.ids for e in self._backend_encodings(backend, texts)]

    def _backend_encodings(self, backend, texts: Sequence[str]) -> list:
        """`tokenizers` Encodings of `texts`, with the state transformers would set."""
        # The state transformers sets on every call, set here too (only when it differs:
        # setting it borrows the backend mutably).
        want = (
            {"max_length": self.max_length, "stride": 0, "strategy": "longest_first", "direction": self.tokenizer.truncation_side}
            if self.truncate
            else None
        )
        if backend.truncation != want:
            if want is None:
                backend.no_truncation()
            else:
                backend.enable_truncation(**want)
        if backend.padding is not None:
            backend.no_padding()
        split = bool(getattr(self.tokenizer, "split_special_tokens", False))
        if hasattr(backend, "encode_special_tokens") and backend.encode_special_tokens != split:
            backend.encode_special_tokens = split
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # _fast: no character offsets
        return encode(list(texts), add_special_tokens=True)

    def _fast_backend(self):
        """The fast tokenizer's `tokenizers` backend, if it gives the same ids as
        transformers on a probe (texts with a prompt, unicode, spaces, one longer than
        the max length); else None, and transformers tokenizes."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None or not getattr(self.tokenizer, "is_fast", False):
            return None
        for cls in type(self.tokenizer).__mro__:  # a class that adds its own encoding steps: not bypassed
            if cls.__module__.startswith("transformers.tokenization_utils"):
                break
            if any(m in vars(cls) for m in ("__call__", "_encode_plus", "_batch_encode_plus", "encode_plus", "batch_encode_plus")):
                self.logger.info("tokenize: through transformers (%s has its own encoding steps)", cls.__name__)
                return None
        word = "Zürich naïve 東京 co-operate, "
        special = " ".join(str(t) for t in self.tokenizer.all_special_tokens[:4])
        probe = [" leading", "plain text.", word * 3, f"{special} inside {special}."]
        probe.append((word * (self.max_length // 4 + 8)) if self.truncate else word * 64)
        probe += [(self.prompt or "") + t for t in probe]
        try:
            same = self._tokenize_backend(backend, probe) == self._tokenize_hf(probe)
        except Exception as exc:  # noqa: BLE001 - an unusual tokenizer: transformers does it
            self.logger.info("tokenize: through transformers (the tokenizers backend failed: %s)", exc)
            return None
        if not same:
            self.logger.info("tokenize: through transformers (the tokenizers backend gave other ids on a probe)")
            return None
        return backend

    def _prefix_tokenizer(self) -> PrefixTokenizer | None:
        """Long texts tokenized from the head that truncation keeps (see `embed.prefix`),
        where this tokenizer gives the same ids that way; else None (logged)."""
        if self.backend is None or not self.truncate:
            return None
        why = "it truncates from the left" if self.tokenizer.truncation_side != "right" else None
        why = why or premise_fails(self.backend, self.prompt or "")
        if why:
            self.logger.info("tokenize: whole texts (%s)", why)
            return None
        return PrefixTokenizer(
            lambda texts: self._backend_encodings(self.backend, texts),
            self.max_length,
            self.backend.num_special_tokens_to_add(False),
        )

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids as sentence-transformers makes them: prompt + text, truncated, no padding.

        Texts are not stripped: sentence-transformers 6 passes them to the tokenizer as
        they are (byte-level BPE tokenizers see leading spaces).
        """
        return _ids(self._tokenize_prompted(texts))

    def _tokenize_prompted(self, texts: Sequence[str]) -> list:
        """`tokenize`, its ids as `_tokenize_lazy` leaves them."""
        if self.prompt:
            texts = [self.prompt + t for t in texts]
        return self._tokenize_lazy(texts)

    def _prompt_length(self) -> int:
        # As sentence-transformers: the tokenized prompt, minus a trailing special token (EOS/SEP).
        ids = self._tokenize_raw([self.prompt])[0]
        if ids and ids[-1] in set(self.tokenizer.all_special_ids):
            return len(ids) - 1
        return len(ids)

    def _nothing_to_pool(self, text: str, row: int, n_tokens: int) -> str:
        """Why text `row` of this job, `n_tokens` tokens with the prompt, leaves no token to pool."""
        if not self.prompt_length:
            return (
                f"text {row} of this job (0-based) is empty and this tokenizer adds no special "
                "token to it: there is no token to pool (set a prompt, or use a model whose "
                "tokenizer adds one, as BERT's [CLS]/[SEP] or Qwen3's end-of-text)"
            )
        no_special = ", and this tokenizer adds no special token after the text"
        if self.truncate and n_tokens >= self.max_length:
            what = f"is cut at max_length ({self.max_length} tokens) within the prompt"
            fix = "raise embedding.max_length, or shorten the prompt"
            no_special = ""  # what it adds after the text is cut off with it
        elif not text:
            what = "is empty"
            fix = "remove the record, or use a model whose tokenizer ends every text with a special token"
        else:  # byte-level BPE reads a one-word text into the prompt's trailing space ("Query: " + "a")
            what = "gives no token of its own (the tokenizer reads it into the prompt's last token, or as nothing)"
            fix = "remove the record, or use a prompt or a model that leaves it a token of its own"
        if set(self.spec.pooling) == {"cls"}:
            st_gives = "the vector of the first token of its padded batch (a pad or the prompt's first token)"
        else:
            st_gives = "a vector of zeros (NaN with max pooling)"
        return (
            f"text {row} of this job (0-based) {what}, so its {n_tokens} tokens are all the prompt's, which this "
            f"model's Pooling excludes (include_prompt: false){no_special}: there is no token of its own to pool "
            f"(sentence-transformers gives {st_gives}, which no search tells from any other such text; {fix})"
        )

    # ---- forward --------------------------------------------------------------------

    def _forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, lengths: np.ndarray | None = None, graph: bool = False
    ) -> torch.Tensor:
        """Embeddings of a padded batch, or of a packed one (`lengths` given: then
        `attention_mask` holds the position ids). `graph`: a full batch of a bucket shape
        (see embed.graphs), replayed from its shape's CUDA graph, or run and then captured."""
        graphs = self.graphs if graph and lengths is None else None
        replay = graphs is not None and graphs.ready(tuple(input_ids.shape))
        if not replay and self.device.type != "cpu":
            input_ids = input_ids.to(self.device, non_blocking=True)
            attention_mask = attention_mask.to(self.device, non_blocking=True)
        with self._attention_scope():
            if self.before_forward is not None:
                self.before_forward(input_ids)
            if replay:
                return graphs.replay(input_ids, attention_mask)
            emb = self._run_model(input_ids, attention_mask, lengths)
        if graphs is not None:
            graphs.capture(input_ids, attention_mask, emb)
        return emb

    def _attention_scope(self):
        return accel.sdpa_without_cudnn() if not self.cudnn_attention.on else contextlib.nullcontext()

    def _graph_forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """A padded batch's forward on device tensors: what a CUDA graph records."""
        with self._attention_scope():
            return self._run_model(input_ids, attention_mask, None)

    def _run_model(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, lengths: np.ndarray | None) -> torch.Tensor:
        if self.params.compile and self.params.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        if lengths is None:
            if self.padding_mask.on:
                mask = None  # no padding mask: SDPA runs is_causal (see accel.unmasked_attention)
            elif self.attention_bias.on:
                mask = accel.attention_bias(attention_mask)
            else:
                mask = attention_mask
            if self.aot_pending:
                return self._aot_start(input_ids, mask, attention_mask)
            forward = self.aot or self._eager_padded
            return self.head(pool(forward(input_ids, mask), attention_mask, self.spec.pooling, self.prompt_length))
        # Masks and positions from the host's lengths: nothing here waits for the device.
        total = input_ids.shape[1]
        positions = attention_mask + self.position_offset if self.position_offset else attention_mask
        kwargs: dict[str, Any] = {"input_ids": input_ids, "position_ids": positions}
        if self.packing.value == "flex_attention":
            kwargs["attention_mask"] = accel.flex_packed_mask(lengths, total, self.causal, self.device)
        elif self.packing.value != "flash_attention_2":  # flash varlen finds texts from the position ids
            seg = torch.from_numpy(accel.segment_ids(lengths, total)).to(self.device, non_blocking=True)
            kwargs["attention_mask"] = accel.dense_packed_mask(seg, self.causal)
        hidden, mask = accel.repad(last_hidden(self.model(**kwargs)), lengths)
        return self.head(pool(hidden, mask, self.spec.pooling, self.prompt_length))

    def _eager_padded(self, input_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The model's last hidden state of a padded batch, `mask` as `_run_model` passes it."""
        return last_hidden(self.model(input_ids=input_ids, attention_mask=mask))

    def _aot_start(self, input_ids: torch.Tensor, mask: torch.Tensor | None, attention_mask: torch.Tensor) -> torch.Tensor:
        """compile_mode aot, the first padded batch: build or load the package (embed.aot),
        run the batch both ways and keep the package only where every row agrees; the
        batch's eager embeddings either way. A failure leaves the job eager, said why."""
        want = self.head(pool(self._eager_padded(input_ids, mask), attention_mask, self.spec.pooling, self.prompt_length))
        self.aot_pending = False  # (not before: a batch out of memory splits, and its first half starts here again)
        rows, width = self.params.max_batch_size, self.width_limit
        path = {
            "mask": aot.mask_kind(mask),
            "cudnn_attention": self.cudnn_attention.on,
            "kernels": self.kernels.value,
            "attn_implementation": getattr(self.model.config, "_attn_implementation", None),
        }
        try:
            forward = aot.AotForward(self.model, self.device, self.dtype, (rows, width), path, self.logger)
            how = forward.prepare(input_ids, mask)
            got = self.head(pool(forward(input_ids, mask), attention_mask, self.spec.pooling, self.prompt_length))
            agree = aot.rows_agree(got, want)
            if agree < aot.CHECK_COSINE:
                raise ValueError(f"its first batch's embeddings differ from the eager ones (cosine {agree:.6f} < {aot.CHECK_COSINE})")
        except torch.OutOfMemoryError:
            self.aot_pending = True  # the back-off splits the batch; its first half loads the package again
            raise
        except Exception as exc:  # noqa: BLE001 - an optional speed-up never stops a run
            self.compiled = f"off (compile_mode aot failed: {aot.error_line(exc)})"
            self.logger.warning("compile: %s; running eagerly", self.compiled)
            return want
        self.aot = forward
        self.compiled = f"aot, dynamic shapes (rows <= {rows}, width <= {width}), whole model, package {forward.package}: {how}"
        self.logger.info("compile: %s; first batch's cosine to eager %.6f", self.compiled, agree)
        return want

    def _timed_forward(self, batch: Batch, ids: torch.Tensor, mask: torch.Tensor, stats: EncodeStats) -> torch.Tensor:
        """`_forward`; with `compile`, the first batch of each new shape is timed, and
        counted as warm-up when it compiled a graph (with dynamic shapes most new
        shapes reuse one) or, in a CUDA-graph mode, recorded one."""
        shape = tuple(ids.shape)
        lengths = batch.lengths if batch.packed else None
        if self.params.compile_mode == "aot" and self.params.compile:
            # One warm-up: the first padded batch, which builds or loads the package.
            first = self.aot_pending and lengths is None
            if first:
                self._sync()
                t0 = time.perf_counter()
            emb = self._forward(ids, mask, lengths)
            if first:
                self._sync()
                self._count_warmup(stats, batch, time.perf_counter() - t0, "compile (aot): first batch")
            return emb
        if shape in self.seen_shapes or not self.params.compile:
            self.seen_shapes.add(shape)
            return self._forward(ids, mask, lengths, graph=self._graph_shape(batch, shape))
        self._sync()
        graphs = _graphs_compiled()
        t0 = time.perf_counter()
        emb = self._forward(ids, mask, lengths)
        self._sync()
        self.seen_shapes.add(shape)
        secs = time.perf_counter() - t0
        if graphs is not None and _graphs_compiled() == graphs and self.params.compile_mode not in accel.CUDA_GRAPH_MODES:
            return emb  # a shape the compiled graphs already cover (CUDA graph modes record one per shape)
        self._count_warmup(stats, batch, secs, "compiled shape", "(first batch of that shape)")
        return emb

    def _count_warmup(self, stats: EncodeStats, batch: Batch, secs: float, what: str, note: str = "") -> None:
        """A forward that compiled (or loaded compiled code): logged, and timed apart from the steady state."""
        self.logger.info("%s %s in %.1f s%s", what, "x".join(map(str, batch.input_ids.shape)), secs, f" {note}" if note else "")
        stats.warmup_seconds += secs
        stats.warmup_shapes += 1
        stats.warmup_items += len(batch.rows)
        stats.warmup_tokens += int(batch.lengths.sum())

    def _graph_shape(self, batch: Batch, shape: tuple[int, ...]) -> bool:
        """Whether a batch may replay (or record) a CUDA graph: a full padded batch of a
        bucket width, no filler rows. Part batches and out-of-memory splits run eagerly,
        so the graphs are one per width (at the current token budget)."""
        if self.graphs is None or not self.graphs.active or batch.packed:
            return False
        rows, width = shape
        full = bucket_rows(width, self.token_budget, self.params.max_batch_size)
        return width in self.buckets and rows == full == len(batch.rows)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def warmup(self, widths: Sequence[int] | None = None) -> float:
        """Run (compile) each bucket shape once on filler input; return the seconds
        (0 without buckets: dynamic shapes compile on the first batches).
        `encode` does this lazily for the shapes it meets; a benchmark calls it first."""
        if not self.params.compile:
            return 0.0
        stats = EncodeStats()
        with torch.inference_mode():
            if self.packed_buckets:
                for total in widths or self.packed_buckets:
                    batch = _pad_packed(pack([[self.pad_id]], np.arange(1)), int(total), self.pad_id)
                    self._timed_forward(batch, torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask), stats)
            for width in widths or self.buckets:
                rows = max(1, min(self.params.max_batch_size, self.token_budget // width))
                batch = collate_to([[self.pad_id]], np.arange(1), self.pad_id, self.left_pad, width, rows)
                self._timed_forward(batch, torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask), stats)
        return stats.warmup_seconds

    def _run(self, ready: _Ready, window_start: int, stats: EncodeStats) -> list[tuple[np.ndarray, torch.Tensor]]:
        """Embed one batch, splitting it (and lowering the budget) on out-of-memory."""
        tensors = {id(ready.batch): (ready.input_ids, ready.attention_mask)}  # collated (and pinned) ahead

        def forward(piece: Batch | _PackedView) -> torch.Tensor:
            batch = piece.batch if isinstance(piece, _PackedView) else piece
            ids, mask = tensors.pop(id(batch), (None, None))
            if ids is None:
                ids, mask = torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask)
            emb = self._timed_forward(batch, ids, mask, stats)[: len(batch.rows)]  # filler rows dropped
            stats.batches += 1
            stats.padded_tokens += batch.padded_tokens
            stats.real_tokens += int(batch.lengths.sum())
            return emb

        def split(piece: Batch | _PackedView, rows: int) -> list[Batch | _PackedView]:
            if isinstance(piece, _PackedView):  # pieces padded to a bucket again: no new shape
                return [_PackedView(self._bucket_packed(p)) for p in split_batch(piece.batch, rows, self.left_pad)]
            return split_batch(piece, rows, self.left_pad)

        first = _PackedView(ready.batch) if ready.batch.packed else ready.batch
        before = self.backoff.backoffs
        try:
            done = self.backoff.run(first, forward, split, row_offset=window_start, noun="text")
        except TooLargeError as exc:
            raise TextTooLargeError(str(exc), exc.row, exc.n_tokens) from None
        finally:
            stats.oom_backoffs += self.backoff.backoffs - before
            tensors.clear()
        return [(batch.rows, emb) for batch, emb in done]

    # ---- the producer ------------------------------------------------------------

    def _bucket_packed(self, batch: Batch) -> Batch:
        """A packed batch padded to its packed-length bucket (unchanged without buckets)."""
        if not self.packed_buckets:
            return batch
        return _pad_packed(batch, bucket_width(batch.padded_tokens, self.packed_buckets), self.pad_id)

    def _batches(self, ids: list[list[int]], sorted_lengths: np.ndarray, order: np.ndarray):
        """A window's batches: padded to their longest row (the default), to a bucket
        shape, or packed."""
        budget, max_rows = self.token_budget, self.params.max_batch_size
        if self.packing.on:
            for s, e in plan_packed_batches(sorted_lengths, budget, max_rows):
                yield self._bucket_packed(pack(ids, order[s:e]))
        elif self.buckets:
            for s, e, width, rows in plan_bucketed_batches(sorted_lengths, self.buckets, budget, max_rows):
                if self.graphs is not None and e - s < rows:
                    # A group's last, part batch: no graph replays it, so no filler rows.
                    yield collate(ids, order[s:e], self.pad_id, self.left_pad)
                else:
                    yield collate_to(ids, order[s:e], self.pad_id, self.left_pad, width, rows)
        else:
            for s, e in plan_batches(sorted_lengths, budget, max_rows):
                yield collate(ids, order[s:e], self.pad_id, self.left_pad)

    def _produce(
        self,
        texts: Sequence[str],
        windows: list[tuple[int, int, int]],
        out: queue.Queue,
        stop: threading.Event,
        stats: EncodeStats,
    ) -> None:
        """Collate each group's batches (see `sort_groups`) into `out`, while a helper
        thread tokenizes the next two groups.

        The helper returns Encodings, and this thread takes their ids: making Python
        lists of them holds the interpreter's lock, which the helper's next call into
        `tokenizers` does not need, so that call runs meanwhile. (MiniLM, 20,000 synthetic
        texts, 2 cores: the lists took 0.29 s of 1.90 s of tokenizing; the library's part
        shrinks with more cores, the lists' part does not.)"""

        def tokenize(chunk: Sequence[str]) -> tuple[list, float]:
            t0 = time.perf_counter()
            items = self._tokenize_prompted(chunk)
            if not self.ids_on_collate_thread:
                items = _ids(items)
            return items, time.perf_counter() - t0

        def put(item) -> bool:
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        pin = self.device.type == "cuda"
        starts = {w: a for w, a, _ in windows}

        def submit(pool_, group):
            w, idx, _ = group
            a = starts[w]
            return pool_.submit(tokenize, [texts[a + i] for i in idx])

        try:
            groups = sort_groups(texts, windows)
            with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shardflow-tokenize") as pool_:
                ahead = deque(submit(pool_, g) for g in groups[:2])
                for i, (w, idx, window_done) in enumerate(groups):
                    items, seconds = ahead.popleft().result()
                    if i + 2 < len(groups):
                        ahead.append(submit(pool_, groups[i + 2]))
                    t0 = time.perf_counter()
                    ids = _ids(items)
                    stats.tokenize_seconds += seconds + time.perf_counter() - t0
                    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
                    # Pooling reads the tokens past the first prompt_length (0 without
                    # include_prompt: false); a row with none would pool to zeros or NaN.
                    pooled = lengths > self.prompt_length
                    if not pooled.all():
                        k = int(np.argmin(pooled))
                        first = starts[w] + int(idx[k])
                        raise EmptyTextError(self._nothing_to_pool(texts[first], first, int(lengths[k])), first)
                    if self.truncate:
                        stats.at_max_length += int((lengths >= self.max_length).sum())
                    order = length_order(lengths)
                    batches = self._batches(ids, lengths[order], order)
                    while True:
                        t0 = time.perf_counter()
                        batch = next(batches, None)
                        if batch is None:
                            break
                        batch = replace(batch, rows=idx[batch.rows])  # rows index the window
                        t_ids = torch.from_numpy(batch.input_ids)
                        t_mask = torch.from_numpy(batch.attention_mask)
                        if pin:
                            t_ids, t_mask = t_ids.pin_memory(), t_mask.pin_memory()
                        stats.collate_seconds += time.perf_counter() - t0
                        if not put(_Ready(w, batch, t_ids, t_mask)):
                            return
                    if window_done and not put(_WindowEnd(w)):
                        return
            put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
            put(_Failed(exc))

    # ---- encode --------------------------------------------------------------------

    def encode(
        self,
        texts: Sequence[str],
        resume_dir: str | Path | None = None,
        progress: Callable[[int, int], None] | None = None,
        job: JobIdentity | str | None = None,
    ) -> np.ndarray:
        """Embed `texts` -> array [len(texts), dim] of `output_dtype`, in input order.

        With `resume_dir`, finished windows are saved there and reused by a later call
        with the same texts and params (the folder is left in place: the caller removes
        it once the final output is safely written; `embed_chunk` does); `job`, the
        output they are for (core.parts.PartStore), goes into the folder's attempt records.
        `progress(done, total)` is called after every batch.
        """
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text {i} is {type(t).__name__}, not str")
        stats = EncodeStats(
            items=len(texts),
            start_unix=time.time(),
            compile=self.compiled,
            length_buckets=list(self.buckets or self.packed_buckets) or None,
            packing=self.packing.value,
            packing_reason=self.packing.reason,
            kernels=self.kernels.value,
            kernels_reason=self.kernels.reason,
            padding_mask="skipped" if self.padding_mask.on else "passed",
            padding_mask_reason=self.padding_mask.reason,
            cudnn_attention=self.cudnn_attention.value,
            cudnn_attention_reason=self.cudnn_attention.reason,
            attention_bias=self.attention_bias.value,
            attention_bias_reason=self.attention_bias.reason,
            cuda_graphs=self.cuda_graphs.value,
            cuda_graphs_reason=self.cuda_graphs.reason,
        )
        graphs = self.graphs
        before = (graphs.captured, graphs.replays, graphs.capture_seconds) if graphs is not None else None
        t0 = time.perf_counter()
        n, win = len(texts), self.params.window
        windows = [(w, a, min(a + win, n)) for w, a in enumerate(range(0, n, win))]
        stats.parts = len(windows)
        result = np.empty((n, self.dim), dtype=self.output_dtype)

        store = None
        todo = windows
        if resume_dir is not None:
            store = PartStore(
                resume_dir,
                {
                    "n_texts": n,
                    "window": win,
                    "dim": self.dim,
                    "output_dtype": self.params.output_dtype,
                    "texts_sha256": texts_fingerprint(texts),
                    "identity": digest(self.identity),
                },
                device=str(self.device),
                job=job,
            ).open()
            todo = []
            for w, a, b in windows:
                part = store.load_array(w, (b - a, self.dim), self.output_dtype)
                if part is None:
                    todo.append((w, a, b))
                else:
                    result[a:b] = part
                    stats.resumed_parts += 1
            if stats.resumed_parts:
                self.logger.info(
                    "resuming from %s: %d of %d parts already done", store.folder, stats.resumed_parts, len(windows)
                )

        done = n - sum(b - a for _, a, b in todo)
        heads = (self.prefix.cut, self.prefix.retried) if self.prefix else (0, 0)
        if todo:
            done = self._encode_windows(texts, todo, result, store, stats, done, progress)
        if graphs is not None:
            stats.graphs_captured = graphs.captured - before[0]
            stats.graph_replays = graphs.replays - before[1]
            stats.graph_capture_seconds = graphs.capture_seconds - before[2]
            if graphs.off_reason:
                stats.cuda_graphs, stats.cuda_graphs_reason = "off", graphs.off_reason
        if store is not None:  # the killed attempts before this one (their records stay until the folder goes)
            for key, value in store.attempt_totals().items():
                setattr(stats, key, value)
        if self.prefix is not None:
            stats.tokenized_heads = self.prefix.cut - heads[0]
            stats.tokenized_heads_retried = self.prefix.retried - heads[1]
        stats.seconds = time.perf_counter() - t0
        stats.end_unix = time.time()
        stats.compile = self.compiled  # as it ended (compile_mode aot: loaded, or off and why)
        self.last_stats = stats
        s = stats.as_dict()
        self.logger.info(
            "embedded %d texts (%d computed, %d parts resumed) in %.1f s: %.1f texts/s, %.0f tokens/s, "
            "%.1f%% padding, %d batches, %d out-of-memory back-offs",
            n,
            stats.items_embedded,
            stats.resumed_parts,
            stats.seconds,
            s["items_per_s"],
            s["tokens_per_s"],
            100 * s["padding_fraction"],
            stats.batches,
            stats.oom_backoffs,
        )
        if graphs is not None:
            self.logger.info(
                "CUDA graphs: %d batches replayed, %d shapes captured in %.2f s (%d graphs in all)%s",
                stats.graph_replays,
                stats.graphs_captured,
                stats.graph_capture_seconds,
                len(graphs.graphs),
                f"; off: {graphs.off_reason}" if graphs.off_reason else "",
            )
        return result

    def _encode_windows(self, texts, todo, result, store, stats, done, progress) -> int:
        bounds = {w: (a, b) for w, a, b in todo}
        q: queue.Queue = queue.Queue(maxsize=64)
        stop = threading.Event()
        producer = threading.Thread(
            target=self._produce, args=(texts, todo, q, stop, stats), daemon=True, name="shardflow-collate"
        )
        producer.start()
        pending: dict[int, list[tuple[np.ndarray, torch.Tensor]]] = {}
        last_log = time.perf_counter()
        t0 = last_log
        try:
            with torch.inference_mode():
                while True:
                    waited = time.perf_counter()
                    item = q.get()
                    stats.host_wait_seconds += time.perf_counter() - waited
                    if item is _DONE:
                        break
                    if isinstance(item, _Failed):
                        raise item.error
                    if isinstance(item, _Ready):
                        if not stats.batches:
                            stats.first_batch_seconds = stats.host_wait_seconds
                        a, _ = bounds[item.window]
                        launched = time.perf_counter()
                        pending.setdefault(item.window, []).extend(self._run(item, a, stats))
                        stats.launch_seconds += time.perf_counter() - launched
                        done += len(item.batch.rows)
                        stats.items_embedded += len(item.batch.rows)
                        if progress is not None:
                            progress(done, len(texts))
                        now = time.perf_counter()
                        if now - last_log >= PROGRESS_EVERY_S:
                            last_log = now
                            self.logger.info(
                                "embedded %d/%d texts, %.1f texts/s",
                                done,
                                len(texts),
                                stats.items_embedded / (now - t0),
                            )
                        continue
                    # _WindowEnd: gather the window (one device sync), store, checkpoint.
                    a, b = bounds[item.window]
                    pieces = pending.pop(item.window, [])
                    rows = np.concatenate([r for r, _ in pieces])
                    gathered = time.perf_counter()
                    emb = torch.cat([e for _, e in pieces]).float().cpu().numpy()
                    stats.gather_seconds += time.perf_counter() - gathered
                    block = np.empty((b - a, self.dim), dtype=self.output_dtype)
                    block[rows] = emb.astype(self.output_dtype, copy=False)
                    result[a:b] = block
                    if store is not None:
                        store.save_array(item.window, block)
        finally:
            stop.set()
            producer.join()
        return done


def _ids(items: list) -> list[list[int]]:
    """Token ids as lists, from Encodings (`.ids`) or lists already."""
    return [x if isinstance(x, list) else x.ids for x in items]


def _graphs_compiled() -> int | None:
    """Graphs torch.compile has built in this process (None where torch does not say)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    return int(counters["stats"]["unique_graphs"])


class _PackedView:
    """A packed batch as the out-of-memory back-off sees it: `input_ids.shape` is
    (texts, mean tokens per text), so rows x width is (at most) its token count and splitting
    halves its texts (the back-off treats one row as one text)."""

    def __init__(self, batch: Batch):
        self.batch = batch
        self.rows = batch.rows
        self.lengths = batch.lengths
        n = max(len(batch.rows), 1)
        # Rounded down: rows x width never exceeds the tokens, so a batch padded up to
        # exactly the budget is not cut (into pieces of new, unbucketed lengths) before it runs.
        self.input_ids = SimpleNamespace(shape=(n, max(1, batch.padded_tokens // n)))


def _pad_packed(batch: Batch, total: int, pad_id: int) -> Batch:
    """A packed batch extended to `total` tokens by a filler run (positions 0, its own
    segment: `segment_ids` marks it -1), so compiled shapes stay few."""
    extra = total - batch.padded_tokens
    if extra <= 0:
        return batch
    ids = np.concatenate([batch.input_ids, np.full((1, extra), pad_id, dtype=np.int64)], axis=1)
    pos = np.concatenate([batch.attention_mask, np.zeros((1, extra), dtype=np.int64)], axis=1)
    return Batch(rows=batch.rows, lengths=batch.lengths, input_ids=ids, attention_mask=pos, packed=True)


# --------------------------------------------------------------------------- one chunk


def embed_chunk(
    chunk_path: str | Path,
    out_npy: str | Path,
    out_ids_parquet: str | Path,
    params: EmbedParams,
    resume_root: str | Path,
    logger: logging.Logger | None = None,
    *,
    encoder: Encoder | None = None,
) -> dict[str, Any]:
    """Embed one chunk file into `out_npy` (+ ids parquet), resumably; return run statistics
    (the encoder's EncodeStats, and the job's peak GPU memory from its start, model loading
    included: core.devices.peak_memory, null on the CPU).

    Resume state lives in `<resume_root>/<resume_key(chunk, params)>` and is removed
    once both outputs are written, with the folders of its killed attempts on other
    hardware (the same output, run and settings: core.parts.remove_job_parts), whose
    attempts the stats count. `encoder` reuses an already loaded model.
    """
    logger = logger or log
    started = time.time()  # a folder of this job worked in since is another attempt's, still running
    running = controller.find()  # the Snakemake that records this job's outputs
    reset_peak_memory(encoder.device if encoder is not None else params.device)  # the job's peak: loading included
    encoder = encoder or load_encoder(params, logger)
    if encoder.params != params:
        raise ValueError("encoder was loaded with different params")
    ids, texts = read_chunk(chunk_path)
    folder = resume_folder(resume_root, resume_key(chunk_path, params, encoder.identity))
    job = job_identity(out_npy, chunk_path, encoder.settings)
    with naming_records(chunk_path, ids, TextTooLargeError, EmptyTextError):
        emb = encoder.encode(texts, resume_dir=folder, job=job)
    controller.stop_if_gone(running, f"the finished parts are kept in {folder}")
    write_npy(out_npy, emb)
    write_ids_parquet(out_ids_parquet, ids)
    stats = encoder.last_stats.as_dict()
    # Outputs are safe: the parts are no longer needed, nor are those of killed attempts
    # on other hardware, whose time counts with the folder's own killed attempts'.
    stats.update(remove_job_parts(folder, resume_root, job, started, stats))
    stats.update(
        device=str(encoder.device),
        dtype=dtype_name(encoder.dtype),
        dim=encoder.dim,
        output_dtype=params.output_dtype,
        chunk=logical_path(chunk_path),
        **peak_memory(encoder.device),  # null on the CPU
    )
    return stats
