"""Task search: the queries file read into the chunk format, and the embedded queries
searched against a corpus, equal to brute force however they are sliced and blocked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from shardflow.core.columns import write_ids_parquet
from shardflow.core.files import read_json
from shardflow.corpus.chunks import iter_chunk
from shardflow.corpus.readers import ReaderOptions
from shardflow.retrieval import batch
from shardflow.retrieval import search as search_module
from shardflow.retrieval.batch import HITS_SCHEMA, SearchParams, prepare_queries, search_queries

# --- prepare_queries -----------------------------------------------------------------------


def prepared(path, **opts) -> list[tuple[str, str]]:
    """prepare_queries' output, read back as the embed job reads a chunk."""
    out = path.parent / "queries.out.jsonl"
    stats = prepare_queries(str(path), ReaderOptions(**opts), str(out))
    records = [(r.id, r.text) for r in iter_chunk(out)]
    assert stats == {"queries": len(records)}
    return records


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("q.jsonl", '{"id": "zeta", "text": "last first"}\n{"id": "alpha", "text": "then, this"}\n'
                    '{"id": "mid", "text": "and this"}\n'),
        ("q.csv", 'id,text\nzeta,last first\nalpha,"then, this"\nmid,and this\n'),
    ],
)
def test_queries_of_a_table_keep_their_ids_and_the_files_order(tmp_path, name, content):
    (tmp_path / name).write_text(content)
    assert prepared(tmp_path / name) == [("zeta", "last first"), ("alpha", "then, this"), ("mid", "and this")]


def test_without_an_id_field_a_querys_id_is_its_line_number_not_a_path(tmp_path):
    """Plain text (whatever id_field says) and id_field null: the line, from 1. The
    reader's own positional id names the path, which differs between machines."""
    (tmp_path / "q.txt").write_text("second query\nfirst query\n")
    assert prepared(tmp_path / "q.txt") == [("1", "second query"), ("2", "first query")]
    (tmp_path / "q.jsonl").write_text('{"id": "x", "text": "second query"}\n{"id": "y", "text": "first query"}\n')
    assert prepared(tmp_path / "q.jsonl", id_field=None) == [("1", "second query"), ("2", "first query")]


def test_a_repeated_id_names_the_file_its_line_and_the_first(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": f"t{n}"}) + "\n" for n, i in enumerate("abca")))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:4: query id 'a' again \(first on line 1\)"):
        prepare_queries(str(path), ReaderOptions(), str(tmp_path / "out.jsonl"))
    assert not list(tmp_path.glob("out*"))  # nothing published, no temporary left


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"id": "a", "text": "x"}\n{"id": "b", "text": ""}\n', "empty text"),
        ('{"id": "a", "text": "x"}\n{"text": "y"}\n', "missing id field 'id'"),
    ],
)
def test_a_bad_record_is_the_readers_error_naming_file_and_line(tmp_path, content, problem):
    path = tmp_path / "q.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:2: {problem}"):
        prepare_queries(str(path), ReaderOptions(), str(tmp_path / "out.jsonl"))
    assert not list(tmp_path.glob("out*"))


def test_a_csv_querys_line_number_id_is_the_line_an_error_would_name(tmp_path):
    (tmp_path / "q.csv").write_text("text\nsecond query\nfirst query\n")
    assert prepared(tmp_path / "q.csv", id_field=None) == [("2", "second query"), ("3", "first query")]


