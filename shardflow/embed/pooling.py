"""Pooling and the post-pooling head (Dense, Normalize), as sentence-transformers computes them.

Pooling reads token states in the model's dtype and accumulates in float32, so
a bf16/fp16 model gives float32 sentence embeddings; the head then runs in float32.
Padding may be on either side: every mode below finds real tokens through the
attention mask, never by position.
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from shardflow.embed.stconfig import DenseSpec, NormalizeSpec


def last_hidden(out) -> torch.Tensor:
    """A transformers model's last hidden state, from its output object or tuple."""
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def exclude_prompt(mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """Mask out the first `prompt_length` real tokens of every row (include_prompt=False).

    The prompt length counts the leading special token (e.g. [CLS]) too, as in
    sentence-transformers, so that token is excluded along with the prompt.
    """
    first_real = mask.to(torch.int32).argmax(dim=1, keepdim=True)  # 0 without left padding
    positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
    return mask * (positions >= first_real + prompt_length).to(mask.dtype)


def pool(hidden: torch.Tensor, mask: torch.Tensor, modes: tuple[str, ...], prompt_length: int = 0) -> torch.Tensor:
    """Sentence embeddings (float32, [batch, dim * len(modes)]) from token states [batch, seq, dim]."""
    full_mask = mask
    if prompt_length:
        mask = exclude_prompt(mask, prompt_length)
    keep = mask.unsqueeze(-1).bool()
    counts = mask.sum(dim=1, keepdim=True).to(torch.float32).clamp(min=1e-9)
    out = []
    for mode in modes:
        if mode == "cls":
            first = mask.to(torch.int32).argmax(dim=1)
            out.append(hidden[torch.arange(hidden.shape[0], device=hidden.device), first].float())
        elif mode == "lasttoken":
            seq_len = mask.shape[1]
            values, from_end = mask.flip(1).max(dim=1)
            last = torch.where(values == 0, 0, seq_len - 1 - from_end)
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            picked = hidden[rows, last].float()
            out.append(torch.where(values.unsqueeze(-1) == 0, torch.zeros_like(picked), picked))
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            summed = torch.where(keep, hidden, 0).sum(dim=1, dtype=torch.float32)
            out.append(summed / (counts if mode == "mean" else counts.sqrt()))
        elif mode == "max":
            out.append(hidden.masked_fill(~keep, float("-inf")).max(dim=1).values.float())
        elif mode == "weightedmean":
            # Weights 1, 2, ... counted from the first real token, as sentence-transformers does.
            pad_left = full_mask.to(torch.int32).argmax(dim=1, keepdim=True)
            weights = torch.arange(1, mask.shape[1] + 1, device=mask.device).unsqueeze(0) - pad_left
            weights = (weights * mask).to(torch.float32)
            summed = (hidden.float() * weights.unsqueeze(-1)).sum(dim=1)
            out.append(summed / weights.sum(dim=1, keepdim=True).clamp(min=1e-9))
        else:
            raise ValueError(f"unknown pooling mode {mode!r}")
    return out[0] if len(out) == 1 else torch.cat(out, dim=-1)


class _Dense(torch.nn.Module):
    def __init__(self, spec: DenseSpec):
        super().__init__()
        module_path, _, cls_name = spec.activation.rpartition(".")
        act_cls = getattr(importlib.import_module(module_path), cls_name)
        if not (isinstance(act_cls, type) and issubclass(act_cls, torch.nn.Module)):
            raise TypeError(f"Dense activation {spec.activation!r} is not a torch.nn.Module class")
        self.linear = torch.nn.Linear(spec.in_features, spec.out_features, bias=spec.bias)
        self.activation = act_cls()
        self.residual = None
        if spec.use_residual and spec.in_features != spec.out_features:
            self.residual = torch.nn.Linear(spec.in_features, spec.out_features, bias=False)
        self.use_residual = spec.use_residual
        self.load_state_dict(_load_weights(spec), strict=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.activation(self.linear(x))
        if self.use_residual:
            out = out + (x if self.residual is None else self.residual(x))
        return out


class _Normalize(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2, dim=-1)


def _load_weights(spec: DenseSpec) -> dict[str, torch.Tensor]:
    st_file = spec.folder / "model.safetensors"
    if st_file.is_file():
        from safetensors.torch import load_file

        return load_file(str(st_file))
    bin_file = spec.folder / "pytorch_model.bin"
    if bin_file.is_file():
        return torch.load(bin_file, map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"Dense module {spec.folder}: no model.safetensors or pytorch_model.bin")


class _Truncate(torch.nn.Module):
    """The leading `dim` dimensions (config_sentence_transformers.json truncate_dim)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., : self.dim]


def build_head(steps: tuple[DenseSpec | NormalizeSpec, ...], truncate_dim: int | None = None) -> torch.nn.Sequential:
    """The modules after Pooling, in saved order, as one float32 nn.Sequential; then, with
    `truncate_dim`, the cut `SentenceTransformer.encode` makes after the last module (so
    a Normalize before it leaves the kept dimensions as they were, not unit-norm)."""
    layers: list[torch.nn.Module] = []
    for step in steps:
        layers.append(_Dense(step) if isinstance(step, DenseSpec) else _Normalize())
    if truncate_dim is not None:
        layers.append(_Truncate(truncate_dim))
    return torch.nn.Sequential(*layers).eval()
