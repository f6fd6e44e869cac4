"""merge: per-chunk matrices and ids concatenated in chunk order, row k with id k."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardflow.embed.merge import MergeParams, merge_embeddings


def write_chunk(folder: Path, i: int, emb: np.ndarray, ids: list[str]) -> tuple[str, str]:
    npy, idp = folder / f"embed_{i}.npy", folder / f"embed_{i}.ids.parquet"
    np.save(npy, emb)
    pq.write_table(pa.table({"id": pa.array(ids, pa.string())}), idp)
    return str(npy), str(idp)


def chunk(i: int, rows: int, dim: int = 4, dtype="float32") -> tuple[np.ndarray, list[str]]:
    """Row r of chunk i holds the value i*100 + r everywhere, so rows are recognisable."""
    emb = np.repeat((i * 100 + np.arange(rows, dtype=np.float64))[:, None], dim, axis=1).astype(dtype)
    return emb, [f"c{i}-r{r}" for r in range(rows)]


def merge(tmp_path: Path, chunks: list[tuple[np.ndarray, list[str]]], **params) -> tuple[dict, np.ndarray, list[str]]:
    written = [write_chunk(tmp_path, i, emb, ids) for i, (emb, ids) in enumerate(chunks)]
    out_npy, out_ids = tmp_path / "out" / "embeddings.npy", tmp_path / "out" / "ids.parquet"
    info = merge_embeddings([w[0] for w in written], [w[1] for w in written], out_npy, out_ids, MergeParams(**params))
    return info, np.load(out_npy), pq.read_table(out_ids).column("id").to_pylist()


def test_rows_follow_chunk_order(tmp_path):
    info, emb, ids = merge(tmp_path, [chunk(0, 3), chunk(1, 2), chunk(2, 4)])
    assert info == {"chunks": 3, "rows": 9, "dim": 4, "dtype": "float32"}
    assert emb[:, 0].tolist() == [0, 1, 2, 100, 101, 200, 201, 202, 203]


def test_row_k_of_embeddings_is_row_k_of_ids(tmp_path):
    _, emb, ids = merge(tmp_path, [chunk(0, 3), chunk(1, 2), chunk(2, 4)])
    for k, rid in enumerate(ids):
        i, r = (int(part[1:]) for part in rid.split("-"))
        assert emb[k, 0] == i * 100 + r


def test_copies_in_blocks_smaller_than_a_chunk(tmp_path):
    _, emb, ids = merge(tmp_path, [chunk(0, 7), chunk(1, 5)], block_rows=3)
    assert emb[:, 0].tolist() == list(range(7)) + [100 + r for r in range(5)]
    assert len(ids) == 12


def test_empty_chunks_contribute_nothing(tmp_path):
    _, emb, ids = merge(tmp_path, [chunk(0, 0), chunk(1, 2), chunk(2, 0), chunk(3, 1)])
    assert emb[:, 0].tolist() == [100, 101, 300]
    assert ids == ["c1-r0", "c1-r1", "c3-r0"]


def test_empty_chunk_with_placeholder_shape_and_dtype_is_accepted(tmp_path):
    # np.empty((0, 0)) is float64 with width 0: neither may veto the real chunks' float16 x 4.
    placeholder = (np.empty((0, 0)), [])
    info, emb, _ = merge(tmp_path, [chunk(0, 2, dtype="float16"), placeholder])
    assert (info["dim"], info["dtype"], emb.dtype) == (4, "float16", np.float16)


def test_all_chunks_empty_gives_an_empty_matrix(tmp_path):
    info, emb, ids = merge(tmp_path, [chunk(0, 0), chunk(1, 0)])
    assert emb.shape == (0, 4) and ids == [] and info["rows"] == 0


def test_float16_is_kept(tmp_path):
    info, emb, _ = merge(tmp_path, [chunk(0, 2, dtype="float16"), chunk(1, 3, dtype="float16")])
    assert emb.dtype == np.float16 and info["dtype"] == "float16"
    assert emb[:, 0].tolist() == [0, 1, 100, 101, 102]


def test_rows_ids_mismatch_raises(tmp_path):
    emb, ids = chunk(0, 3)
    with pytest.raises(ValueError, match="has 3 rows but .* has 2 ids"):
        merge(tmp_path, [(emb, ids[:2])])


def test_dimension_mismatch_raises(tmp_path):
    with pytest.raises(ValueError, match=r"dimensions \[4, 8\]"):
        merge(tmp_path, [chunk(0, 2, dim=4), chunk(1, 2, dim=8)])


def test_dtype_mismatch_raises(tmp_path):
    with pytest.raises(ValueError, match="dtypes .*float16.*float32"):
        merge(tmp_path, [chunk(0, 2, dtype="float32"), chunk(1, 2, dtype="float16")])


def test_a_chunk_that_disagrees_is_named_with_the_chunk_it_disagrees_with(tmp_path):
    """Of a thousand chunks, which one? The error named the widths and dtypes found, no
    file (an empty chunk's placeholder width is no matter, as above)."""
    chunks = [chunk(0, 2), (np.empty((0, 0)), []), chunk(2, 2), chunk(3, 2, dim=8), chunk(4, 2, dtype="float16")]
    with pytest.raises(ValueError) as info:
        merge(tmp_path, chunks)
    assert str(info.value).startswith(
        f"{tmp_path / 'embed_3.npy'}: vectors of 8 x float32, where {tmp_path / 'embed_0.npy'} has 4 x float32"
    )
    with pytest.raises(ValueError, match=r"embed_1\.npy: vectors of 4 x float16, where .*embed_0\.npy has 4 x float32"):
        merge(tmp_path, [chunk(0, 2), chunk(1, 2, dtype="float16")])


def test_non_matrix_chunk_raises(tmp_path):
    with pytest.raises(ValueError, match="expected a 2-D matrix"):
        merge(tmp_path, [(np.zeros(3, dtype=np.float32), ["a", "b", "c"])])


def test_unequal_file_lists_raise(tmp_path):
    with pytest.raises(ValueError, match="2 embedding files but 1 id files"):
        merge_embeddings(["a.npy", "b.npy"], ["a.parquet"], tmp_path / "e.npy", tmp_path / "i.parquet")


def test_ids_without_an_id_column_are_refused_by_name(tmp_path):
    # The right number of rows, no "id" column: refused before anything is written.
    npy, _ = write_chunk(tmp_path, 0, *chunk(0, 2))
    bad_ids = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"name": ["a", "b"]}), bad_ids)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"bad\.parquet: no 'id' column \(columns: name\)"):
        merge_embeddings([npy], [str(bad_ids)], out / "embeddings.npy", out / "ids.parquet")
    assert not out.exists()