def test_a_record_without_the_id_or_text_field_advises_the_search_keys_not_the_corpus_ones(tmp_path):
    """The queries' fields are search.id_field and search.text_field (section "search", as
    scripts/search_queries.py reads them); the corpus's keys would send the user astray."""
    path = tmp_path / "q.jsonl"
    path.write_text('{"qid": "a", "question": "x"}\n')
    out = str(tmp_path / "out.jsonl")
    with pytest.raises(ValueError, match=r"set search\.id_field: qid if that key holds the ids, or search\.id_field: null"):
        prepare_queries(str(path), ReaderOptions(text_field="question", section="search"), out)
    with pytest.raises(ValueError, match=r"set search\.text_field: question if that key holds the text"):
        prepare_queries(str(path), ReaderOptions(id_field="qid", section="search"), out)
    (tmp_path / "q.queries").write_text("x\n")
    with pytest.raises(ValueError, match=r"q\.queries: cannot tell the format from the name; set search\.format"):
        prepare_queries(str(tmp_path / "q.queries"), ReaderOptions(section="search"), out)


@pytest.mark.parametrize("name", ["q.jsonl", "q.txt"])
def test_a_file_without_queries_names_the_file_and_the_key(tmp_path, name):
    path = tmp_path / name
    path.write_text("")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: no queries \(search.queries\)"):
        prepare_queries(str(path), ReaderOptions(), str(tmp_path / "out.jsonl"))
    assert not list(tmp_path.glob("out*"))


# --- search_queries ------------------------------------------------------------------------


def brute_force(queries: np.ndarray, docs: np.ndarray, k: int, cosine: bool):
    """Each query's k best rows by (score descending, row ascending), in float64."""
    q, d = queries.astype(np.float64), docs.astype(np.float64)
    if cosine:
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        d = d / np.linalg.norm(d, axis=1, keepdims=True)
    scores = q @ d.T
    rows = np.arange(len(d))
    order = np.stack([np.lexsort((rows, -s))[:k] for s in scores])
    return order, np.take_along_axis(scores, order, axis=1)


def corpus(tmp_path, docs, queries, doc_ids=None, query_ids=None) -> dict:
    """The search job's inputs (as merge and the query embed job write them) and outputs."""
    paths = {name: str(tmp_path / name) for name in ("docs.npy", "ids.parquet", "q.npy", "q.ids.parquet")}
    np.save(paths["docs.npy"], np.asarray(docs, dtype=np.float32))
    np.save(paths["q.npy"], np.asarray(queries, dtype=np.float32))
    write_ids_parquet(paths["ids.parquet"], doc_ids or [f"d{len(docs) - i}" for i in range(len(docs))])
    write_ids_parquet(paths["q.ids.parquet"], query_ids or [f"q{i}" for i in range(len(queries))])
    return paths


def search(tmp_path, paths, **params) -> tuple[dict, dict]:
    outputs = {name: str(tmp_path / file) for name, file in
               (("hits", "hits.parquet"), ("summary", "summary.json"), ("figure", "best.png"))}
    stats = search_queries(paths["docs.npy"], paths["ids.parquet"], paths["q.npy"], paths["q.ids.parquet"],
                           SearchParams(**{"device": "cpu", **params}), outputs)
    return stats, outputs


