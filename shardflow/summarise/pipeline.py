"""Summaries by configured method: one entry point for scripts and benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

from shardflow.summarise.extractive import SentenceEncoder, extractive_summaries
from shardflow.summarise.lead import lead_k
from shardflow.summarise.params import SummariseParams


def summarise_texts(
    texts: Sequence[str], params: SummariseParams, encoder: SentenceEncoder | None = None
) -> list[list[str]]:
    """Each text's summary as a list of sentences. "extractive" needs a loaded encoder."""
    if params.method == "lead":
        return [lead_k(t, params.k, params.splitter) for t in texts]
    if encoder is None:
        raise ValueError("method 'extractive' needs an encoder (shardflow.embed.engine.load_encoder)")
    return extractive_summaries(texts, encoder, k=params.k, mmr_lambda=params.mmr_lambda, splitter=params.splitter)
