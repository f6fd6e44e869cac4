"""Sentence embeddings with plain transformers + torch, matching sentence-transformers.

    from shardflow.embed import EmbedParams, load_encoder, embed_chunk
    enc = load_encoder(EmbedParams(model="path/to/st-model"))
    vectors = enc.encode(["a text", "another"])

Modules: `stconfig` reads a sentence-transformers folder; `params` holds the run
parameters, their resolution and the resume key; `batching` sorts and cuts
token-budget batches; `pooling` holds pooling and the Dense/Normalize head;
`resume` the part files; `engine` ties them together.

The names below are imported on first use: the jobs that only read embeddings (merge,
verify, report) import `shardflow.embed.merge` and friends without paying for torch,
about a second a job here and far more on a cluster's shared filesystem.
"""

import importlib

_EXPORTS = {
    "EmbedParams": "engine",
    "EncodeStats": "engine",
    "Encoder": "engine",
    "TextTooLargeError": "engine",
    "embed_chunk": "engine",
    "load_encoder": "engine",
    "resume_key": "engine",
    "ModelSpec": "stconfig",
    "UnsupportedModelError": "stconfig",
    "load_model_spec": "stconfig",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