def vectors(similarity: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if similarity == "dot":
        # Small integers: products exact in float32 and ties common, so the row order
        # among equal scores is checked too.
        return rng.integers(-2, 3, size=(n, 6)).astype(np.float32)
    # Norms from 0.1 to 10: ranked by raw dot products, the long vectors would win.
    return (rng.normal(size=(n, 6)) * rng.uniform(0.1, 10, size=(n, 1))).astype(np.float32)


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_every_querys_hits_are_the_brute_force_ranking(tmp_path, similarity):
    docs, queries = vectors(similarity, 41, 1), vectors(similarity, 9, 2)
    paths = corpus(tmp_path, docs, queries)
    doc_ids = [f"d{41 - i}" for i in range(41)]
    k = 5
    stats, outputs = search(tmp_path, paths, k=k, block_size=7, similarity=similarity)
    table = pq.read_table(outputs["hits"])
    assert table.schema == HITS_SCHEMA
    hits = table.to_pydict()
    assert hits["query_id"] == [f"q{i}" for i in range(9) for _ in range(k)]
    assert hits["rank"] == list(range(1, k + 1)) * 9
    assert hits["id"] == [doc_ids[r] for r in hits["row"]]
    want_rows, want_scores = brute_force(queries, docs, k, similarity == "cosine")
    np.testing.assert_array_equal(np.array(hits["row"]).reshape(9, k), want_rows)
    np.testing.assert_allclose(np.array(hits["score"]).reshape(9, k), want_scores, rtol=1e-5, atol=1e-5)

    summary = read_json(outputs["summary"])
    assert {key: summary[key] for key in ("queries", "documents", "dim", "k", "hits", "similarity", "backend",
                                          "device")} == {
        "queries": 9, "documents": 41, "dim": 6, "k": k, "hits": 9 * k, "similarity": similarity,
        "backend": "torch", "device": "cpu"}
    best = np.quantile(want_scores[:, 0], [0, 0.01, 0.5, 0.99, 1])
    np.testing.assert_allclose([summary["best_score"][q] for q in ("min", "p01", "median", "p99", "max")], best,
                               rtol=1e-5, atol=1e-5)
    assert sum(summary["best_histogram"]["counts"]) == 9
    assert stats["seconds"] >= 0 and {key: stats[key] for key in summary} == summary
    assert Path(outputs["figure"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_equal_scores_go_to_the_earlier_row_and_a_small_corpus_gives_all_of_it(tmp_path):
    docs = np.zeros((4, 3), np.float32)
    docs[:, 0] = [1, 2, 2, 2]  # rows 1 to 3 tie for best
    paths = corpus(tmp_path, docs, [[1, 0, 0]])
    stats, outputs = search(tmp_path, paths, k=10, block_size=2, similarity="dot")
    hits = pq.read_table(outputs["hits"]).to_pydict()
    assert hits["row"] == [1, 2, 3, 0] and hits["rank"] == [1, 2, 3, 4]
    assert (stats["k"], stats["hits"]) == (4, 4)


def test_slices_of_queries_and_blocks_of_documents_give_the_table_of_one_pass(tmp_path, monkeypatch):
    docs, queries = vectors("dot", 23, 3), vectors("dot", 10, 4)
    paths = corpus(tmp_path, docs, queries)
    _, whole = search(tmp_path / "whole", paths, k=4, block_size=10_000, similarity="dot")
    # 3 queries a slice (3, 3, 3, 1), each its own pass over the corpus; a table of 2 rows
    # written at a time (a query's 4 hits in two writes)
    monkeypatch.setattr(search_module, "QUERY_BLOCK", 3)
    monkeypatch.setattr(search_module, "SLICE_BYTES", {"cpu": 1, "cuda": 1})
    monkeypatch.setattr(batch, "WRITE_ROWS", 2)
    _, sliced = search(tmp_path / "sliced", paths, k=4, block_size=5, similarity="dot")
    assert pq.read_table(sliced["hits"]).equals(pq.read_table(whole["hits"]))
    assert read_json(sliced["summary"]) == read_json(whole["summary"])


def test_a_slice_of_queries_fills_the_devices_budget_in_whole_query_blocks(monkeypatch):
    """A million queries of dim 1,024 with k 10 are two passes over the corpus on a GPU
    (990,208 a slice; 5 on the CPU, whose budget is a job's own memory); a deep k shrinks
    the slice to its budget, never below one query block; each slice a whole number of
    blocks."""
    monkeypatch.setattr(search_module.torch.cuda, "mem_get_info", lambda dev: (80 * 2**30, 80 * 2**30))  # an H100's
    for device, dim, k in (("cuda", 1024, 10), ("cuda:1", 384, 1000), ("cpu", 1024, 10), ("cpu", 384, 100_000)):
        step = search_module.slice_queries(device, dim, k)
        budget = search_module.SLICE_BYTES["cpu" if device == "cpu" else "cuda"]
        assert step % search_module.QUERY_BLOCK == 0 and step >= search_module.QUERY_BLOCK
        assert step * (4 * dim + search_module.HIT_BYTES * k) <= budget or step == search_module.QUERY_BLOCK, (device, dim, k, step)
        assert (step + search_module.QUERY_BLOCK) * (4 * dim + search_module.HIT_BYTES * k) > budget, (device, dim, k, step)
    assert search_module.slice_queries("cuda", 1024, 10) == 990_208
    assert -(-1_000_000 // search_module.slice_queries("cpu", 1024, 10)) == 5


def test_a_nan_query_names_the_file_its_row_in_the_whole_file_and_its_id(tmp_path, monkeypatch):
    queries = vectors("cosine", 10, 5)
    queries[7, 2] = np.nan
    paths = corpus(tmp_path, vectors("cosine", 12, 6), queries)
    monkeypatch.setattr(search_module, "QUERY_BLOCK", 3)  # row 7 is row 1 of the third slice
    monkeypatch.setattr(search_module, "SLICE_BYTES", {"cpu": 1, "cuda": 1})
    with pytest.raises(ValueError, match=rf"^{re.escape(paths['q.npy'])}: row 7 \(counting from 0\), query id 'q7',"):
        search(tmp_path, paths)
    assert not list(tmp_path.glob("hits*")) and not (tmp_path / "summary.json").exists()


def test_inputs_that_do_not_belong_together_name_their_files(tmp_path):
    docs = vectors("cosine", 5, 7)
    paths = corpus(tmp_path, docs, vectors("cosine", 3, 8), query_ids=["a", "b"])
    with pytest.raises(ValueError, match=rf"^{re.escape(paths['q.ids.parquet'])}: 2 ids, but "
                                         rf"{re.escape(paths['q.npy'])} holds 3 vectors"):
        search(tmp_path, paths)
    paths = corpus(tmp_path, docs, vectors("cosine", 3, 8), doc_ids=["a"])
    with pytest.raises(ValueError, match=rf"^{re.escape(paths['ids.parquet'])}: 1 ids, but "
                                         rf"{re.escape(paths['docs.npy'])} holds 5 vectors"):
        search(tmp_path, paths)
    paths = corpus(tmp_path, docs, np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match=rf"^{re.escape(paths['q.npy'])}: vectors of shape \(4,\), but "
                                         rf"{re.escape(paths['docs.npy'])}'s are \(6,\)"):
        search(tmp_path, paths)


def test_faiss_gives_the_hits_of_torch(tmp_path):
    pytest.importorskip("faiss")
    paths = corpus(tmp_path, vectors("cosine", 30, 9), vectors("cosine", 6, 10))
    _, by_torch = search(tmp_path / "torch", paths, k=4, block_size=8)
    stats, by_faiss = search(tmp_path / "faiss", paths, k=4, block_size=8, backend="faiss")
    a, b = pq.read_table(by_torch["hits"]).to_pydict(), pq.read_table(by_faiss["hits"]).to_pydict()
    assert {key: a[key] for key in ("query_id", "rank", "id", "row")} == {key: b[key] for key in
                                                                          ("query_id", "rank", "id", "row")}
    np.testing.assert_allclose(a["score"], b["score"], rtol=1e-5, atol=1e-5)
    assert (stats["backend"], stats["device"]) == ("faiss", "cpu")


# --- SearchParams --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"k": 0}, r"search\.k 0: expected 1 or more"),
        ({"block_size": 0}, r"search\.block_size 0: expected 1 or more"),
        ({"backend": "annoy"}, r"search\.backend 'annoy': expected one of torch, faiss"),
        # Not a search key: the model's sentence-transformers config decides it.
        ({"similarity": "euclidean"}, r"the model's similarity_fn_name is 'euclidean': search ranks by cosine or dot"),
    ],
)
def test_search_params_that_cannot_work_name_their_key(kw, message):
    with pytest.raises(ValueError, match=message):
        SearchParams(**kw)
