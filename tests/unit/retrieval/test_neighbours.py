"""A corpus's own nearest neighbours per chunk, and the near-duplicate pairs, groups and
summary their merge derives."""

from __future__ import annotations

import json
import logging
import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardflow.core.columns import write_ids_parquet
from shardflow.retrieval.neighbours import (
    TABLE_SCHEMA,
    NeighbourParams,
    chunk_neighbours,
    chunk_rows,
    merge_neighbours,
)

OUTPUTS = {"table": "neighbours.parquet", "pairs": "near_duplicates.parquet", "groups": "duplicate_groups.parquet",
           "summary": "summary.json", "figure": "nearest.png"}


def params(**kw) -> NeighbourParams:
    return NeighbourParams(**{"device": "cpu", **kw})


def descending_ids(n: int) -> list[str]:
    # Lexical order opposite to corpus order: a group named by its smallest id, not its
    # first row, would show.
    return [f"doc-{n - i:03d}" for i in range(n)]


def run(tmp_path, vectors, p: NeighbourParams, chunk_sizes, ids=None):
    """Every chunk's job, then the merge; returns (summary, output paths, ids)."""
    ids = ids or descending_ids(len(vectors))
    npy, ids_path = str(tmp_path / "embeddings.npy"), str(tmp_path / "ids.parquet")
    np.save(npy, np.asarray(vectors, dtype=np.float32))
    write_ids_parquet(ids_path, ids)
    manifest = {"chunks": [{"items": n} for n in chunk_sizes]}
    tables = []
    for chunk in range(len(chunk_sizes)):
        tables.append(str(tmp_path / f"chunk{chunk}.parquet"))
        record = chunk_neighbours(npy, ids_path, chunk_rows(manifest, chunk), p, tables[-1])
        assert record["items"] == chunk_sizes[chunk]
        assert record["k"] == min(p.k, len(ids) - 1)  # what a chunk can list
    outputs = {name: str(tmp_path / file) for name, file in OUTPUTS.items()}
    return merge_neighbours(tables, ids_path, p, outputs), outputs, ids


def brute_force(vectors: np.ndarray, k: int, cosine: bool):
    """Each row's k best other rows by (score descending, row ascending), in float64."""
    x = vectors.astype(np.float64)
    if cosine:
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    scores = x @ x.T
    rows = np.arange(len(x))
    ranked = []
    for i, s in enumerate(scores):
        others = rows[rows != i]
        order = others[np.lexsort((others, -s[others]))][:k]
        ranked.append((order, s[order]))
    return ranked


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_each_documents_neighbours_are_the_brute_force_ranking(tmp_path, similarity):
    rng = np.random.default_rng(7)
    if similarity == "dot":
        # Small integers: dot products are exact in float32 and tie often, so the row
        # order among equal scores is checked too.
        vectors = rng.integers(-2, 3, size=(37, 6)).astype(np.float32)
    else:
        # Norms from 0.1 to 10: ranked by raw dot products, the long vectors would win.
        vectors = rng.normal(size=(37, 6)) * rng.uniform(0.1, 10, size=(37, 1))
    k = 5
    # A dot model's threshold has no default (its scores have no fixed scale).
    threshold = {"duplicate_threshold": 6.0} if similarity == "dot" else {}
    summary, outputs, ids = run(tmp_path, vectors, params(k=k, block_size=8, similarity=similarity, **threshold),
                                [10, 0, 15, 12])
    table = pq.read_table(outputs["table"]).to_pydict()
    assert summary["rows"] == len(table["id"]) == 37 * k
    assert table["row"] == [r for r in range(37) for _ in range(k)]  # chunk order, then rank
    assert table["rank"] == list(range(1, k + 1)) * 37
    assert table["id"] == [ids[r] for r in table["row"]]
    assert table["neighbour"] == [ids[r] for r in table["neighbour_row"]]
    got = np.array(table["neighbour_row"]).reshape(37, k)
    got_scores = np.array(table["score"]).reshape(37, k)
    for row, (want, want_scores) in enumerate(brute_force(np.asarray(vectors), k, similarity == "cosine")):
        np.testing.assert_array_equal(got[row], want, err_msg=f"row {row}")
        np.testing.assert_allclose(got_scores[row], want_scores, rtol=1e-5, atol=1e-6)


