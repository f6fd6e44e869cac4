"""Extractive summaries: pick k sentences by Maximal Marginal Relevance (MMR)
over sentence embeddings, and print them in document order.

For each document: split it into sentences (`split_sentences`), embed them
(rows L2-normalised here, so dot products are cosines whatever the encoder),
and take the normalised mean of the rows as the document centroid. Then pick
greedily, k times, the unpicked sentence i maximising

    lambda * cos(i, centroid) - (1 - lambda) * max_{j picked} cos(i, j)

(the penalty is 0 for the first pick). Exact ties go to the earlier sentence
(`np.argmax` returns the first maximum), so the choice is a pure function of
the embeddings. A document with k or fewer sentences is returned whole.

Memory: MMR reads only the k rows of the cosine matrix that belong to picked
sentences. Up to `FULL_MATRIX_MAX_SENTENCES` sentences the whole n x n matrix is
computed in one product (at most 128 MiB; the way every summary was computed
before 2026-11-29, so those are the same bytes). A longer document (a book split
badly, a log file: 50,000 "sentences" would need 20 GB) gets the k rows alone,
one product per pick, memory growing with n, not n squared. Those rows come from
another BLAS kernel, so their last bits can differ from the matrix's: a pick
changes only where two scores tie to the last bits.

The encoder is passed in already loaded (anything with `.encode(list[str]) ->
np.ndarray`), so a job loads the model once; all sentences of a batch of
documents go to the encoder in one call, letting it batch by length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from shardflow.summarise.sentences import SPLITTERS

# Sentences up to which a document's n x n cosine matrix is computed whole (4096**2
# float64: 128 MiB); above it, only the rows of the picked sentences (module docstring).
FULL_MATRIX_MAX_SENTENCES = 4096


class SentenceEncoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...


def mmr_select(embeddings: np.ndarray, k: int, mmr_lambda: float = 0.7) -> list[int]:
    """Indices of the k rows MMR picks, in document (ascending) order."""
    n = len(embeddings)
    if n <= k:
        return list(range(n))
    e = _normalise(np.asarray(embeddings, dtype=np.float64))
    centroid = _normalise(e.mean(axis=0, keepdims=True))[0]
    relevance = e @ centroid
    similarity = e @ e.T if n <= FULL_MATRIX_MAX_SENTENCES else None
    picked: list[int] = []
    redundancy = np.zeros(n)  # max cosine to a picked row; 0 before the first pick
    for _ in range(k):
        score = mmr_lambda * relevance - (1 - mmr_lambda) * redundancy
        score[picked] = -np.inf
        best = int(np.argmax(score))
        row = similarity[best] if similarity is not None else e @ e[best]
        # Cosines can be negative, so the first pick sets the maximum rather than raising it from 0.
        redundancy = row.copy() if not picked else np.maximum(redundancy, row)
        picked.append(best)
    return sorted(picked)


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)  # a zero row stays zero: cosine 0 to everything


def extractive_summaries(
    texts: Sequence[str], encoder: SentenceEncoder, *, k: int = 3, mmr_lambda: float = 0.7, splitter: str = "prose"
) -> list[list[str]]:
    """The MMR summary (a list of sentences) of each text."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    docs = [SPLITTERS[splitter](t) for t in texts]
    # Only documents longer than k need embeddings.
    todo = [i for i, sents in enumerate(docs) if len(sents) > k]
    flat = [s for i in todo for s in docs[i]]
    vectors = encoder.encode(flat) if flat else np.zeros((0, 1), dtype=np.float32)
    if len(vectors) != len(flat):
        raise ValueError(f"encoder returned {len(vectors)} rows for {len(flat)} sentences")
    out = [list(sents) for sents in docs]
    start = 0
    for i in todo:
        rows = vectors[start : start + len(docs[i])]
        start += len(docs[i])
        out[i] = [docs[i][j] for j in mmr_select(rows, k, mmr_lambda)]
    return out
