"""Sentence embeddings with plain transformers + torch, matching sentence-transformers.

    from shardflow.embed import EmbedParams, load_encoder, embed_chunk
    enc = load_encoder(EmbedParams(model="path/to/st-model"))
    vectors = enc.encode(["a text", "another"])

Modules: `stconfig` reads a sentence-transformers folder; `params` holds the run
parameters, their resolution and the resume key; `batching` sorts and cuts
token-budget batches; `pooling` holds pooling and the Dense/Normalize head;
`resume` the part files; `engine` ties them together.
"""

from shardflow.embed.engine import (
    EmbedParams,
    Encoder,
    EncodeStats,
    TextTooLargeError,
    embed_chunk,
    load_encoder,
    resume_key,
)
from shardflow.embed.stconfig import ModelSpec, UnsupportedModelError, load_model_spec

__all__ = [
    "EmbedParams",
    "EncodeStats",
    "Encoder",
    "ModelSpec",
    "TextTooLargeError",
    "UnsupportedModelError",
    "embed_chunk",
    "load_encoder",
    "load_model_spec",
    "resume_key",
]