def chain_and_twins() -> np.ndarray:
    """12 documents: a chain a (row 1) ~ b (row 3) ~ c (row 6) at cosine 0.97, a and c at
    cos(2 * 14.1 degrees) = 0.88; three identical vectors at rows 2, 5 and 8; the rest one
    axis each, orthogonal to everything."""
    theta = math.acos(0.97)
    vectors = np.zeros((12, 12), np.float32)
    for row, angle in ((1, 0.0), (3, theta), (6, 2 * theta)):
        vectors[row, :2] = (math.cos(angle), math.sin(angle))
    vectors[[2, 5, 8], 2] = 3.0
    vectors[[2, 5, 8], 3] = 1.0
    for axis, row in enumerate((0, 4, 7, 9, 10, 11), start=4):
        vectors[row, axis] = 1.0 + axis  # not unit: cosine normalises them
    return vectors


def test_near_duplicates_pairs_once_and_single_linkage_groups(tmp_path):
    summary, outputs, ids = run(tmp_path, chain_and_twins(), params(k=3, duplicate_threshold=0.95), [5, 7])
    pairs = pq.read_table(outputs["pairs"]).to_pydict()
    assert list(zip(pairs["row"], pairs["neighbour_row"], strict=True)) == [(1, 3), (2, 5), (2, 8), (3, 6), (5, 8)]
    assert pairs["id"] == [ids[r] for r in pairs["row"]]
    assert pairs["neighbour"] == [ids[r] for r in pairs["neighbour_row"]]
    np.testing.assert_allclose(pairs["score"], [0.97, 1, 1, 0.97, 1], rtol=1e-5)

    groups = pq.read_table(outputs["groups"]).to_pydict()
    assert groups["row"] == [1, 2, 3, 5, 6, 8]
    assert groups["id"] == [ids[r] for r in groups["row"]]
    # a and c (0.88 apart) share b's group; each group is named by its first row.
    assert groups["group"] == [ids[1], ids[2], ids[1], ids[2], ids[1], ids[2]]
    assert groups["keep"] == [True, True, False, False, False, False]

    want = {"near_duplicate_pairs": 5, "documents_in_groups": 6, "groups": 2, "largest_group": 3,
            "documents_to_drop": 4, "share_to_drop": 4 / 12, "saturated": 0}
    assert {key: summary[key] for key in want} == want
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def write_chunk_table(path, rows: list[tuple[str, int, str, float, int, int]]) -> str:
    columns = list(zip(*rows, strict=True))
    pq.write_table(pa.Table.from_arrays([pa.array(c) for c in columns], schema=TABLE_SCHEMA), path)
    return str(path)


def merge_tables(tmp_path, ids: list[str], tables: list[str], p: NeighbourParams):
    write_ids_parquet(tmp_path / "ids.parquet", ids)
    outputs = {name: str(tmp_path / file) for name, file in OUTPUTS.items()}
    return merge_neighbours(tables, str(tmp_path / "ids.parquet"), p, outputs), outputs


def test_a_pair_seen_from_both_sides_is_listed_once_with_the_higher_score(tmp_path):
    # Cosine's per-block normalisation can give the two sides scores a last bit apart;
    # written here by hand, 0.96 from x's side and 0.97 from y's, listed in y's chunk first.
    ids = ["y", "x", "z"]
    late = write_chunk_table(tmp_path / "c1.parquet", [("x", 1, "y", 0.96, 1, 0), ("x", 2, "z", 0.1, 1, 2)])
    early = write_chunk_table(tmp_path / "c0.parquet", [("y", 1, "x", 0.97, 0, 1), ("y", 2, "z", 0.2, 0, 2)])
    summary, outputs = merge_tables(tmp_path, ids, [early, late], params(k=2, duplicate_threshold=0.95))
    pairs = pq.read_table(outputs["pairs"]).to_pylist()
    assert len(pairs) == 1
    assert pairs[0]["row"] == 0 and pairs[0]["neighbour_row"] == 1
    assert pairs[0]["id"] == "y" and pairs[0]["neighbour"] == "x"
    assert pairs[0]["score"] == pytest.approx(0.97)
    assert summary["near_duplicate_pairs"] == 1


def test_a_score_equal_to_the_threshold_is_a_near_duplicate(tmp_path):
    # dot over small integers: exact in float32, 3.0 the threshold itself.
    # Rows 0 and 2 score 3.0, row 1 scores 2.0 with both, row 3 nothing above 0.
    vectors = [[1, 1, 1, 0], [1, 1, 0, 1], [1, 1, 1, 0], [0, 0, 0, -2]]
    summary, outputs, _ = run(tmp_path, vectors, params(k=3, similarity="dot", duplicate_threshold=3.0), [4])
    pairs = pq.read_table(outputs["pairs"]).to_pydict()
    assert list(zip(pairs["row"], pairs["neighbour_row"], strict=True)) == [(0, 2)]
    assert pairs["score"] == [3.0]


