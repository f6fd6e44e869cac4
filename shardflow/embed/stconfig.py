"""Read a sentence-transformers model folder into a frozen description.

What `SentenceTransformer(path)` does to a text is spread over several files:

- `modules.json`: the module chain, run in the order the file lists it (its `idx`
  values are not read: sentence-transformers reads none). Supported: Transformer, then
  Pooling, then any mix of Dense and Normalize. Anything else (CNN, LSTM,
  WordEmbeddings, StaticEmbedding, Router, LayerNorm...) is refused by name.
- `<transformer>/sentence_bert_config.json`: `max_seq_length`, `do_lower_case`
  (older saves), the transformer task and modality config (newer saves; ST 6 keeps
  the length in `tokenizer_config.json` and lower-casing in `tokenizer.json`).
- `<pooling>/config.json`: the pooling mode(s), `include_prompt` and the width it takes
  (`embedding_dimension`; `word_embedding_dimension` in saves before sentence-transformers 6).
- `config_sentence_transformers.json`: `prompts`, `default_prompt_name`, and
  `truncate_dim` (a Matryoshka model saved with it: `encode` keeps that many leading
  dimensions, after the last module, so a Normalize before it leaves them not unit-norm).

A folder without `modules.json` (a plain Hugging Face model) gets what
sentence-transformers 6 itself gives it: last-token pooling for a causal language model
(its config's first architecture ends in `ForCausalLM`, and `is_causal` is not false),
mean pooling over the last hidden state otherwise, and no normalisation. The tokenizer's
own limit and casing hold, and there are no prompts, truncation or similarity of the
model's: sentence-transformers reads `sentence_bert_config.json` and
`config_sentence_transformers.json` only beside a `modules.json` (one found in such a
folder, say the `0_BERT/` of an old save, is named in `notes` and not read).

A name that is not a local folder is looked up in the local Hugging Face cache
only (`local_files_only=True`): nothing is ever downloaded from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardflow.core.files import read_json
from shardflow.core.models import model_folder

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# sentence-transformers' SimilarityFunction values (similarity_fn_name)
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
# Legacy boolean keys of the pooling config, in sentence-transformers' concatenation order.
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_ST_CONFIG_NAMES = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)
# Transformer config keys read or checked below; any other key is reported in `notes`.
_KNOWN_TRANSFORMER_KEYS = {
    "max_seq_length",
    "do_lower_case",
    "transformer_task",
    "modality_config",
    "module_output_name",
    "backend",
    "unpad_inputs",
    "model_args",
    "model_kwargs",
    "tokenizer_args",
    "processor_kwargs",
    "config_args",
    "config_kwargs",
    "tokenizer_name_or_path",
    "cache_dir",
    "processing_kwargs",
    "query_expansion",
    "query_length",
    "document_length",
}


class UnsupportedModelError(ValueError):
    """The model folder asks for something this engine does not implement."""


@dataclass(frozen=True)
class DenseSpec:
    """A sentence-transformers Dense module: `act(linear(x))` (+ optional residual)."""

    folder: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str  # dotted path of a torch.nn.Module class, e.g. torch.nn.modules.activation.Tanh
    use_residual: bool = False


@dataclass(frozen=True)
class NormalizeSpec:
    """L2 normalisation of the sentence embedding."""


@dataclass(frozen=True)
class ModelSpec:
    """Everything about a sentence-embedding model that decides its output for a text."""

    source: str  # what the caller passed (folder or hub name)
    folder: Path  # resolved local folder
    transformer_folder: Path  # holds config.json, the weights and the tokenizer
    pooling: tuple[str, ...] = ("mean",)
    include_prompt: bool = True
    head: tuple[DenseSpec | NormalizeSpec, ...] = ()
    max_seq_length: int | None = None  # None: the tokenizer's model_max_length
    do_lower_case: bool = False
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt_name: str | None = None
    model_kwargs: tuple[tuple[str, Any], ...] = ()
    tokenizer_kwargs: tuple[tuple[str, Any], ...] = ()
    config_kwargs: tuple[tuple[str, Any], ...] = ()
    has_st_config: bool = True
    notes: tuple[str, ...] = field(default=())
    # How two embeddings compare (config_sentence_transformers.json similarity_fn_name;
    # sentence-transformers' default, cosine, when absent): retrieval scores with it.
    similarity: str = "cosine"
    # config_sentence_transformers.json truncate_dim: the leading dimensions `encode` keeps
    # (None: all).
    truncate_dim: int | None = None
    # A folder without modules.json: the sentence-transformers config files found in it,
    # which sentence-transformers does not read there (before 2026-11-29 they were read).
    unread: tuple[str, ...] = ()
    # modules.json lists its modules in another order than their `idx` values: they run as
    # listed (before 2026-11-29 they ran in idx order, which sentence-transformers never reads).
    listed_out_of_idx_order: bool = False
    # The width of the token embeddings the Pooling module takes, from its config (None: no
    # Pooling config names it, and the transformer's config.json decides: `_token_width`).
    token_dim: int | None = None

    @property
    def normalize(self) -> bool:
        """Whether every embedding is unit-norm: a Normalize module last (a Dense after it
        maps unit vectors to others), and no truncation after it that cuts dimensions off
        (sentence-transformers does not normalise again)."""
        if not self.head or not isinstance(self.head[-1], NormalizeSpec):
            return False
        return self.truncate_dim is None or self.truncate_dim >= _head_dim(self)

    def resolve_prompt(self, prompt: str | None = None, prompt_name: str | None = None) -> str:
        """The text prepended to every input, as `SentenceTransformer.encode` picks it.

        An explicit prompt wins; else the named prompt; else the model's default prompt;
        else none. Returns "" for no prompt.
        """
        if prompt is not None and prompt_name is not None:
            raise ValueError("give either prompt or prompt_name, not both")
        if prompt is not None:
            return prompt
        prompts = dict(self.prompts)
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in prompts:
            what = "prompt_name" if prompt_name is not None else "the model's default_prompt_name"
            raise ValueError(f"{what} {name!r} is not among the model's prompts {sorted(prompts)}")
        return prompts[name] or ""


def resolve_model_folder(name_or_path: str | os.PathLike) -> Path:
    """A local folder as is; otherwise a hub name found in the local HF cache (never
    downloaded): core.models.model_folder, which the summarisation engine shares."""
    return model_folder(str(name_or_path))


def _module_kind(entry: dict[str, Any]) -> str:
    # "sentence_transformers.models.Pooling" and
    # "sentence_transformers.sentence_transformer.modules.pooling.Pooling" are the same module.
    kind = str(entry.get("type", ""))
    if not kind.startswith("sentence_transformers."):
        raise UnsupportedModelError(f"custom module {kind!r} in modules.json is not supported")
    return kind.rsplit(".", 1)[-1]


def _pooling_modes(cfg: dict[str, Any]) -> tuple[str, ...]:
    if "pooling_mode" in cfg:
        mode = cfg["pooling_mode"]
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    else:
        modes = tuple(m for key, m in _LEGACY_POOLING_KEYS.items() if cfg.get(key, False)) or ("mean",)
    for mode in modes:
        if mode not in POOLING_MODES:
            raise UnsupportedModelError(f"pooling mode {mode!r} is not one of {POOLING_MODES}")
    return modes


def _transformer_config(folder: Path) -> dict[str, Any]:
    for name in _ST_CONFIG_NAMES:
        if (folder / name).is_file():
            return read_json(folder / name)
    return {}


def _check_transformer_config(cfg: dict[str, Any], folder: Path) -> tuple[str, ...]:
    """Refuse what changes the output in ways we do not implement; return notes on the rest."""
    task = cfg.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise UnsupportedModelError(f"{folder}: transformer_task {task!r} is not supported (feature-extraction only)")
    modality = cfg.get("modality_config")
    if modality is not None:
        text = modality.get("text")
        extra = sorted(set(modality) - {"text"})
        if extra:
            raise UnsupportedModelError(
                f"{folder}: modality_config has {extra}; only plain text input is supported "
                "(chat-template 'message' models are not)"
            )
        if text != {"method": "forward", "method_output_name": "last_hidden_state"}:
            raise UnsupportedModelError(
                f"{folder}: text modality {text!r} is not supported (forward/last_hidden_state)"
            )
    output_name = cfg.get("module_output_name", "token_embeddings")
    if output_name != "token_embeddings":
        raise UnsupportedModelError(f"{folder}: module_output_name {output_name!r} is not supported")
    if cfg.get("processing_kwargs"):
        raise UnsupportedModelError(f"{folder}: processing_kwargs {cfg['processing_kwargs']!r} are not supported")
    for key in ("query_expansion", "query_length", "document_length"):
        if cfg.get(key) is not None:
            raise UnsupportedModelError(f"{folder}: {key} (multi-vector models) is not supported")
    unknown = sorted(set(cfg) - _KNOWN_TRANSFORMER_KEYS)
    return (f"{folder}: ignored unknown transformer config keys {unknown}",) if unknown else ()


def _kwargs(cfg: dict[str, Any], new: str, old: str) -> tuple[tuple[str, Any], ...]:
    merged = {**cfg.get(old, {}), **cfg.get(new, {})}
    merged.pop("trust_remote_code", None)  # sentence-transformers refuses it from a config too
    return tuple(sorted(merged.items()))


def _truncate_dim(st_cfg: dict[str, Any], path: Path) -> int | None:
    value = st_cfg.get("truncate_dim")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UnsupportedModelError(f"{path}: truncate_dim {value!r} is not a positive integer")
    return value


def _pooling_width(cfg: dict[str, Any], path: Path) -> int | None:
    """The Pooling config's width: `embedding_dimension` (sentence-transformers 6) or
    `word_embedding_dimension` (the saves before); None where it names neither."""
    key = next((k for k in ("embedding_dimension", "word_embedding_dimension") if cfg.get(k) is not None), None)
    if key is None:
        return None
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UnsupportedModelError(f"{path}: {key} {value!r} is not a positive integer")
    return value


def _fallback_pooling(folder: Path) -> str:
    """The pooling sentence-transformers 6 gives a folder without modules.json: last token
    for a causal language model (config.json's first architecture ends in ForCausalLM and
    is_causal is not false: a decoder's last token is the one that has seen the whole
    text), else mean."""
    cfg = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    first = (cfg.get("architectures") or [""])[0]
    return "lasttoken" if str(first).endswith("ForCausalLM") and bool(cfg.get("is_causal", True)) else "mean"


def _plain_spec(source: str, folder: Path) -> ModelSpec:
    """A folder without modules.json, as sentence-transformers 6 loads it: a Transformer on
    the folder with its defaults, then a Pooling (`_fallback_pooling`). It reads no
    sentence-transformers config file there: a `max_seq_length` or `do_lower_case` in a
    sentence_bert_config.json, or prompts and `truncate_dim` in a
    config_sentence_transformers.json, read here gave other vectors with no error (a tiny
    BERT's worst cosine to sentence-transformers': 0.94 with a max_seq_length of 10, 0.96
    with do_lower_case, 0.76 with a default prompt)."""
    pooling = _fallback_pooling(folder)
    why = " (a causal language model)" if pooling == "lasttoken" else ""
    notes = [f"no modules.json: {pooling} pooling{why}, no normalisation (as sentence-transformers does)"]
    unread = tuple(
        name for name in (*_ST_CONFIG_NAMES, "config_sentence_transformers.json") if (folder / name).is_file()
    )
    if unread:
        notes.append(
            f"no modules.json: {', '.join(unread)} not read (sentence-transformers reads them only beside a modules.json)"
        )
    return ModelSpec(
        source=source,
        folder=folder,
        transformer_folder=folder,
        pooling=(pooling,),
        has_st_config=False,
        notes=tuple(notes),
        unread=unread,
    )


def _dense(folder: Path) -> DenseSpec:
    cfg = read_json(folder / "config.json")
    for key in ("module_input_name", "module_output_name"):
        if cfg.get(key, "sentence_embedding") != "sentence_embedding":
            raise UnsupportedModelError(f"{folder}: Dense on {cfg[key]!r} is not supported")
    activation = cfg.get("activation_function", "torch.nn.modules.activation.Tanh") or ""
    if not activation.startswith("torch."):
        raise UnsupportedModelError(f"{folder}: Dense activation {activation!r} is not a torch.nn module")
    return DenseSpec(
        folder=folder,
        in_features=int(cfg["in_features"]),
        out_features=int(cfg["out_features"]),
        bias=bool(cfg.get("bias", True)),
        activation=activation,
        use_residual=bool(cfg.get("use_residual", False)),
    )


def _normalize(folder: Path) -> NormalizeSpec:
    cfg = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    for key in ("module_input_name", "module_output_name"):
        if cfg.get(key, "sentence_embedding") != "sentence_embedding":
            raise UnsupportedModelError(f"{folder}: Normalize on {cfg[key]!r} is not supported")
    return NormalizeSpec()


def load_model_spec(name_or_path: str | os.PathLike) -> ModelSpec:
    """Describe the model at `name_or_path` (folder or cached hub name)."""
    folder = resolve_model_folder(name_or_path)
    if not (folder / "modules.json").is_file():
        return _plain_spec(str(name_or_path), folder)
    st_cfg_path = folder / "config_sentence_transformers.json"
    st_cfg = read_json(st_cfg_path) if st_cfg_path.is_file() else {}
    prompts = tuple(sorted((str(k), v if v is not None else "") for k, v in (st_cfg.get("prompts") or {}).items()))
    default_prompt_name = st_cfg.get("default_prompt_name")
    similarity = st_cfg.get("similarity_fn_name") or "cosine"
    if similarity not in SIMILARITIES:
        raise UnsupportedModelError(
            f"{st_cfg_path}: similarity_fn_name {similarity!r} is not one of sentence-transformers' {SIMILARITIES}"
        )

    truncate_dim = _truncate_dim(st_cfg, st_cfg_path)

    # As listed: sentence-transformers loads and runs the entries in the file's order and
    # reads no `idx` (a file edited by hand can disagree with its idx values).
    modules = read_json(folder / "modules.json")
    kinds = [_module_kind(m) for m in modules]
    idx = [m.get("idx") for m in modules]
    reordered = all(isinstance(i, int) for i in idx) and idx != sorted(idx)
    if len(kinds) < 2 or kinds[0] != "Transformer" or kinds[1] != "Pooling":
        raise UnsupportedModelError(
            f"{folder}: module chain {kinds} is not supported; expected Transformer, Pooling, then Dense/Normalize"
        )
    transformer_folder = folder / modules[0].get("path", "")
    tcfg = _transformer_config(transformer_folder)
    notes = _check_transformer_config(tcfg, transformer_folder)
    if reordered:
        notes += (f"modules.json lists its modules in another order than their idx {idx}: they run as listed, {kinds}",)
    pool_cfg_path = folder / modules[1]["path"] / "config.json"
    pool_cfg = read_json(pool_cfg_path)

    head: list[DenseSpec | NormalizeSpec] = []
    for entry, kind in zip(modules[2:], kinds[2:], strict=True):
        sub = folder / entry.get("path", "")
        if kind == "Dense":
            head.append(_dense(sub))
        elif kind == "Normalize":
            head.append(_normalize(sub))
        else:
            raise UnsupportedModelError(
                f"{folder}: module {kind!r} ({entry.get('type')}) is not supported; "
                "supported after Pooling: Dense, Normalize"
            )

    return ModelSpec(
        source=str(name_or_path),
        folder=folder,
        transformer_folder=transformer_folder.resolve(),
        pooling=_pooling_modes(pool_cfg),
        include_prompt=bool(pool_cfg.get("include_prompt", True)),
        head=tuple(head),
        max_seq_length=tcfg.get("max_seq_length"),
        do_lower_case=bool(tcfg.get("do_lower_case", False)),
        prompts=prompts,
        default_prompt_name=default_prompt_name,
        model_kwargs=_kwargs(tcfg, "model_kwargs", "model_args"),
        tokenizer_kwargs=_kwargs(tcfg, "processor_kwargs", "tokenizer_args"),
        config_kwargs=_kwargs(tcfg, "config_kwargs", "config_args"),
        notes=notes,
        similarity=similarity,
        truncate_dim=truncate_dim,
        listed_out_of_idx_order=reordered,
        token_dim=_pooling_width(pool_cfg, pool_cfg_path),
    )


def output_dim(spec: ModelSpec) -> int:
    """Width of the sentence embedding, as sentence-transformers gives it: the token
    embeddings' width (`_token_width`) times the pooling modes, or the last Dense layer's
    out_features; at most `truncate_dim`. Reads config files only (no weights)."""
    dim = _head_dim(spec)
    return dim if spec.truncate_dim is None else min(dim, spec.truncate_dim)


def _head_dim(spec: ModelSpec) -> int:
    """`output_dim` before truncate_dim: the width the last module gives."""
    dim = _token_width(spec) * len(spec.pooling)
    for step in spec.head:
        if isinstance(step, DenseSpec):
            dim = step.out_features
    return dim


def _token_width(spec: ModelSpec) -> int:
    """The width the Pooling module takes: its config's, else (a folder without
    modules.json, or a hand-written Pooling config) the transformer's `hidden_size` as
    transformers reads config.json, whose config classes map it to the key a model
    names it by (DistilBERT's `dim`, GPT-2's `n_embd`, T5's `d_model`), as
    sentence-transformers reads it. AutoConfig reads the one file: no weights, no hub."""
    if spec.token_dim is not None:
        return spec.token_dim
    from transformers import AutoConfig

    folder = spec.transformer_folder
    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True, **dict(spec.config_kwargs))
    except (OSError, ValueError, KeyError) as exc:
        raise UnsupportedModelError(
            f"{folder}: no embedding width: transformers cannot read its config.json ({exc})"
        ) from exc
    # sentence-transformers' order: the config's own width, then its text model's (multimodal)
    for cfg in (config, config.get_text_config()):
        width = getattr(cfg, "hidden_size", None)
        if isinstance(width, int) and not isinstance(width, bool):
            return width
    raise UnsupportedModelError(
        f"{folder}: no embedding width: transformers' {type(config).__name__} has no hidden_size"
    )
