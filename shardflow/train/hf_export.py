"""Write a trained GPT as a Hugging Face GPT-2 folder (config.json + model.safetensors).

    export_gpt2(model, "out/hf", eot_id=50256)
    AutoModelForCausalLM.from_pretrained("out/hf")     # offline; same logits as ours

Our parameter names already match GPT2LMHeadModel's. Two differences remain:
- GPT-2 keeps its linear layers as `Conv1D` (y = x @ W + b, W of shape (in, out)),
  ours are `nn.Linear` (y = x @ W.T + b): c_attn, c_proj and c_fc weights are transposed.
- GPT-2 always has biases; a model trained with bias=False gets zero biases, which
  computes the same function.
The head is tied to the token embedding (tie_word_embeddings), so lm_head.weight is
not stored. No transformers import is needed to write the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from shardflow.core.atomic import atomic_path, write_json
from shardflow.train.model import GPT, LAYER_NORM_EPS

CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def gpt2_config(model: GPT, eot_id: int | None = None, bos_is_eot: bool = True) -> dict:
    """`bos_is_eot`: whether a text begins after end-of-text in the training data (each
    document ended with it); not so in a position split, which holds no end-of-text."""
    cfg = model.config
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.block_size,
        "n_ctx": cfg.block_size,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": None,  # 4 * n_embd, as ours
        "activation_function": "gelu_new",  # tanh-approximated GELU
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "bos_token_id": eot_id if bos_is_eot else None,
        "eos_token_id": eot_id,
        "torch_dtype": "float32",
    }


def gpt2_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights under GPT-2's names and layouts (fp32, CPU, contiguous)."""
    out = {}
    for name, p in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied to transformer.wte.weight
        t = p.detach().float().cpu()
        out[name] = (t.t() if name.endswith(CONV1D_SUFFIXES) else t).contiguous()
    if not model.config.bias:
        for name, t in list(out.items()):
            if name.endswith(".weight") and "wte" not in name and "wpe" not in name:
                width = t.shape[1] if name.endswith(CONV1D_SUFFIXES) else t.shape[0]
                out[name[: -len("weight")] + "bias"] = torch.zeros(width)
    return out


def export_gpt2(model: GPT, folder: str | os.PathLike, eot_id: int | None = None, bos_is_eot: bool = True) -> Path:
    """Write `folder`/config.json and `folder`/model.safetensors (each atomically)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "model.safetensors") as tmp:
        save_file(gpt2_state_dict(model), str(tmp), metadata={"format": "pt"})
    write_json(folder / "config.json", gpt2_config(model, eot_id, bos_is_eot))
    return folder