@pytest.mark.parametrize("damage", ["cut", "empty"])
def test_an_ids_file_that_is_not_parquet_is_named(tmp_path, damage):
    """pyarrow's own error ("Parquet magic bytes not found in footer") named no file: with
    a thousand chunks, which one?"""
    written = [write_chunk(tmp_path, i, *chunk(i, 2)) for i in range(3)]
    bad = Path(written[1][1])
    bad.write_bytes(bad.read_bytes()[: len(bad.read_bytes()) // 2] if damage == "cut" else b"")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"embed_1\.ids\.parquet: not a readable Parquet file \("):
        merge_embeddings([w[0] for w in written], [w[1] for w in written], out / "embeddings.npy", out / "ids.parquet")
    assert not out.exists()


def test_failure_while_writing_leaves_no_output(tmp_path):
    # Ids that pass the checks but cannot be cast to strings: the merge fails mid-write.
    npy, _ = write_chunk(tmp_path, 0, *chunk(0, 2))
    bad_ids = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": [[1], [2]]}), bad_ids)
    out = tmp_path / "out"
    with pytest.raises(pa.ArrowNotImplementedError):
        merge_embeddings([npy], [str(bad_ids)], out / "embeddings.npy", out / "ids.parquet")
    assert list(out.iterdir()) == []


def test_a_null_id_names_its_file_and_row(tmp_path):
    # Arrow's own error ("Casting field 'id' with null values to non-nullable") named neither.
    ids = [f"c1-r{r}" for r in range(5)]
    ids[3] = None
    with pytest.raises(ValueError, match=r"embed_1\.ids\.parquet: row 3 \(counting from 0\) has a null id"):
        merge(tmp_path, [chunk(0, 2), (chunk(1, 5)[0], ids)], id_batch=2)  # in the second batch of the file
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize(
    ("over", "message"),
    [  # one case a field; each was accepted here
        ({"block_rows": "500"}, "block_rows '500': expected an integer or None"),
        ({"id_batch": None}, "id_batch None: expected an integer"),
    ],
)
def test_a_wrong_python_type_is_one_error_naming_the_field(over, message):
    with pytest.raises(TypeError) as info:
        MergeParams(**over)
    assert str(info.value) == message
    assert MergeParams(block_rows=500.0, id_batch=16.0) == MergeParams(block_rows=500, id_batch=16)
