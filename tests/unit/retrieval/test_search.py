"""Blocked exact search equals brute force; identical-id drop; id mapping."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from shardflow.retrieval.search import LazyRun, TopK, exact_search, load_embeddings, to_run


def grid_vectors(rng, n, dim=6):
    # Small integers: every dot product is exact in float32 and ties are common.
    return rng.integers(-2, 3, size=(n, dim)).astype(np.float32)


def brute_force(queries, docs, k):
    """Full score matrix, sorted by (score descending, row ascending)."""
    scores = queries.astype(np.float64) @ docs.astype(np.float64).T
    rows = np.arange(docs.shape[0])
    order = np.stack([np.lexsort((rows, -s))[:k] for s in scores])
    return order, np.take_along_axis(scores, order, axis=1)


@pytest.mark.parametrize("k", [1, 4, 50, 300])
@pytest.mark.parametrize("block_size", [1, 3, 16, 97, 300, 10_000])
def test_blocked_equals_brute_force_with_ties(k, block_size):
    rng = np.random.default_rng(k * 1000 + block_size)
    docs, queries = grid_vectors(rng, 300), grid_vectors(rng, 13)
    hits = exact_search(queries, docs, k, block_size=block_size, query_block_size=5, device="cpu")
    want_rows, want_scores = brute_force(queries, docs, k)
    assert hits.indices.shape == (13, min(k, 300))
    np.testing.assert_array_equal(hits.indices, want_rows)
    np.testing.assert_array_equal(hits.scores, want_scores.astype(np.float32))


def test_equal_rows_rank_by_row_index():
    docs = np.ones((10, 4), dtype=np.float32)
    docs[7] *= 2  # the single best
    hits = exact_search(np.ones((1, 4), dtype=np.float32), docs, 5, block_size=3)
    assert hits.indices.tolist() == [[7, 0, 1, 2, 3]]


def test_float16_memmap_from_path(tmp_path):
    rng = np.random.default_rng(0)
    docs = grid_vectors(rng, 200).astype(np.float16)
    path = tmp_path / "embeddings.npy"
    np.save(path, docs)
    assert isinstance(load_embeddings(path), np.memmap)
    queries = grid_vectors(rng, 4)
    hits = exact_search(queries, path, 10, block_size=64)
    np.testing.assert_array_equal(hits.indices, brute_force(queries, docs, 10)[0])


def test_reads_docs_one_block_at_a_time():
    class Recorder:
        """Array stand-in that records the row ranges asked of it."""

        def __init__(self, arr):
            self.arr, self.shape, self.ndim, self.dtype = arr, arr.shape, arr.ndim, arr.dtype
            self.sizes = []

        def __getitem__(self, key):
            self.sizes.append(len(range(*key.indices(self.shape[0]))))
            return self.arr[key]

    rng = np.random.default_rng(1)
    docs = Recorder(grid_vectors(rng, 1000))
    exact_search(grid_vectors(rng, 3), docs, 20, block_size=128)
    assert max(docs.sizes) <= 128 and sum(docs.sizes) == 1000


def test_normalize_gives_cosine():
    rng = np.random.default_rng(2)
    docs = rng.standard_normal((50, 8)).astype(np.float32) * rng.uniform(0.1, 10, (50, 1)).astype(
        np.float32
    )
    queries = rng.standard_normal((3, 8)).astype(np.float32) * 7
    hits = exact_search(queries, docs, 5, normalize=True, block_size=16)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    cos = unit(queries.astype(np.float64)) @ unit(docs.astype(np.float64)).T
    np.testing.assert_array_equal(hits.indices, np.argsort(-cos, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(hits.scores, np.sort(cos, axis=1)[:, ::-1][:, :5], atol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "faiss"])
@pytest.mark.parametrize(("side", "value"), [("query", np.nan), ("query", np.inf), ("document", np.nan),
                                             ("document", -np.inf)])
def test_a_non_finite_vector_is_refused_naming_its_file_row_and_id_in_either_backend(tmp_path, backend, side, value):
    """A score with a NaN vector is NaN, which the backends ranked apart: torch scored such
    a document -1 (MTEB's rule for a NaN score), faiss's heap never kept it, so the same
    input gave two rankings (and a NaN query -1 for every document under torch, no hit at
    all under faiss). Either vector is refused, in both backends, naming the file, the row
    and the id; a document in a later block by its row in the whole file."""
    if backend == "faiss":
        pytest.importorskip("faiss")
    docs = np.eye(4, 2, dtype=np.float32) + 0.5
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    (queries if side == "query" else docs)[1 if side == "query" else 3, 0] = value
    np.save(tmp_path / "q.npy", queries)
    np.save(tmp_path / "d.npy", docs)
    file, row, name = (tmp_path / "q.npy", 1, "q1") if side == "query" else (tmp_path / "d.npy", 3, "d3")
    message = rf"{file}: row {row} \(counting from 0\), {side} id '{name}', holds NaN or infinity"
    for normalize in (False, True):
        with pytest.raises(ValueError, match=message):
            exact_search(tmp_path / "q.npy", tmp_path / "d.npy", 2, block_size=2, backend=backend, device="cpu",
                         normalize=normalize, query_ids=["q0", "q1"], doc_ids=["d0", "d1", "d2", "d3"])
    # Arrays, and no ids: the error says which side and row.
    with pytest.raises(ValueError, match=rf"{side} vectors: row {row} \(counting from 0\) holds NaN or infinity"):
        exact_search(queries, docs, 2, block_size=2, backend=backend, device="cpu")


def test_drop_identical_ids_still_returns_k():
    rng = np.random.default_rng(3)
    docs = grid_vectors(rng, 120)
    doc_ids = [f"d{i}" for i in range(120)]
    # Query i is doc i (so its twin scores highest), except the last: no twin in the corpus.
    queries = np.concatenate([docs[:5], grid_vectors(rng, 1)])
    query_ids = doc_ids[:5] + ["lonely"]
    k = 7
    hits = exact_search(
        queries,
        docs,
        k,
        block_size=32,
        query_ids=query_ids,
        doc_ids=doc_ids,
        drop_identical_ids=True,
    )
    assert hits.indices.shape == (6, k)
    for qi, qid in enumerate(query_ids):
        assert qid not in [doc_ids[r] for r in hits.indices[qi]]
    full_rows, _ = brute_force(queries, docs, 120)
    for qi in range(6):
        want = [r for r in full_rows[qi] if doc_ids[r] != query_ids[qi]][:k]
        assert hits.indices[qi].tolist() == want


def test_drop_identical_ids_pads_when_corpus_is_small():
    docs = np.eye(3, dtype=np.float32)
    hits = exact_search(
        docs, docs, 5, query_ids=["a", "b", "x"], doc_ids=["a", "b", "c"], drop_identical_ids=True
    )
    assert hits.indices.shape == (3, 3)
    assert hits.indices[0].tolist() == [1, 2, -1] and hits.scores[0, 2] == -np.inf
    assert hits.indices[2].tolist() == [2, 0, 1]
    run = to_run(hits, ["a", "b", "x"], ["a", "b", "c"])
    assert list(run["a"]) == ["b", "c"]
    assert list(run["x"]) == ["c", "a", "b"] and run["x"]["c"] == 1.0


def test_to_run_keeps_rank_order():
    docs = np.array([[1.0], [3.0], [2.0]], dtype=np.float32)
    run = to_run(exact_search(np.array([[1.0]], dtype=np.float32), docs, 3), ["q"], ["x", "y", "z"])
    assert list(run["q"].items()) == [("y", 3.0), ("z", 2.0), ("x", 1.0)]


def test_a_lazy_run_reads_as_to_run_makes_it_from_a_list_or_an_arrow_array():
    """LazyRun is to_run's run made a query at a time: the same queries in the same order,
    the same rankings (padding skipped; a doc id twice in a ranking, a query id twice,
    kept as the dict keeps them), from ids in a list or in one pyarrow array."""
    import pyarrow as pa

    hits = TopK(
        indices=np.array([[2, 0, -1], [1, 3, 0], [3, 2, 1]]),
        scores=np.array([[0.5, 0.25, -np.inf], [0.75, 0.5, 0.125], [1.0, 0.5, 0.0]], dtype=np.float32),
    )
    query_ids, doc_ids = ["a", "b", "a"], ["x", "y", "z", "x"]
    run = to_run(hits, query_ids, doc_ids)
    assert run == {"a": {"x": 1.0, "z": 0.5, "y": 0.0}, "b": {"y": 0.75, "x": 0.125}}
    for ids in (doc_ids, pa.array(doc_ids, pa.large_string())):
        lazy = LazyRun(hits, query_ids, ids)
        assert list(lazy.items()) == list(run.items()) and len(lazy) == 2
        assert [list(lazy[q].items()) for q in lazy] == [list(r.items()) for r in run.values()]
        assert "b" in lazy and "c" not in lazy
    with pytest.raises(ValueError, match="2 query ids for 3 result rows"):
        LazyRun(hits, ["a", "b"], doc_ids)


def test_errors():
    docs, queries = np.zeros((4, 3), np.float32), np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="dimension mismatch"):
        exact_search(np.zeros((2, 5), np.float32), docs, 1)
    with pytest.raises(ValueError, match="backend"):
        exact_search(queries, docs, 1, backend="annoy")
    with pytest.raises(ValueError, match="query_ids and doc_ids"):
        exact_search(queries, docs, 1, drop_identical_ids=True)
    with pytest.raises(ValueError, match="positive"):
        exact_search(queries, docs, 0)


def test_faiss_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` fail
    with pytest.raises(ImportError, match="faiss-cpu"):
        exact_search(np.zeros((1, 2), np.float32), np.zeros((3, 2), np.float32), 1, backend="faiss")


def test_faiss_backend_matches_torch():
    pytest.importorskip("faiss")
    rng = np.random.default_rng(4)
    docs, queries = rng.standard_normal((500, 16)).astype(np.float32), rng.standard_normal(
        (7, 16)
    ).astype(np.float32)
    a = exact_search(queries, docs, 20, block_size=128, normalize=True)
    b = exact_search(queries, docs, 20, block_size=128, normalize=True, backend="faiss")
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)


@pytest.mark.parametrize("k", [1, 5, 50, 300])
@pytest.mark.parametrize("block_size", [7, 64, 1000])
def test_faiss_backend_breaks_ties_at_a_blocks_cut_by_row_as_torch_does(k, block_size):
    """Scores that are exact in float32 are equal in both backends, so faiss must return
    torch's hits: at a block's k-th place faiss kept whichever tied document its heap
    met (row 23 for row 16 in one block of 300 rows), not the lowest rows."""
    pytest.importorskip("faiss")
    rng = np.random.default_rng(k * 1000 + block_size)
    docs, queries = grid_vectors(rng, 300), grid_vectors(rng, 30)  # 30 queries: faiss's BLAS path
    for q in (queries, queries[:3]):  # 3: its path for fewer than 20 queries
        hits = exact_search(q, docs, k, block_size=block_size, backend="faiss")
        want_rows, want_scores = brute_force(q, docs, k)
        np.testing.assert_array_equal(hits.indices, want_rows)
        np.testing.assert_array_equal(hits.scores, want_scores.astype(np.float32))
        torch_hits = exact_search(q, docs, k, block_size=block_size, device="cpu")
        np.testing.assert_array_equal(hits.indices, torch_hits.indices)


def test_faiss_backend_with_every_score_tied_keeps_the_lowest_rows():
    """A zero query (an empty text under cosine) ties every document in every block."""
    pytest.importorskip("faiss")
    docs = grid_vectors(np.random.default_rng(5), 200)
    queries = np.zeros((2, 6), dtype=np.float32)
    queries[1, 0] = 1.0
    hits = exact_search(queries, docs, 10, block_size=64, normalize=True, backend="faiss")
    assert hits.indices[0].tolist() == list(range(10)) and (hits.scores[0] == 0).all()
    np.testing.assert_array_equal(hits.indices, exact_search(queries, docs, 10, block_size=64, normalize=True).indices)


def test_twin_rows_of_an_arrow_id_column_are_those_of_its_list():
    """retrieval_evaluate passes the corpus ids as one pyarrow array (read_id_array): the
    twin check finds the same rows, a duplicated id's both, without a str per document."""
    import pyarrow as pa

    from shardflow.retrieval.search import _twin_rows

    doc_ids = ["d0", "q1", "d2", "q1", "q0", "d5"]
    query_ids = ["q0", "q1", "q9"]
    want = _twin_rows(query_ids, doc_ids)
    assert want.tolist() == [[4, -2], [1, 3], [-2, -2]]
    assert _twin_rows(query_ids, pa.array(doc_ids, pa.large_string())).tolist() == want.tolist()
    assert _twin_rows(query_ids, pa.array([], pa.large_string())).shape == (3, 0)


@pytest.mark.parametrize("backend", ["torch", "faiss"])
def test_queries_copied_a_slice_at_a_time_give_the_bytes_of_one_copy(monkeypatch, backend):
    """Queries reach the device QUERY_COPY_BYTES at a time (float32, checked, normalised
    row by row): the scores and rows are the bytes a whole copy gives, and a NaN in a
    later slice is named by its row in the whole matrix."""
    if backend == "faiss":
        pytest.importorskip("faiss")
    import shardflow.retrieval.search as search

    rng = np.random.default_rng(5)
    docs, queries = rng.normal(size=(40, 6)).astype(np.float32), rng.normal(size=(11, 6)).astype(np.float32)
    whole = exact_search(queries, docs, 5, block_size=16, backend=backend, device="cpu", normalize=True)
    monkeypatch.setattr(search, "QUERY_COPY_BYTES", 3 * 6 * 4)  # 3 rows a copy: 3, 3, 3, 2
    sliced = exact_search(queries, docs, 5, block_size=16, backend=backend, device="cpu", normalize=True)
    assert whole.scores.tobytes() == sliced.scores.tobytes() and whole.indices.tobytes() == sliced.indices.tobytes()
    queries[9, 1] = np.nan
    with pytest.raises(ValueError, match=r"query vectors: row 9 \(counting from 0\) holds NaN"):
        exact_search(queries, docs, 5, backend=backend, device="cpu")


def test_query_rows_search_a_slice_of_a_file_named_by_its_rows_there(tmp_path):
    """`query_rows` searches those rows of a query file alone, as they rank in a search of
    the whole file, and a bad vector among them is named by its row in the file and its
    id; a step or drop_identical_ids with it is refused."""
    rng = np.random.default_rng(6)
    docs, queries = grid_vectors(rng, 50), grid_vectors(rng, 12)
    np.save(tmp_path / "q.npy", queries)
    whole = exact_search(tmp_path / "q.npy", docs, 4, block_size=7, device="cpu")
    part = exact_search(tmp_path / "q.npy", docs, 4, block_size=7, device="cpu", query_rows=range(5, 9))
    assert (part.indices == whole.indices[5:9]).all() and (part.scores == whole.scores[5:9]).all()
    queries[7, 0] = np.inf
    np.save(tmp_path / "q.npy", queries)
    ids = [f"q{i}" for i in range(12)]
    with pytest.raises(ValueError, match=rf"{tmp_path / 'q.npy'}: row 7 \(counting from 0\), query id 'q7',"):
        exact_search(tmp_path / "q.npy", docs, 4, device="cpu", query_ids=ids, query_rows=range(5, 9))
    for bad in ({"query_rows": range(0, 12, 2)}, {"query_rows": range(2), "drop_identical_ids": True}):
        with pytest.raises(ValueError, match="query_rows: a range of step 1, without drop_identical_ids"):
            exact_search(queries, docs, 4, device="cpu", query_ids=ids, doc_ids=[f"d{i}" for i in range(50)], **bad)


def test_normalising_in_place_gives_the_bits_of_the_quotient_it_replaced():
    """_normalize_np divides a part of queries (or a faiss block) in place, not into two
    more arrays of its size: the same float32 bits as `(x / max(norm, 1e-12)).astype`."""
    from shardflow.retrieval.search import _normalize_np

    rng = np.random.default_rng(7)
    for dim in (1, 7, 384, 1024):
        x = (rng.normal(size=(300, dim)) * rng.uniform(1e-8, 1e3, size=(300, 1))).astype(np.float32)
        x[0] = 0.0  # a zero row: divided by 1e-12, stays 0
        before = (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)
        got = _normalize_np(x)
        assert got is x and got.dtype == np.float32 and got.tobytes() == before.tobytes(), dim


def test_a_gpu_slice_is_at_most_half_the_memory_free_on_it(monkeypatch):
    """A 4 GiB slice beside a corpus block, its scores and the CUDA context overran a MIG
    slice of 5 GB (out of memory at every retry): the budget is at most half what the GPU
    has free, still in whole query blocks; a CPU job's budget reads no GPU."""
    import shardflow.retrieval.search as search

    asked = []
    monkeypatch.setattr(search.torch.cuda, "mem_get_info", lambda dev: asked.append(str(dev)) or (2 * 2**30, 5 * 2**30))
    step = search.slice_queries("cuda:1", 1024, 10)
    assert asked == ["cuda:1"] and step % search.QUERY_BLOCK == 0
    assert step * (4 * 1024 + search.HIT_BYTES * 10) <= 2**30 < (step + search.QUERY_BLOCK) * (4 * 1024 + 240)
    monkeypatch.setattr(search.torch.cuda, "mem_get_info", lambda dev: (80 * 2**30, 80 * 2**30))
    assert search.slice_queries("cuda", 1024, 10) == 990_208  # a large GPU: SLICE_BYTES["cuda"]
    asked.clear()
    search.slice_queries("cpu", 1024, 10)
    assert asked == []
