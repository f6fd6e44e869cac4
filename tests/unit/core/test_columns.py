"""The id column file and the duplicate check over it."""

from __future__ import annotations

import pyarrow.parquet as pq

from shardflow.core import columns
from shardflow.core.columns import ID_ROW_GROUP, duplicate_ids, read_id_array, read_ids, write_ids_parquet


def counting(batches):
    """A batch factory that counts how often it is read."""
    calls = []

    def factory():
        calls.append(1)
        return iter(batches)

    return factory, calls


def test_colliding_hashes_are_settled_by_the_ids_themselves(monkeypatch):
    """Hashes by length: 'ab', 'cd' and 'ef' collide but are different ids; only the
    ids really repeated (across batches too) are reported, each once, sorted."""
    monkeypatch.setattr(columns, "_id_hash", len)
    factory, calls = counting([["ab", "cd", "xyz"], ["ef", "xyz", "ab", "xyz"]])
    assert duplicate_ids(factory) == (7, ["ab", "xyz"])
    factory, calls = counting([["ab", "cd"], ["ef"]])
    assert duplicate_ids(factory) == (3, []) and len(calls) == 2


def test_without_equal_hashes_the_ids_are_read_once():
    factory, calls = counting([["a", "b"], [], ["c"]])
    assert duplicate_ids(factory) == (3, []) and len(calls) == 1
    factory, calls = counting([])
    assert duplicate_ids(factory) == (0, []) and len(calls) == 1


def test_ids_round_trip_verbatim_in_bounded_row_groups(tmp_path):
    """Row k is id k, byte for byte (ids that look like paths, non-ASCII, empty), in row
    groups of ID_ROW_GROUP so that merge and verify hold one group at a time."""
    odd = ["../../escape", "C:\\x", "", "naïve 😀", "a\nb"]
    ids = odd + [f"d{i}" for i in range(ID_ROW_GROUP + 1 - len(odd))]
    path = tmp_path / "ids.parquet"
    write_ids_parquet(path, ids)
    assert read_ids(path) == ids
    assert pq.ParquetFile(path).metadata.num_row_groups == 2
    array = read_id_array(path)  # one chunk: a take across hundreds of them is ~10x slower
    assert array.to_pylist() == ids and array.take([ID_ROW_GROUP, 3]).to_pylist() == [ids[-1], "naïve 😀"]
    assert [p.name for p in tmp_path.iterdir()] == ["ids.parquet"]  # no temporary left


def test_no_ids_is_a_readable_empty_column(tmp_path):
    path = tmp_path / "ids.parquet"
    write_ids_parquet(path, [])
    assert read_ids(path) == [] and columns.open_ids(path).schema_arrow.names == ["id"]
    assert len(read_id_array(path)) == 0


def test_id_at_reads_the_row_from_its_row_group(tmp_path):
    """verify names a failed row's id with it; a row the file does not have is None."""
    ids = [f"d{i}" for i in range(ID_ROW_GROUP + 3)]
    path = tmp_path / "ids.parquet"
    write_ids_parquet(path, ids)
    at = [0, ID_ROW_GROUP - 1, ID_ROW_GROUP, ID_ROW_GROUP + 2]
    assert [columns.id_at(path, k) for k in at] == [ids[k] for k in at]
    assert [columns.id_at(path, k) for k in (ID_ROW_GROUP + 3, -1)] == [None, None]


def test_ids_at_reads_each_row_group_holding_a_row_once_and_no_other(tmp_path, monkeypatch):
    """make hits checks many hits' rows against ids.parquet: each group that holds one is
    read once, one holding none not at all; rows the file lacks are left out."""
    ids = [f"d{i}" for i in range(2 * ID_ROW_GROUP + 3)]
    path = tmp_path / "ids.parquet"
    write_ids_parquet(path, ids)
    read = []
    real = columns.open_ids

    def counting(p):
        f = real(p)
        group = f.read_row_group
        f.read_row_group = lambda i, **kw: read.append(i) or group(i, **kw)
        return f

    monkeypatch.setattr(columns, "open_ids", counting)
    rows = [2 * ID_ROW_GROUP + 1, 0, 5, 2 * ID_ROW_GROUP, 5, 2 * ID_ROW_GROUP + 3, -1]
    assert columns.ids_at(path, rows) == {r: ids[r] for r in (0, 5, 2 * ID_ROW_GROUP, 2 * ID_ROW_GROUP + 1)}
    assert read == [0, 2]
