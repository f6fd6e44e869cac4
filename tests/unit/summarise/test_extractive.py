"""MMR sentence selection: a hand-made example with a fake encoder, then the real bundled MiniLM."""

from __future__ import annotations

import numpy as np
import pytest

from shardflow.summarise.extractive import extractive_summaries, mmr_select
from shardflow.summarise.params import SummariseParams
from shardflow.summarise.pipeline import summarise_texts
from shardflow.summarise.sentences import split_sentences

# s0 and s1 are the same direction; s2 is close to them; s3 is orthogonal.
# Centroid (0.7, 0.15, 0.25), norm 0.758: relevance s0 = s1 = 0.923, s2 = 0.857, s3 = 0.330.
VECTORS = {
    "Alpha one.": [1.0, 0.0, 0.0],
    "Alpha two.": [1.0, 0.0, 0.0],
    "Beta.": [0.8, 0.6, 0.0],
    "Gamma.": [0.0, 0.0, 1.0],
}
DOC = " ".join(VECTORS)


class FakeEncoder:
    """Looks sentences up in a table; counts calls to show one encode per batch of documents."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def encode(self, texts):
        self.calls.append(list(texts))
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def test_mmr_by_hand():
    e = np.array(list(VECTORS.values()))
    # lambda 0.7: s0 first (ties with s1, earlier wins); then s1 scores 0.7*0.923 - 0.3*1 = 0.346,
    # s2 0.7*0.857 - 0.3*0.8 = 0.360, s3 0.7*0.330 = 0.231 -> s2.
    assert mmr_select(e, 2, 0.7) == [0, 2]
    assert mmr_select(e, 2, 1.0) == [0, 1]  # relevance only: the duplicate
    assert mmr_select(e, 2, 0.0) == [0, 3]  # diversity only: the orthogonal one
    assert mmr_select(e, 4, 0.7) == [0, 1, 2, 3]
    assert mmr_select(e * 5, 2, 0.7) == [0, 2]  # scale does not matter: rows are normalised


def test_output_is_in_document_order():
    # The centroid is the diagonal, so the last row (on it) is picked first; then rows 0
    # and 1 tie exactly (0.7 * 0.707 - 0.3 * 0.707) and the earlier one wins.
    enc = FakeEncoder({"East.": [1.0, 0.0], "North.": [0.0, 1.0], "Diagonal.": [0.7, 0.7]})
    assert mmr_select(enc.encode(["East.", "North.", "Diagonal."]), 2, 0.7) == [0, 2]
    assert extractive_summaries(["East. North. Diagonal."], enc, k=2) == [["East.", "Diagonal."]]


def test_extractive_summaries_with_fake_encoder():
    enc = FakeEncoder(VECTORS)
    short = "Alpha one. Gamma."
    out = extractive_summaries([DOC, short, DOC], enc, k=2, mmr_lambda=0.7)
    assert out == [["Alpha one.", "Beta."], ["Alpha one.", "Gamma."], ["Alpha one.", "Beta."]]
    # One encoder call for the whole batch; the short document (<= k sentences) is not embedded.
    assert len(enc.calls) == 1 and len(enc.calls[0]) == 8
    assert extractive_summaries([short], enc, k=3) == [["Alpha one.", "Gamma."]]
    assert len(enc.calls) == 1


def test_summarise_texts_dispatch():
    assert summarise_texts([DOC], SummariseParams(method="lead", k=2)) == [["Alpha one.", "Alpha two."]]
    params = SummariseParams(method="extractive", k=2)
    assert summarise_texts([DOC], params, FakeEncoder(VECTORS)) == [["Alpha one.", "Beta."]]
    with pytest.raises(ValueError, match="needs an encoder"):
        summarise_texts([DOC], params)
    with pytest.raises(ValueError, match="mmr_lambda"):
        SummariseParams(mmr_lambda=1.5)
    with pytest.raises(TypeError):
        SummariseParams(lambda_=0.5)  # an unknown key is an error


def test_real_minilm_two_documents():
    from shardflow.core.models import resolve_model
    from shardflow.embed.engine import EmbedParams, load_encoder

    enc = load_encoder(EmbedParams(model=resolve_model("default"), device="cpu", threads=1))
    docs = [
        (
            "The city council approved a new budget on Monday. The budget raises spending on schools. "
            "Council members approved the budget after a long debate. A local bakery won a pastry prize. "
            "Schools will hire forty new teachers next year."
        ),
        "Heavy rain flooded the valley. Residents were evacuated.",
    ]
    first = extractive_summaries(docs, enc, k=2)
    assert first == extractive_summaries(docs, enc, k=2)  # deterministic
    assert len(first[0]) == 2 and set(first[0]) <= set(split_sentences(docs[0]))
    assert [docs[0].index(s) for s in first[0]] == sorted(docs[0].index(s) for s in first[0])
    assert "A local bakery won a pastry prize." not in first[0]  # off topic: far from the centroid
    assert first[1] == ["Heavy rain flooded the valley.", "Residents were evacuated."]


def _mmr_with_the_whole_matrix(embeddings: np.ndarray, k: int, mmr_lambda: float) -> list[int]:
    """MMR as mmr_select computed it before 2026-11-29: the n x n cosine matrix up front."""
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    e = embeddings / np.where(norms == 0, 1.0, norms)
    centroid = e.mean(axis=0)
    centroid /= np.linalg.norm(centroid)
    relevance, similarity = e @ centroid, e @ e.T
    picked, redundancy = [], np.zeros(len(e))
    for _ in range(k):
        score = mmr_lambda * relevance - (1 - mmr_lambda) * redundancy
        score[picked] = -np.inf
        best = int(np.argmax(score))
        redundancy = similarity[best].copy() if not picked else np.maximum(redundancy, similarity[best])
        picked.append(best)
    return sorted(picked)


def test_a_document_of_thousands_of_sentences_needs_no_n_by_n_matrix():
    """A badly split book or a log file: 4,500 sentences made a 4,500 x 4,500 float64 matrix
    (162 MB; 50,000 sentences would be 20 GB). Above FULL_MATRIX_MAX_SENTENCES only the k
    rows MMR reads are computed, and the picks are those of the whole matrix."""
    import tracemalloc

    n, dim = 4500, 8
    e = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    tracemalloc.start()
    try:
        picked = mmr_select(e, 5, 0.7)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * n * dim * 8  # a few copies of the embeddings, never n x n (n * n * 8 bytes)
    assert picked == _mmr_with_the_whole_matrix(e.astype(np.float64), 5, 0.7)
    from shardflow.summarise.extractive import FULL_MATRIX_MAX_SENTENCES

    assert n > FULL_MATRIX_MAX_SENTENCES


def test_documents_under_the_cap_pick_as_with_the_whole_matrix():
    rng = np.random.default_rng(1)
    for n in (4, 50, 300):
        e = rng.normal(size=(n, 16))
        assert mmr_select(e, 3, 0.7) == _mmr_with_the_whole_matrix(e, 3, 0.7)
