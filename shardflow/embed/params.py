"""What decides an embedding run: `EmbedParams`, its resolution to a device, dtype
and token budget, and the identity of the output (for resume keys).

Everything here is cheap: no model weights are loaded.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from shardflow.core import parts as _resume
from shardflow.embed.stconfig import ModelSpec, load_model_spec

DEVICES = ("auto", "cpu", "cuda")  # plus "cuda:N"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
OUTPUT_DTYPES = ("float32", "float16")
# Default token budgets. On CPU, throughput per token is flat from ~512 to ~2048
# padded tokens per batch and drops beyond (cache misses), while smaller batches
# pad less: 1024 measured best for MiniLM on 2 cores. GPUs want large batches.
AUTO_TOKEN_BUDGET = {"cpu": 1024, "cuda": 32768}


@dataclass(frozen=True)
class EmbedParams:
    """Everything that decides how (and, for the last bits, what) a chunk embeds to.

    token_budget: most padded tokens (rows x longest row) in one batch; None picks
        a per-device default (AUTO_TOKEN_BUDGET).
    max_batch_size: most rows in one batch, whatever the budget.
    max_length: truncate here instead of the model's max_seq_length.
    prompt / prompt_name: as in `SentenceTransformer.encode`; neither means the
        model's default prompt, if it has one.
    window: texts per resume part (and per sort).
    threads: torch intra-op threads (None: leave torch's setting).
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

    def __post_init__(self) -> None:
        if self.device not in DEVICES and not (self.device.startswith("cuda:") and self.device[5:].isdigit()):
            raise ValueError(f"device {self.device!r}: expected auto, cpu, cuda or cuda:N")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: expected auto or one of {sorted(DTYPES)}")
        if self.output_dtype not in OUTPUT_DTYPES:
            raise ValueError(f"output_dtype {self.output_dtype!r}: expected one of {OUTPUT_DTYPES}")
        for name in ("max_batch_size", "window"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError("token_budget must be >= 1 or None")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError("max_length must be >= 1 or None")
        if self.threads is not None and self.threads < 1:
            raise ValueError("threads must be >= 1 or None")
        if self.prompt is not None and self.prompt_name is not None:
            raise ValueError("give either prompt or prompt_name, not both")


def resolve_device(name: str) -> torch.device:
    """auto: the current CUDA device if there is one, else CPU."""
    if name == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {name!r} requested but CUDA is not available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(f"device {name!r} requested but only {torch.cuda.device_count()} CUDA devices exist")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """auto: bf16 on CUDA (fp16 where bf16 is unsupported), fp32 on CPU."""
    if name != "auto":
        return DTYPES[name]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def resolve_token_budget(params: EmbedParams, device: torch.device) -> int:
    return params.token_budget or AUTO_TOKEN_BUDGET.get(device.type, AUTO_TOKEN_BUDGET["cuda"])


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def output_identity(params: EmbedParams, spec: ModelSpec | None = None) -> dict[str, Any]:
    """Everything that decides the output bytes for given texts (for resume keys and manifests)."""
    import transformers

    spec = spec or load_model_spec(params.model)
    device = resolve_device(params.device)
    identity = {
        "format": _resume.FORMAT_VERSION,
        "model": _resume.model_fingerprint(spec.folder),
        "device": device.type,
        "dtype": dtype_name(resolve_dtype(params.dtype, device)),
        "prompt": spec.resolve_prompt(params.prompt, params.prompt_name),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    identity.update(
        {
            k: v
            for k, v in asdict(params).items()
            if k not in ("model", "device", "dtype", "prompt", "prompt_name", "threads")
        }
    )
    identity["token_budget"] = resolve_token_budget(params, device)
    if device.type == "cpu":  # CPU kernels split work by thread count, which can move the last bits
        identity["threads"] = params.threads or torch.get_num_threads()
    return identity


def resume_key(chunk_path: str | Path, params: EmbedParams, identity: dict[str, Any] | None = None) -> str:
    """Folder name for a chunk's resume state: hash of chunk bytes + model identity + params."""
    identity = identity if identity is not None else output_identity(params)
    return _resume.digest({"chunk": _resume.sha256_file(chunk_path), "identity": identity})[:24]