def test_a_score_within_the_slack_below_the_threshold_counts_and_one_past_it_does_not(tmp_path):
    """float32 rounding moves a score of identical vectors by up to about 7e-7 at dim 384
    (SLACK, 2e-6 of the threshold's size): a score that close below the threshold counts."""
    from shardflow.retrieval.neighbours import SLACK

    four = float(np.float32(0.5 - 0.4 * SLACK))  # inside the slack (SLACK x 1, the size's floor)
    five = float(np.float32(0.5 - 1.5 * SLACK))  # past it
    table = write_chunk_table(tmp_path / "c0.parquet", [("a", 1, "b", 0.5, 0, 1), ("b", 1, "a", 0.5, 1, 0),
                                                        ("c", 1, "a", four, 2, 0), ("d", 1, "a", five, 3, 0)])
    summary, outputs = merge_tables(tmp_path, ["a", "b", "c", "d"], [table], params(k=1, duplicate_threshold=0.5))
    assert pq.read_table(outputs["pairs"]).to_pydict()["neighbour_row"] == [1, 2]
    assert summary["near_duplicate_pairs"] == 2


@pytest.mark.parametrize("pairs, dim", [(20, 48), (5000, 384)])
def test_a_threshold_of_1_finds_every_pair_of_identical_vectors(tmp_path, pairs, dim):
    """Pairs of identical vectors at cosine: float32 normalising and summing put their
    scores anywhere from 0.99999946 to 1.0000007 at dim 384; a threshold of 1 found 10 of
    20 pairs with no slack, and 4,999 of 5,000 with a slack of 4 float32 steps."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(pairs, dim)).astype(np.float32) * rng.uniform(0.3, 30, size=(pairs, 1)).astype(np.float32)
    vectors = np.repeat(base, 2, axis=0)
    summary, outputs, _ = run(tmp_path, vectors, params(k=1, duplicate_threshold=1.0), [2 * pairs])
    assert summary["near_duplicate_pairs"] == summary["groups"] == pairs
    found = pq.read_table(outputs["pairs"]).to_pydict()
    assert list(zip(found["row"], found["neighbour_row"], strict=True)) == [(2 * i, 2 * i + 1) for i in range(pairs)]


def test_a_dot_model_without_a_threshold_stops_naming_the_key_and_the_scores_spread(tmp_path):
    """The default 0.95 is a cosine's: a dot model's scores near 29 made every document a
    near-duplicate of every other, one group keeping one document of 300."""
    vectors = np.random.default_rng(5).normal(size=(30, 16)).astype(np.float32) + 2
    with pytest.raises(ValueError, match=r"neighbours.duplicate_threshold is null, and the model scores by dot "
                                         r"product.*runs from [\d.]+ to [\d.]+: median") as err:
        run(tmp_path, vectors, params(k=3, similarity="dot"), [30])
    assert not (tmp_path / OUTPUTS["table"]).exists() and not (tmp_path / OUTPUTS["summary"]).exists(), err
    assert params(similarity="cosine").threshold() == 0.95 and params(similarity="dot").threshold() is None


def test_a_threshold_that_drops_most_of_the_corpus_is_warned_of_with_the_scores_spread(tmp_path, caplog):
    vectors = np.random.default_rng(5).normal(size=(30, 16)).astype(np.float32) + 2
    with caplog.at_level(logging.WARNING, logger="shardflow.retrieval.neighbours"):
        summary, _, _ = run(tmp_path, vectors, params(k=3, similarity="dot", duplicate_threshold=1.0), [30])
    assert summary["share_to_drop"] > 0.5
    (said,) = [r.getMessage() for r in caplog.records if "would drop" in r.getMessage()]
    assert "duplicate_threshold 1" in said and "median" in said, said


def test_a_chunk_searched_in_slices_gives_the_table_it_gives_whole(tmp_path, monkeypatch):
    """A chunk's vectors are searched a slice at a time: a whole chunk of 1.25 M x 768
    vectors held three float32 copies, about 11.5 GB, in a job of 6."""
    import shardflow.retrieval.neighbours as nb

    vectors = np.random.default_rng(9).normal(size=(23, 8)).astype(np.float32)
    for name in ("whole", "sliced"):
        (tmp_path / name).mkdir()
    _, outputs, _ = run(tmp_path / "whole", vectors, params(k=4), [23])
    import shardflow.retrieval.search as search

    # 5 rows a slice, each its own pass over the corpus, and a table of 2 documents' rows
    # written at a time
    monkeypatch.setattr(search, "QUERY_BLOCK", 5)
    monkeypatch.setattr(search, "SLICE_BYTES", {"cpu": 1, "cuda": 1})
    monkeypatch.setattr(nb, "MERGE_BATCH_ROWS", 8)
    _, sliced, _ = run(tmp_path / "sliced", vectors, params(k=4), [23])
    whole, parts = pq.read_table(outputs["table"]).to_pydict(), pq.read_table(sliced["table"]).to_pydict()
    assert pq.ParquetFile(sliced["table"]).metadata.num_rows == 23 * 4
    # A query block's shape picks the product's kernel: a score may move by its last bit.
    np.testing.assert_allclose(parts.pop("score"), whole.pop("score"), rtol=1e-6)
    assert parts == whole


def test_the_merge_reads_chunk_tables_a_batch_at_a_time_to_the_same_outputs(tmp_path, monkeypatch):
    """Read whole, a chunk table of 2 M documents at k 10 held about 8 GB with URL-long
    ids. Batches that cut through a document's rows give the same table, pairs, groups
    and summary."""
    import shardflow.retrieval.neighbours as nb

    vectors = chain_and_twins()
    for name in ("whole", "batched"):
        (tmp_path / name).mkdir()
    whole, outputs, _ = run(tmp_path / "whole", vectors, params(k=3), [5, 7])
    monkeypatch.setattr(nb, "MERGE_BATCH_ROWS", 2)  # 3 rows a document: every other batch cuts one
    batched, outputs_b, _ = run(tmp_path / "batched", vectors, params(k=3), [5, 7])
    assert batched == whole
    for name in ("table", "pairs", "groups"):
        assert pq.read_table(outputs_b[name]).equals(pq.read_table(outputs[name])), name


def test_a_chunk_table_of_other_columns_is_refused_naming_it(tmp_path):
    ids = ["a", "b"]
    write_ids_parquet(tmp_path / "ids.parquet", ids)
    pq.write_table(pa.table({"id": ["a"], "score": [1.0]}), tmp_path / "c0.parquet")
    outputs = {name: str(tmp_path / file) for name, file in OUTPUTS.items()}
    with pytest.raises(ValueError, match=r"c0.parquet: not a neighbours table"):
        merge_neighbours([str(tmp_path / "c0.parquet")], str(tmp_path / "ids.parquet"), params(k=1), outputs)


def test_groups_along_a_long_chain_in_any_order_are_one_group_named_by_its_first_row():
    """The groups are components found by spreading minimum labels: a chain of 2,000 links
    given last link first is one group whose root is its first row; two chains stay two."""
    from shardflow.retrieval.neighbours import _group_roots

    a = np.arange(1999, 0, -1)
    roots = _group_roots(np.concatenate([a, a + 3000]), np.concatenate([a - 1, a + 2999]), 5000)
    assert (roots[:2000] == 0).all() and (roots[3000:] == 3000).all()
    assert (roots[2000:3000] == np.arange(2000, 3000)).all()  # in no pair: each its own


def test_documents_whose_k_neighbours_all_reach_the_threshold_are_counted_and_warned_of(tmp_path, caplog):
    # Rows 1, 2 and 4 are identical: with k 2 each lists only the other two, all at 1.0.
    # Rows 0 and 3 are a pair whose second neighbours are far: not saturated.
    vectors = np.zeros((8, 8), np.float32)
    vectors[[1, 2, 4], 0] = 1.0
    vectors[[0, 3], 1] = 1.0
    vectors[[0, 3], 2] = [0.1, 0.0]
    for row, axis in ((5, 3), (6, 4), (7, 5)):
        vectors[row, axis] = 1.0
    with caplog.at_level(logging.WARNING, logger="shardflow.retrieval.neighbours"):
        summary, _, ids = run(tmp_path, vectors, params(k=2, duplicate_threshold=0.9), [3, 5])
    assert summary["saturated"] == 3
    assert summary["near_duplicate_pairs"] == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "3 documents" in warnings[0] and repr(ids[1]) in warnings[0]


def test_neighbours_that_are_the_whole_rest_of_the_corpus_are_not_saturated(tmp_path, caplog):
    # Three identical documents, k 5: each sees both others, and there is no one else
    # left to be a twin, so no larger k would find more.
    with caplog.at_level(logging.WARNING, logger="shardflow.retrieval.neighbours"):
        summary, _, _ = run(tmp_path, np.ones((3, 4), np.float32), params(k=5), [2, 1])
    assert summary["saturated"] == 0
    assert summary["documents_in_groups"] == 3
    assert not [r for r in caplog.records if "larger neighbours.k" in r.getMessage()]


def test_k_larger_than_the_corpus_lists_every_other_document_without_padding(tmp_path):
    vectors = np.arange(16, dtype=np.float32).reshape(4, 4) ** 0.5
    summary, outputs, ids = run(tmp_path, vectors, params(k=10, block_size=3), [1, 3])
    table = pq.read_table(outputs["table"]).to_pydict()
    assert summary["rows"] == len(table["row"]) == 4 * 3
    assert table["rank"] == [1, 2, 3] * 4
    assert min(table["neighbour_row"]) >= 0
    for row in range(4):
        listed = [n for r, n in zip(table["row"], table["neighbour_row"], strict=True) if r == row]
        assert sorted(listed) == [r for r in range(4) if r != row]
    assert None not in table["neighbour"]


def test_a_corpus_of_one_document_has_empty_tables_and_still_a_summary_and_figure(tmp_path):
    summary, outputs, _ = run(tmp_path, [[1.0, 2.0]], params(k=3), [1])
    for name in ("table", "pairs", "groups"):
        assert pq.read_table(outputs[name]).num_rows == 0, name
    assert summary["documents"] == 1
    assert summary["rows"] == summary["near_duplicate_pairs"] == summary["groups"] == 0
    assert summary["nearest_score"] is None and summary["nearest_histogram"] is None
    with open(outputs["figure"], "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"


def test_chunk_rows_follow_the_manifest_and_refuse_a_chunk_it_does_not_list():
    manifest = {"chunks": [{"items": 3}, {"items": 0}, {"items": 4}]}
    assert [chunk_rows(manifest, c) for c in range(3)] == [range(0, 3), range(3, 3), range(3, 7)]
    for chunk in (3, -1):
        with pytest.raises(ValueError, match=rf"chunk {chunk}: .* 3 chunks"):
            chunk_rows(manifest, chunk)


def test_a_manifest_past_the_ids_is_refused_naming_the_ids_file(tmp_path):
    np.save(tmp_path / "embeddings.npy", np.ones((5, 2), np.float32))
    write_ids_parquet(tmp_path / "ids.parquet", [f"d{i}" for i in range(5)])
    rows = chunk_rows({"chunks": [{"items": 3}, {"items": 4}]}, 1)
    with pytest.raises(ValueError, match=r"ids\.parquet: 5 rows.* rows 3 to 6"):
        chunk_neighbours(str(tmp_path / "embeddings.npy"), str(tmp_path / "ids.parquet"), rows, params(),
                         str(tmp_path / "out.parquet"))
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize(
    ("kw", "error", "named"),
    [
        ({"k": 0}, ValueError, "neighbours.k 0"),
        ({"k": "10"}, TypeError, "k '10'"),
        ({"duplicate_threshold": math.nan}, ValueError, "duplicate_threshold nan"),
        ({"duplicate_threshold": math.inf}, ValueError, "duplicate_threshold inf"),
        ({"backend": "annoy"}, ValueError, "neighbours.backend 'annoy'"),
        ({"similarity": "euclidean"}, ValueError, "similarity_fn_name is 'euclidean'"),
        ({"block_size": 0}, ValueError, "neighbours.block_size 0"),
    ],
)
def test_params_refuse_bad_values_naming_the_key(kw, error, named):
    with pytest.raises(error, match=re.escape(named)):
        NeighbourParams(**kw)


def test_under_dot_a_document_below_its_k_best_keeps_them_all():
    """A dot-product model can rank other documents above a document's own vector: where
    its own row is not among the k + 1 searched, the k best are kept, and where it is,
    it goes and the k others stay, in rank order."""
    from shardflow.retrieval.neighbours import _without_own_rows

    indices = np.array([[1, 2, 3], [1, 0, 2]])  # row 0 (first 0): not listed; row 1: listed first
    scores = np.array([[10.0, 9.0, 8.0], [100.0, 10.0, 9.0]], np.float32)
    kept, kept_scores = _without_own_rows(indices, scores, 0, 2)
    assert kept.tolist() == [[1, 2], [0, 2]] and kept_scores.tolist() == [[10.0, 9.0], [10.0, 9.0]]
